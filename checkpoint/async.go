package checkpoint

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// AsyncSaver saves checkpoints in the background: Save copies the state to
// host memory and returns, a goroutine writes it while training goes on.
// At most one save is in flight, so host memory holds at most one copy of
// the state (the copy buffers are reused from save to save); a state
// larger than AsyncOptions.MaxBytes is saved synchronously instead. The
// next Save, Wait or Close waits for the save in flight, and a failed
// background save is reported by that next call (on every rank alike).
//
// The background save runs its collectives on its own group, split from
// Options.Comm by NewAsyncSaver, so that they never interleave with the
// training's; so does the agreement over AsyncOptions.Outcome. Methods
// must be called from one goroutine, on every rank in the same order
// (Done excepted).
type AsyncSaver struct {
	opts    Options
	ao      AsyncOptions
	own     comm.Comm // split from Options.Comm, closed by Close
	outcome comm.Comm // split from AsyncOptions.Outcome, closed by Close

	bufs    []*tensor.Tensor
	running bool
	mu      sync.Mutex    // guards done, which Done reads from any goroutine
	done    chan struct{} // closed when the last save started is over
	res     *Result
	err     error
	blocked time.Duration
}

// AsyncOptions are an AsyncSaver's options beyond Options.
type AsyncOptions struct {
	// MaxBytes makes Save write a state larger than this synchronously;
	// <= 0 means no limit. Not with Outcome (a rank that writes nothing
	// cannot tell).
	MaxBytes int64
	// Outcome, when not nil, is a second group over which every save's
	// outcome is agreed once it is written, in the background, on a group
	// NewAsyncSaver splits from it: a save that failed on any rank of
	// Options.Comm fails on every rank of Outcome too, and a rank of
	// Outcome that writes nothing (Skip) learns it. deepgo's data-parallel
	// engine under tensor parallelism passes the TP group: TP rank 0 of
	// each data rank writes every TP rank's shards (Options.Comm is its
	// data-parallel group), the other TP ranks skip.
	Outcome comm.Comm
	// OutcomeName names Outcome in errors ("the tensor-parallel group").
	OutcomeName string
	// Skip makes this rank's saves write nothing: each takes part only in
	// the agreement over Outcome (which it requires) and ignores its
	// state. Every rank of Options.Comm must pass the same Skip.
	Skip bool
}

// NewAsyncSaver is a collective over o.Comm (it splits a group for the
// background saves; not when ao.Skip) and over ao.Outcome when set (it
// splits one from it too).
func NewAsyncSaver(ctx context.Context, o Options, ao AsyncOptions) (*AsyncSaver, error) {
	switch {
	case ao.Skip && ao.Outcome == nil:
		return nil, errors.New("checkpoint: NewAsyncSaver: Skip needs an Outcome group (a rank that writes nothing must learn the outcome from one)")
	case ao.MaxBytes > 0 && ao.Outcome != nil:
		return nil, errors.New("checkpoint: NewAsyncSaver: MaxBytes with an Outcome group: not supported (a rank that writes nothing cannot tell which saves are synchronous)")
	}
	a := &AsyncSaver{opts: o, ao: ao}
	if !ao.Skip && o.Comm != nil && o.Comm.Size() > 1 {
		c, err := o.Comm.Split(ctx, 0, o.Comm.Rank(), "")
		if err != nil {
			return nil, fmt.Errorf("checkpoint: splitting a group for background saves: %w", err)
		}
		a.own, a.opts.Comm = c, c
	}
	if ao.Outcome != nil {
		c, err := ao.Outcome.Split(ctx, 0, ao.Outcome.Rank(), "")
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("checkpoint: splitting a group for the background saves' outcome over %s: %w", cmp.Or(ao.OutcomeName, "the outcome group"), err)
		}
		a.outcome = c
	}
	return a, nil
}

// Save waits for the previous save, returning its error if it failed
// (without starting this one); then it agrees on the tag with the other
// ranks, copies st to host memory and starts writing it in the
// background. st may change as soon as Save returns. With
// AsyncOptions.Skip it writes nothing (st may be nil) and only starts the
// background agreement on the outcome.
func (a *AsyncSaver) Save(ctx context.Context, tag string, st *State) error {
	start := time.Now()
	defer func() { a.blocked = time.Since(start) }()
	if _, err := a.Wait(); err != nil {
		return fmt.Errorf("checkpoint: previous background save failed: %w", err)
	}
	if a.ao.Skip {
		a.start(ctx, a.opts, nil)
		return nil
	}
	o := a.opts
	o.Tag = cmp.Or(tag, DefaultTag(st.Step))
	if err := AgreeTag(ctx, o.Comm, o.Tag); err != nil {
		return err
	}
	if a.ao.MaxBytes > 0 && st.Bytes() > a.ao.MaxBytes {
		_, err := Save(ctx, o, st)
		return err
	}
	snap, err := a.snapshot(st)
	if err != nil {
		return err
	}
	a.start(ctx, o, snap)
	return nil
}

