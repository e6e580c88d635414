package checkpoint

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// allGatherBytes gives every rank every rank's b, in rank order. A nil
// Comm is a world of one.
func allGatherBytes(ctx context.Context, c comm.Comm, b []byte) ([][]byte, error) {
	if c == nil || c.Size() == 1 {
		return [][]byte{append([]byte(nil), b...)}, nil
	}
	n := c.Size()
	lens, err := tensor.Empty(tensor.Int64, n)
	if err != nil {
		return nil, err
	}
	defer lens.Free()
	mine, err := lens.Slice(c.Rank(), 1)
	if err != nil {
		return nil, err
	}
	ls, _ := lens.Int64s()
	ls[c.Rank()] = int64(len(b))
	if err := c.AllGather(ctx, lens, mine); err != nil {
		return nil, err
	}
	width := int64(1)
	for _, l := range ls {
		width = max(width, l)
	}
	buf, err := tensor.Empty(tensor.Uint8, n*int(width))
	if err != nil {
		return nil, err
	}
	defer buf.Free()
	part, err := buf.Slice(c.Rank()*int(width), int(width))
	if err != nil {
		return nil, err
	}
	pb, _ := part.RawBytes()
	copy(pb, b)
	if err := c.AllGather(ctx, buf, part); err != nil {
		return nil, err
	}
	all, _ := buf.RawBytes()
	out := make([][]byte, n)
	for r := range out {
		out[r] = append([]byte(nil), all[int64(r)*width:int64(r)*width+ls[r]]...)
	}
	return out, nil
}

// RankError is returned, on every rank, when a collective checkpoint
// operation failed on one or more ranks: it names the phase and each
// failing rank's error.
type RankError struct {
	// Phase is the step that failed, e.g. "write shards".
	Phase string
	// Errs maps a failing rank to its error message.
	Errs map[int]string
	// Local is this rank's own error, nil when it was another rank's fault.
	Local error
}

// Error lists the failing ranks and their errors.
func (e *RankError) Error() string {
	parts := make([]string, 0, len(e.Errs))
	for _, r := range slices.Sorted(maps.Keys(e.Errs)) {
		parts = append(parts, fmt.Sprintf("rank %d: %s", r, e.Errs[r]))
	}
	return fmt.Sprintf("checkpoint: %s failed on %s", e.Phase, strings.Join(parts, "; "))
}

// Unwrap returns this rank's own error, so that errors.Is sees through.
func (e *RankError) Unwrap() error { return e.Local }

// agree is a collective: every rank passes its outcome of phase, and every
// rank gets nil only if all succeeded, else the same *RankError. A failure
// of the exchange itself (a rank missing, a timeout) is returned wrapped.
func agree(ctx context.Context, c comm.Comm, phase string, err error) error {
	if c == nil || c.Size() == 1 {
		if err != nil {
			return &RankError{Phase: phase, Errs: map[int]string{0: err.Error()}, Local: err}
		}
		return nil
	}
	msg := ""
	if err != nil {
		msg = err.Error()
		if msg == "" {
			msg = "error"
		}
	}
	all, gerr := allGatherBytes(ctx, c, []byte(msg))
	if gerr != nil {
		if err != nil {
			return fmt.Errorf("checkpoint: %s: %w (and the ranks could not agree: %v)", phase, err, gerr)
		}
		return fmt.Errorf("checkpoint: %s: ranks could not agree (did every rank call it?): %w", phase, gerr)
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

// TagMismatchError says that the ranks passed different tags (or steps)
// to a collective save.
type TagMismatchError struct {
	// Tags holds each rank's tag, by rank.
	Tags []string
}

// Error names the ranks whose tag differs from rank 0's.
func (e *TagMismatchError) Error() string {
	var diff []string
	for r, t := range e.Tags {
		if t != e.Tags[0] {
			diff = append(diff, fmt.Sprintf("rank %d has %q", r, t))
		}
	}
	return fmt.Sprintf("checkpoint: ranks disagree on the tag: rank 0 has %q, %s", e.Tags[0], strings.Join(diff, ", "))
}

// AgreeTag is a collective that checks every rank passes the same tag,
// like DeepSpeed's tag validation (but always fatal). It returns a
// *TagMismatchError on every rank when they differ, and a comm error
// (within the group's timeout) when some rank does not take part.
func AgreeTag(ctx context.Context, c comm.Comm, tag string) error {
	all, err := allGatherBytes(ctx, c, []byte(tag))
	if err != nil {
		return fmt.Errorf("checkpoint: agreeing on tag %q (did every rank call save?): %w", tag, err)
	}
	tags := make([]string, len(all))
	same := true
	for r, b := range all {
		tags[r] = string(b)
		same = same && tags[r] == tags[0]
	}
	if !same {
		return &TagMismatchError{Tags: tags}
	}
	return nil
}
