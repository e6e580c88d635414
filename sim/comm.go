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
type Comm struct {
	inner comm.Comm
	b     *Backend

	mu   sync.Mutex
	prev chan struct{} // closed once the previous operation reached inner
}

var _ comm.Comm = (*Comm)(nil)

// NewComm wraps inner for tensors of b's device, ordered on b's stream.
func NewComm(inner comm.Comm, b *Backend) *Comm {
	prev := make(chan struct{})
	close(prev)
	return &Comm{inner: inner, b: b, prev: prev}
}

// Backend is the rank's backend, for an engine given this communicator.
func (c *Comm) Backend() backend.Backend { return c.b }

// Rank is this rank's index in the group.
func (c *Comm) Rank() int { return c.inner.Rank() }

// Size is the number of ranks in the group.
func (c *Comm) Size() int { return c.inner.Size() }

// Name identifies the group in errors.
func (c *Comm) Name() string { return c.inner.Name() }

// Members lists the world rank of each group rank.
func (c *Comm) Members() []int { return c.inner.Members() }

// Close closes the inner handle. No call may be in flight.
func (c *Comm) Close() error { return c.inner.Close() }

// work is a wrapped operation.
type work struct {
	c    *Comm
	op   comm.OpKind
	done chan struct{}
	err  error
}

func (w *work) Done() <-chan struct{} { return w.done }

func (w *work) Wait(ctx context.Context) error {
	return comm.WaitDone(ctx, w.done, func() error { return w.err }, w.op, w.c.Name(), w.c.Rank())
}

// arg is one tensor argument of an operation.
type arg struct {
	name string
	t    *tensor.Tensor
}

// host returns a host alias of a device tensor, or nil with an error for
// a tensor the device cannot move (nil is left to the inner check).
func (c *Comm) host(a arg) (*tensor.Tensor, error) {
	t := a.t
	switch {
	case t == nil:
		return nil, nil
	case t.Device().IsCPU():
		// host memory (comm.AllGatherBytes and the other agreements) is
		// not in stream order: the inner comm moves it as it is
		return t, nil
	case t.Device() != c.b.Device():
		return nil, fmt.Errorf("%w: %s %v is not on %v", comm.ErrInvalid, a.name, t, c.b.Device())
	case !t.Contiguous():
		return nil, fmt.Errorf("%w: %s %v is not contiguous", comm.ErrInvalid, a.name, t)
	case t.Storage().Freed():
		return nil, fmt.Errorf("%w: %s %v: storage already freed", comm.ErrInvalid, a.name, t)
	}
	st := t.Storage()
	alias := tensor.WrapStorage(st.Ptr(), st.Bytes(), tensor.CPU, nil)
	h, err := tensor.FromStorage(alias, t.DType(), t.Offset(), t.Shape()...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %v: %w", comm.ErrInvalid, a.name, t, err)
	}
	return h, nil
}

// start issues op: it checks and aliases the tensors now, marks the
// stream's work so far, and hands the inner call (run, given the aliases
// in args order) to a goroutine that waits for its turn and that work.
// A bad argument still reaches inner, as nil tensors, so that the group
// fails on every rank.
func (c *Comm) start(ctx context.Context, op comm.OpKind, args []arg, run func(ctx context.Context, hs []*tensor.Tensor) comm.Work) *work {
	w := &work{c: c, op: op, done: make(chan struct{})}
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
		defer close(w.done)
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
		w.err = iw.Wait(context.Background())
		if argErr != nil {
			w.err = &comm.Error{Op: op.String(), Group: c.Name(), Rank: c.Rank(), Err: argErr}
		}
	}()
	return w
}

// wait is the synchronous form: the operation is over when it returns, so
// it never holds the tensors afterwards (a cancelled ctx ends it inside).
func (w *work) wait() error {
	<-w.done
	return w.err
}

// AllReduce reduces t across the ranks (see comm.Comm).
func (c *Comm) AllReduce(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) error {
	return c.allReduce(ctx, t, op).wait()
}

// AllReduceAsync starts AllReduce.
func (c *Comm) AllReduceAsync(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) comm.Work {
	return c.allReduce(ctx, t, op)
}

func (c *Comm) allReduce(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) *work {
	return c.start(ctx, comm.OpAllReduce, []arg{{"t", t}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
		return c.inner.AllReduceAsync(ctx, h[0], op)
	})
}

// ReduceScatter reduces src and keeps this rank's chunk in dst (see comm.Comm).
func (c *Comm) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) error {
	return c.reduceScatter(ctx, dst, src, op).wait()
}

// ReduceScatterAsync starts ReduceScatter.
func (c *Comm) ReduceScatterAsync(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) comm.Work {
	return c.reduceScatter(ctx, dst, src, op)
}

func (c *Comm) reduceScatter(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) *work {
	return c.start(ctx, comm.OpReduceScatter, []arg{{"dst", dst}, {"src", src}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
		return c.inner.ReduceScatterAsync(ctx, h[0], h[1], op)
	})
}

