// Package staged is the in-process collective backend for ranks that
// share one device, or any device whose backend has no communicator of its
// own: it wraps a host comm.Comm (comm/local ranks as goroutines) and
// moves a device tensor's bytes through host buffers with the device
// backend's Copy, the one way data crosses between host and device.
//
// Each operation copies its device inputs to host buffers (be.Copy orders
// after the work queued on be and returns with the data in place), runs
// the inner operation on them, and, once that succeeded, copies the
// outputs back (host to device, in stream order before any kernel issued
// after Wait returns). Host tensors pass straight through. Operations
// reach the inner comm in call order, so every rank's sequence stays the
// same whatever the copies cost.
//
// Faults: the inner comm's deadlines and errors (*comm.Error naming the
// ranks at fault) come back unchanged. A tensor the device cannot move, or
// a copy to the host that fails (a device whose kernel failed), still
// enters the inner operation, with nil tensors, so that the inner comm
// fails the group on every rank (the others' errors name this one) rather
// than leave them waiting; this rank's error wraps comm.ErrInvalid and the
// staging error. A copy back that fails after the inner operation
// succeeded breaks the handle and, through an invalid inner call, the
// group: the other ranks' next calls fail naming this rank, and this
// rank's later calls fail with comm.ErrAborted wrapping the copy's error. The inner deadline starts when the operation
// enters the inner comm, after its inputs reached the host.
package staged

import (
	"context"
	"fmt"
	"sync"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Comm is a comm.Comm over the tensors of be's device (and the host),
// staged through host buffers around an inner host comm.
type Comm struct {
	comm.Interposed // every operation through Start
	be              backend.Backend
	cache           cache

	mu     sync.Mutex
	prev   chan struct{} // closed once the previous operation entered inner
	broken error         // a failed copy back: every later call fails
}

var _ comm.Comm = (*Comm)(nil)

// New wraps inner, a comm over host memory, for tensors on be.Device().
func New(inner comm.Comm, be backend.Backend) *Comm {
	prev := make(chan struct{})
	close(prev)
	c := &Comm{be: be, prev: prev}
	c.Interposed = comm.Interposed{Inner: inner, IP: c, Wrap: func(sub comm.Comm) comm.Comm { return New(sub, be) }}
	return c
}

// Backend is the backend whose device's memory this comm moves.
func (c *Comm) Backend() backend.Backend { return c.be }

// Release frees the staging buffers kept between calls and leaves the
// inner handle open: for the owner of this wrapper who does not own the
// comm it wraps (an engine wrapping its trainer's comm). Later calls
// still work, each freeing its buffers when done. No call may be in
// flight.
func (c *Comm) Release() error {
	c.cache.close()
	return nil
}

// Close frees the staging buffers and closes the inner handle. No call
// may be in flight.
func (c *Comm) Close() error {
	c.cache.close()
	return c.Inner.Close()
}

func (c *Comm) errorf(op comm.OpKind, err error) *comm.Error {
	return &comm.Error{Op: op.String(), Group: c.Name(), Rank: c.Rank(), Err: err}
}

// Start (comm.Interposer) runs op on a goroutine: once the previous operation entered the
// inner comm, it stages args in, enters inner through run (given the host
// tensors in args order), waits for it and stages the outputs back. done
// closes only after the copies back, so outputs are never written after
// Wait returns.
func (c *Comm) Start(ctx context.Context, op comm.OpKind, args []comm.Arg, run func(ctx context.Context, hs []*tensor.Tensor) comm.Work) comm.Work {
	w := comm.NewPending(op, c.Name(), c.Rank())
	c.mu.Lock()
	prev, mine := c.prev, make(chan struct{})
	c.prev = mine
	c.mu.Unlock()
	go func() {
		defer w.Finish()
		<-prev
		c.mu.Lock()
		broken := c.broken
		c.mu.Unlock()
		if broken != nil {
			c.poison(ctx)
			close(mine)
			w.Err = c.errorf(op, fmt.Errorf("%w: this handle broke earlier: %w", comm.ErrAborted, broken))
			return
		}
		st, stageErr := c.stageIn(args)
		defer c.release(st)
		hs := st.hs
		if stageErr != nil {
			hs = make([]*tensor.Tensor, len(args))
		}
		iw := run(ctx, hs)
		close(mine)
		innerErr := iw.Wait(context.Background())
		switch {
		case stageErr != nil:
			w.Err = c.errorf(op, fmt.Errorf("%w (the inner operation, entered without tensors so that the group fails: %v)", stageErr, innerErr))
		case innerErr != nil:
			w.Err = innerErr
		default:
			if err := c.stageOut(args, st); err != nil {
				c.mu.Lock()
				if c.broken == nil {
					c.broken = err
				}
				c.mu.Unlock()
				c.poison(context.Background())
				w.Err = c.errorf(op, err)
			}
		}
	}()
	return w
}

// poison breaks the inner group for every rank: a nil tensor is a bad
// argument on this rank under every backend's checks, which fails the
// group (the others' errors name this rank) rather than leave the others
// to wait for a call that will not come.
func (c *Comm) poison(ctx context.Context) {
	<-c.Inner.AllReduceAsync(ctx, nil, comm.Sum).Done()
}
