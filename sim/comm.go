package sim

import (
	"context"
	"fmt"
	"sync"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Comm is a comm.Comm over the tensors of one simulated device, wrapping a
// host communicator (comm/local in tests). Each operation first waits,
// off the caller's goroutine, for the work issued on the backend's stream
// before the call (the kernels that wrote its inputs), then runs the inner
// operation on host aliases of the tensors. Operations reach the inner
// communicator in call order, so every rank's sequence stays the same.
//
// What it does not do is order later kernels after an Async operation:
// as comm.Work says, the tensors are the operation's until Wait returns,
// and a kernel issued before then that touches them races with it. The
// inner communicator's deadlines and errors pass through unchanged; a
// tensor not on the device, or inputs of a device whose kernel failed,
// fail the operation on every rank as a bad argument would.
//
// Like NCCL's, its operations move device memory only: a host tensor is
// a bad argument. Host data goes through comm.AllGatherHost and
// comm.AllReduceHost, which stage it on the device (StageHost: Comm is a
// comm.DeviceStager, as package nccl's communicator is), so that code
// that works here works over NCCL.
type Comm struct {
	comm.Interposed // every operation through Start
	b               *Backend

	mu   sync.Mutex
	prev chan struct{} // closed once the previous operation reached inner
}

var (
	_ comm.Comm         = (*Comm)(nil)
	_ comm.DeviceStager = (*Comm)(nil)
)

// NewComm wraps inner for tensors of b's device, ordered on b's stream.
func NewComm(inner comm.Comm, b *Backend) *Comm {
	prev := make(chan struct{})
	close(prev)
	c := &Comm{b: b, prev: prev}
	c.Interposed = comm.Interposed{Inner: inner, IP: c, Wrap: func(sub comm.Comm) comm.Comm { return NewComm(sub, b) }}
	return c
}

// Backend is the rank's backend, for an engine given this communicator.
func (c *Comm) Backend() backend.Backend { return c.b }

// StageHost lends a device copy of host tensor h (comm.DeviceStager):
// the copy in is ordered on the backend's stream before the operation
// that uses it, and done's copy back runs after that operation's Wait.
func (c *Comm) StageHost(h *tensor.Tensor) (*tensor.Tensor, func(copyBack bool) error, error) {
	d, err := c.b.Empty(h.DType(), h.Shape()...)
	if err != nil {
		return nil, nil, err
	}
	if err := c.b.Copy(d, h); err != nil {
		d.Free()
		return nil, nil, err
	}
	return d, func(copyBack bool) error {
		var err error
		if copyBack {
			err = c.b.Copy(h, d)
		}
		d.Free()
		return err
	}, nil
}

// host returns a host alias of a device tensor, or nil with an error for
// a tensor the device cannot move (nil is left to the inner check).
func (c *Comm) host(a comm.Arg) (*tensor.Tensor, error) {
	t := a.T
	switch {
	case t == nil:
		return nil, nil
	case t.Device().IsCPU():
		return nil, fmt.Errorf("%w: %s %v is in host memory: collectives on %v move device memory only, as NCCL's do (stage host data with the comm.*Host helpers: AllGatherHost, AllReduceHost, AllToAllHost, SendHost, RecvHost)", comm.ErrInvalid, a.Name, t, c.b.Device())
	case t.Device() != c.b.Device():
		return nil, fmt.Errorf("%w: %s %v is not on %v", comm.ErrInvalid, a.Name, t, c.b.Device())
	case !t.Contiguous():
		return nil, fmt.Errorf("%w: %s %v is not contiguous", comm.ErrInvalid, a.Name, t)
	case t.Storage().Freed():
		return nil, fmt.Errorf("%w: %s %v: storage already freed", comm.ErrInvalid, a.Name, t)
	}
	st := t.Storage()
	alias := tensor.WrapStorage(st.Ptr(), st.Bytes(), tensor.CPU, nil)
	h, err := tensor.FromStorage(alias, t.DType(), t.Offset(), t.Shape()...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %v: %w", comm.ErrInvalid, a.Name, t, err)
	}
	return h, nil
}

// Start (comm.Interposer) issues op: it checks and aliases the tensors
// now, marks the stream's work so far, and hands the inner call (run,
// given the aliases in args order) to a goroutine that waits for its turn
// and that work.
// A bad argument still reaches inner, as nil tensors, so that the group
// fails on every rank.
func (c *Comm) Start(ctx context.Context, op comm.OpKind, args []comm.Arg, run func(ctx context.Context, hs []*tensor.Tensor) comm.Work) comm.Work {
	w := comm.NewPending(op, c.Name(), c.Rank())
	hs := make([]*tensor.Tensor, len(args))
	var argErr error
	for i, a := range args {
		h, err := c.host(a)
		if err != nil && argErr == nil {
			argErr = err
		}
		hs[i] = h
	}
	if argErr != nil {
		clear(hs)
	}
	ready := c.b.s.mark()
	c.mu.Lock()
	prev, mine := c.prev, make(chan struct{})
	c.prev = mine
	c.mu.Unlock()
	go func() {
		defer w.Finish()
		<-prev
		select { // a cancelled ctx still reaches inner, which fails the group
		case <-ready:
		case <-ctx.Done():
		}
		if err := c.b.d.sticky(); err != nil && argErr == nil && len(args) > 0 {
			argErr = fmt.Errorf("%w: the inputs come from a device whose kernel failed: %w", comm.ErrInvalid, err)
			clear(hs)
		}
		iw := run(ctx, hs)
		close(mine)
		<-iw.Done()
		w.Err = iw.Wait(context.Background())
		if argErr != nil {
			w.Err = &comm.Error{Op: op.String(), Group: c.Name(), Rank: c.Rank(), Err: argErr}
		}
	}()
	return w
}