// AllGather concatenates every rank's src into dst (see comm.Comm).
func (c *Comm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	return c.allGather(ctx, dst, src).wait()
}

// AllGatherAsync starts AllGather.
func (c *Comm) AllGatherAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.allGather(ctx, dst, src)
}

func (c *Comm) allGather(ctx context.Context, dst, src *tensor.Tensor) *work {
	return c.start(ctx, comm.OpAllGather, []arg{{"dst", dst}, {"src", src}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
		return c.inner.AllGatherAsync(ctx, h[0], h[1])
	})
}

// Broadcast copies root's t to every rank (see comm.Comm).
func (c *Comm) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	return c.broadcast(ctx, t, root).wait()
}

// BroadcastAsync starts Broadcast.
func (c *Comm) BroadcastAsync(ctx context.Context, t *tensor.Tensor, root int) comm.Work {
	return c.broadcast(ctx, t, root)
}

func (c *Comm) broadcast(ctx context.Context, t *tensor.Tensor, root int) *work {
	return c.start(ctx, comm.OpBroadcast, []arg{{"t", t}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
		return c.inner.BroadcastAsync(ctx, h[0], root)
	})
}

// Reduce reduces every rank's t into root's (see comm.Comm).
func (c *Comm) Reduce(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) error {
	return c.reduce(ctx, t, root, op).wait()
}

// ReduceAsync starts Reduce.
func (c *Comm) ReduceAsync(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) comm.Work {
	return c.reduce(ctx, t, root, op)
}

func (c *Comm) reduce(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) *work {
	return c.start(ctx, comm.OpReduce, []arg{{"t", t}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
		return c.inner.ReduceAsync(ctx, h[0], root, op)
	})
}

// Send delivers t to peer (see comm.Comm).
func (c *Comm) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.send(ctx, t, peer).wait()
}

// SendAsync starts Send.
func (c *Comm) SendAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.send(ctx, t, peer)
}

func (c *Comm) send(ctx context.Context, t *tensor.Tensor, peer int) *work {
	return c.start(ctx, comm.OpSend, []arg{{"t", t}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
		return c.inner.SendAsync(ctx, h[0], peer)
	})
}

// Recv fills t from peer (see comm.Comm).
func (c *Comm) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.recv(ctx, t, peer).wait()
}

// RecvAsync starts Recv.
func (c *Comm) RecvAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.recv(ctx, t, peer)
}

func (c *Comm) recv(ctx context.Context, t *tensor.Tensor, peer int) *work {
	return c.start(ctx, comm.OpRecv, []arg{{"t", t}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
		return c.inner.RecvAsync(ctx, h[0], peer)
	})
}

// AllToAll exchanges chunks between every pair of ranks (see comm.Comm).
func (c *Comm) AllToAll(ctx context.Context, dst, src *tensor.Tensor) error {
	return c.allToAll(ctx, dst, src).wait()
}

// AllToAllAsync starts AllToAll.
func (c *Comm) AllToAllAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.allToAll(ctx, dst, src)
}

func (c *Comm) allToAll(ctx context.Context, dst, src *tensor.Tensor) *work {
	return c.start(ctx, comm.OpAllToAll, []arg{{"dst", dst}, {"src", src}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
		return c.inner.AllToAllAsync(ctx, h[0], h[1])
	})
}

// Barrier returns once every rank has called it (after this rank's
// stream has run the work issued before it).
func (c *Comm) Barrier(ctx context.Context) error { return c.barrier(ctx).wait() }

// BarrierAsync starts Barrier.
func (c *Comm) BarrierAsync(ctx context.Context) comm.Work { return c.barrier(ctx) }

func (c *Comm) barrier(ctx context.Context) *work {
	return c.start(ctx, comm.OpBarrier, nil, func(ctx context.Context, _ []*tensor.Tensor) comm.Work {
		return c.inner.BarrierAsync(ctx)
	})
}

// Split partitions the group (see comm.Comm); the new groups are wrapped
// on the same backend.
func (c *Comm) Split(ctx context.Context, color, key int, name string) (comm.Comm, error) {
	var sub comm.Comm
	w := c.start(ctx, comm.OpSplit, nil, func(ctx context.Context, _ []*tensor.Tensor) comm.Work {
		s, err := c.inner.Split(ctx, color, key, name)
		sub = s
		return doneWork(err)
	})
	if err := w.wait(); err != nil {
		return nil, err
	}
	if sub == nil {
		return nil, nil
	}
	return NewComm(sub, c.b), nil
}

// doneWork is a comm.Work already over with err.
type finished struct {
	ch  chan struct{}
	err error
}

func doneWork(err error) comm.Work {
	f := &finished{ch: make(chan struct{}), err: err}
	close(f.ch)
	return f
}

func (f *finished) Done() <-chan struct{}      { return f.ch }
func (f *finished) Wait(context.Context) error { return f.err }
