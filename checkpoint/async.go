package checkpoint

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// AsyncSaver saves checkpoints in the background: Save copies the state to
// host memory and returns, a goroutine writes it while training goes on.
// At most one save is in flight, so host memory holds at most one copy of
// the state (the copy buffers are reused from save to save); a state
// larger than MaxBytes is saved synchronously instead. The next Save, Wait
// or Close waits for the save in flight, and a failed background save is
// reported by that next call (on every rank alike).
//
// The background save runs its collectives on its own group, split from
// Options.Comm by NewAsyncSaver, so that they never interleave with the
// training's. Methods must be called from one goroutine, on every rank in
// the same order.
type AsyncSaver struct {
	opts     Options
	maxBytes int64
	own      comm.Comm // the split group, closed by Close

	bufs    []*tensor.Tensor
	running bool
	done    chan struct{}
	res     *Result
	err     error
	blocked time.Duration
}

// NewAsyncSaver is a collective over o.Comm (it splits a group for the
// background saves). maxBytes <= 0 means no limit.
func NewAsyncSaver(ctx context.Context, o Options, maxBytes int64) (*AsyncSaver, error) {
	a := &AsyncSaver{opts: o, maxBytes: maxBytes}
	if o.Comm != nil && o.Comm.Size() > 1 {
		c, err := o.Comm.Split(ctx, 0, o.Comm.Rank(), "")
		if err != nil {
			return nil, fmt.Errorf("checkpoint: splitting a group for background saves: %w", err)
		}
		a.own, a.opts.Comm = c, c
	}
	return a, nil
}

// Save waits for the previous save, returning its error if it failed
// (without starting this one); then it agrees on the tag with the other
// ranks, copies st to host memory and starts writing it in the
// background. st may change as soon as Save returns.
func (a *AsyncSaver) Save(ctx context.Context, tag string, st *State) error {
	start := time.Now()
	defer func() { a.blocked = time.Since(start) }()
	if _, err := a.Wait(); err != nil {
		return fmt.Errorf("checkpoint: previous background save failed: %w", err)
	}
	o := a.opts
	o.Tag = cmp.Or(tag, DefaultTag(st.Step))
	if err := AgreeTag(ctx, o.Comm, o.Tag); err != nil {
		return err
	}
	if a.maxBytes > 0 && st.Bytes() > a.maxBytes {
		_, err := Save(ctx, o, st)
		return err
	}
	snap, err := a.snapshot(st)
	if err != nil {
		return err
	}
	a.running, a.done = true, make(chan struct{})
	go func() {
		defer close(a.done)
		a.res, a.err = Save(context.WithoutCancel(ctx), o, snap)
	}()
	return nil
}

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
	if a.own != nil {
		a.own.Close()
		a.own = nil
	}
	return err
}
