package comm

// This file holds the small agreements built on AllGather that the
// checkpoint and the engine need: every rank contributes a value and every
// rank sees all of them, so every rank reaches the same verdict. They go
// through host tensors, so they need a Comm that takes host tensors (the
// local and mpi backends).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/tensor"
)

// AllGatherInt64s is a collective that gives every rank every rank's vals,
// concatenated in rank order. Every rank passes the same number of values
// (a rank passing another number makes every rank fail with an *Error
// wrapping ErrMismatch). A nil Comm is a world of one.
func AllGatherInt64s(ctx context.Context, c Comm, vals []int64) ([]int64, error) {
	raw := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.NativeEndian.PutUint64(raw[8*i:], uint64(v))
	}
	all, err := allGatherRaw(ctx, c, tensor.Int64, raw)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(all)/8)
	for i := range out {
		out[i] = int64(binary.NativeEndian.Uint64(all[8*i:]))
	}
	return out, nil
}

// AllGatherBytes is a collective that gives every rank every rank's b, in
// rank order; the ranks' lengths may differ. A nil Comm is a world of one.
func AllGatherBytes(ctx context.Context, c Comm, b []byte) ([][]byte, error) {
	lens, err := AllGatherInt64s(ctx, c, []int64{int64(len(b))})
	if err != nil {
		return nil, err
	}
	width := slices.Max(lens)
	padded := make([]byte, width)
	copy(padded, b)
	all, err := allGatherRaw(ctx, c, tensor.Uint8, padded)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(lens))
	for r, l := range lens {
		out[r] = all[int64(r)*width : int64(r)*width+l : int64(r)*width+l]
	}
	return out, nil
}

// allGatherRaw all-gathers mine, the bytes of len(mine)/dt.Size() elements
// of dt, through host tensors (staged on the device for a comm that
// moves device memory only), and returns every rank's bytes in rank
// order (a fresh slice).
func allGatherRaw(ctx context.Context, c Comm, dt tensor.DType, mine []byte) ([]byte, error) {
	if c == nil || c.Size() == 1 {
		return slices.Clone(mine), nil
	}
	n := len(mine) / dt.Size()
	src, err := tensor.Empty(dt, n)
	if err != nil {
		return nil, err
	}
	defer src.Free()
	dst, err := tensor.Empty(dt, n*c.Size())
	if err != nil {
		return nil, err
	}
	defer dst.Free()
	sb, _ := src.RawBytes()
	copy(sb, mine)
	if err := AllGatherHost(ctx, c, dst, src); err != nil {
		return nil, err
	}
	db, _ := dst.RawBytes()
	return slices.Clone(db), nil
}

// RankError is returned, the same on every rank, by Agree when one or more
// ranks failed a step: it names the step and each failing rank's error.
// Like os.PathError its message has no package prefix, "<phase> failed on
// rank 1: ...": the caller's wrapping says where it comes from.
type RankError struct {
	// Phase is the step that failed, e.g. "write global_step10".
	Phase string
	// Errs maps a failing rank to its error message.
	Errs map[int]string
	// Local is this rank's own error, nil when it was another rank's fault.
	Local error
}

// Error lists the failing ranks and their errors, by rank.
func (e *RankError) Error() string {
	parts := make([]string, 0, len(e.Errs))
	for _, r := range slices.Sorted(maps.Keys(e.Errs)) {
		parts = append(parts, fmt.Sprintf("rank %d: %s", r, e.Errs[r]))
	}
	return fmt.Sprintf("%s failed on %s", e.Phase, strings.Join(parts, "; "))
}

// Unwrap returns this rank's own error, so that errors.Is sees through.
func (e *RankError) Unwrap() error { return e.Local }

// Cancelled reports whether err comes from a context that was cancelled
// or ran out of time, on this rank or (through the group) another's: the
// cause to name first, before what the collective was for.
func Cancelled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Agree is a collective: every rank passes its outcome err of phase, and
// every rank gets nil only if every rank succeeded, else a *RankError
// naming every failing rank (its Local is this rank's err). A failure of
// the exchange itself (a rank that does not take part, a timeout) is
// returned instead, wrapping the comm *Error (and err, if not nil). A nil
// Comm is a world of one.
func Agree(ctx context.Context, c Comm, phase string, err error) error {
	msg := ""
	if err != nil {
		msg = err.Error()
		if msg == "" {
			msg = "error" // an empty message must still count as a failure
		}
	}
	all, gerr := AllGatherBytes(ctx, c, []byte(msg))
	switch {
	case gerr != nil && Cancelled(gerr):
		if err != nil {
			return fmt.Errorf("%s: stopped: a rank's call was cancelled or past its deadline: %w (this rank's outcome: %w)", phase, gerr, err)
		}
		return fmt.Errorf("%s: stopped: a rank's call was cancelled or past its deadline: %w", phase, gerr)
	case gerr != nil && err != nil:
		return fmt.Errorf("%s: %w (and the ranks could not agree: %w)", phase, err, gerr)
	case gerr != nil:
		return fmt.Errorf("%s: the ranks could not agree (did every rank take part?): %w", phase, gerr)
	}
	re := &RankError{Phase: phase, Errs: map[int]string{}, Local: err}
	for r, m := range all {
		if len(m) > 0 {
			re.Errs[r] = string(m)
		}
	}
	if len(re.Errs) == 0 {
		return nil
	}
	return re
}

// MismatchError is returned, the same on every rank, by AgreeString when
// the ranks passed different values. It wraps ErrMismatch.
type MismatchError struct {
	// What names the value, e.g. "tag".
	What string
	// Values holds each rank's value, by rank.
	Values []string
}

// Error names the ranks whose value differs from rank 0's, e.g. `ranks
// disagree on the tag: rank 0 has "a", rank 2 has "b"`. Like RankError it
// has no package prefix.
func (e *MismatchError) Error() string {
	var diff []string
	for r, v := range e.Values {
		if v != e.Values[0] {
			diff = append(diff, fmt.Sprintf("rank %d has %q", r, v))
		}
	}
	return fmt.Sprintf("ranks disagree on the %s: rank 0 has %q, %s", e.What, e.Values[0], strings.Join(diff, ", "))
}

// Unwrap returns ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// AgreeString is a collective that checks every rank passes the same s,
// what naming it in the error. It returns a *MismatchError on every rank
// when they differ, and the comm *Error (within the group's timeout) when
// some rank does not take part. A nil Comm is a world of one.
func AgreeString(ctx context.Context, c Comm, what, s string) error {
	all, err := AllGatherBytes(ctx, c, []byte(s))
	if err != nil {
		return err
	}
	vals := make([]string, len(all))
	for r, b := range all {
		vals[r] = string(b)
	}
	if slices.ContainsFunc(vals, func(v string) bool { return v != s }) {
		return &MismatchError{What: what, Values: vals}
	}
	return nil
}