// start writes snap (nil: nothing) with o in the background, then agrees
// on the outcome over the Outcome group when there is one.
func (a *AsyncSaver) start(ctx context.Context, o Options, snap *State) {
	done := make(chan struct{})
	a.mu.Lock()
	a.running, a.done = true, done
	a.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer close(done)
		var res *Result
		var err error
		if snap != nil {
			res, err = Save(ctx, o, snap)
		}
		if a.outcome != nil {
			if aerr := agree(ctx, a.outcome, "background save (over "+cmp.Or(a.ao.OutcomeName, "the outcome group")+")", err); aerr != nil {
				err = aerr
			}
		}
		a.res, a.err = res, err
	}()
}

// Done returns a channel closed once the save in flight when Done is
// called is over (already closed when none is). Unlike the other methods
// it may be called from any goroutine: a process that must exit (on a
// signal) waits on it, so as not to cut short a checkpoint being written.
// A nil *AsyncSaver has no save in flight.
func (a *AsyncSaver) Done() <-chan struct{} {
	if a == nil {
		return closedChan
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		return closedChan
	}
	return a.done
}

// closedChan is Done's answer when nothing was ever saved.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Blocked is how long the last Save call blocked the caller.
func (a *AsyncSaver) Blocked() time.Duration { return a.blocked }

// snapshot copies st's tensors into the reusable host buffers.
func (a *AsyncSaver) snapshot(st *State) (*State, error) {
	cp := *st
	cp.Params = slices.Clone(st.Params)
	cp.Config = slices.Clone(st.Config)
	cp.Topology = maps.Clone(st.Topology)
	cp.Meta = make(map[string]json.RawMessage, len(st.Meta))
	for k, v := range st.Meta {
		cp.Meta[k] = slices.Clone(v)
	}
	cp.Tensors = make([]Entry, len(st.Tensors))
	for i, e := range st.Tensors {
		if i < len(a.bufs) && (a.bufs[i].DType() != e.Data.DType() || a.bufs[i].Numel() != e.Data.Numel()) {
			a.bufs[i].Free()
			a.bufs[i] = nil
		}
		if i >= len(a.bufs) {
			a.bufs = append(a.bufs, nil)
		}
		if a.bufs[i] == nil {
			b, err := tensor.Empty(e.Data.DType(), e.Data.Numel())
			if err != nil {
				return nil, fmt.Errorf("checkpoint: host copy of %q: %w", e.Name, err)
			}
			a.bufs[i] = b
		}
		if err := copyTensor(a.bufs[i], e.Data); err != nil {
			return nil, fmt.Errorf("checkpoint: host copy of %q: %w", e.Name, err)
		}
		v, err := a.bufs[i].Reshape(e.Data.Shape()...)
		if err != nil {
			return nil, err
		}
		if e.Shard != nil {
			s := *e.Shard
			e.Shard = &s
		}
		e.Data = v
		cp.Tensors[i] = e
	}
	for _, b := range a.bufs[len(st.Tensors):] {
		b.Free()
	}
	a.bufs = a.bufs[:len(st.Tensors)]
	return &cp, nil
}

// Wait blocks until the save in flight (if any) is over and returns its
// result; its error is reported once.
func (a *AsyncSaver) Wait() (*Result, error) {
	if !a.running {
		return nil, nil
	}
	<-a.done
	a.running = false
	res, err := a.res, a.err
	a.res, a.err = nil, nil
	return res, err
}

// Close waits for the save in flight, frees the host copies and the
// group, and returns the save's error.
func (a *AsyncSaver) Close() error {
	_, err := a.Wait()
	for _, b := range a.bufs {
		b.Free()
	}
	a.bufs = nil
	for _, c := range []*comm.Comm{&a.own, &a.outcome} {
		if *c != nil {
			(*c).Close()
			*c = nil
		}
	}
	return err
}
