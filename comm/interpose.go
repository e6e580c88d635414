package comm

import (
	"context"

	"github.com/deepgo-ml/deepgo/tensor"
)

// Arg is one tensor argument of an operation, as an Interposer sees it.
type Arg struct {
	Name string
	T    *tensor.Tensor
	// In: the operation reads T on this rank; Out: it writes T.
	In, Out bool
}

// Interposer starts the operations of an Interposed comm: it prepares the
// tensor arguments (orders them after a device's stream, stages them
// through host buffers, ...), then calls run with the tensors the inner
// comm gets, in args order, and returns the operation's Work, over only
// when the outputs are final.
type Interposer interface {
	Start(ctx context.Context, op OpKind, args []Arg, run func(ctx context.Context, ts []*tensor.Tensor) Work) Work
}

// Interposed is the whole Comm surface over Inner with every operation
// passed through IP: what the comms over device memory (the simulated
// device's, comm/staged) share, so that each writes only its Start. Wrap
// makes the comm of a group Split returns. The synchronous forms return
// once the operation is over, so they never hold the tensors afterwards.
type Interposed struct {
	Inner Comm
	IP    Interposer
	Wrap  func(sub Comm) Comm
}

// Rank is this rank's index in the group.
func (c *Interposed) Rank() int { return c.Inner.Rank() }

// Size is the number of ranks in the group.
func (c *Interposed) Size() int { return c.Inner.Size() }

// Name identifies the group in errors.
func (c *Interposed) Name() string { return c.Inner.Name() }

// Members lists the world rank of each group rank.
func (c *Interposed) Members() []int { return c.Inner.Members() }

// Close closes the inner handle. No call may be in flight.
func (c *Interposed) Close() error { return c.Inner.Close() }

// over waits until w is over and returns its result.
func over(w Work) error {
	<-w.Done()
	return w.Wait(context.Background())
}

func in(name string, t *tensor.Tensor) Arg    { return Arg{Name: name, T: t, In: true} }
func out(name string, t *tensor.Tensor) Arg   { return Arg{Name: name, T: t, Out: true} }
func inOut(name string, t *tensor.Tensor) Arg { return Arg{Name: name, T: t, In: true, Out: true} }

// AllReduce reduces t across the ranks (see Comm).
func (c *Interposed) AllReduce(ctx context.Context, t *tensor.Tensor, op ReduceOp) error {
	return over(c.AllReduceAsync(ctx, t, op))
}

// AllReduceAsync starts AllReduce.
func (c *Interposed) AllReduceAsync(ctx context.Context, t *tensor.Tensor, op ReduceOp) Work {
	return c.IP.Start(ctx, OpAllReduce, []Arg{inOut("t", t)}, func(ctx context.Context, h []*tensor.Tensor) Work {
		return c.Inner.AllReduceAsync(ctx, h[0], op)
	})
}

// ReduceScatter reduces src and keeps this rank's chunk in dst (see Comm).
func (c *Interposed) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op ReduceOp) error {
	return over(c.ReduceScatterAsync(ctx, dst, src, op))
}

// ReduceScatterAsync starts ReduceScatter.
func (c *Interposed) ReduceScatterAsync(ctx context.Context, dst, src *tensor.Tensor, op ReduceOp) Work {
	return c.IP.Start(ctx, OpReduceScatter, []Arg{out("dst", dst), in("src", src)}, func(ctx context.Context, h []*tensor.Tensor) Work {
		return c.Inner.ReduceScatterAsync(ctx, h[0], h[1], op)
	})
}

// AllGather concatenates every rank's src into dst (see Comm).
func (c *Interposed) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	return over(c.AllGatherAsync(ctx, dst, src))
}

// AllGatherAsync starts AllGather.
func (c *Interposed) AllGatherAsync(ctx context.Context, dst, src *tensor.Tensor) Work {
	return c.IP.Start(ctx, OpAllGather, []Arg{out("dst", dst), in("src", src)}, func(ctx context.Context, h []*tensor.Tensor) Work {
		return c.Inner.AllGatherAsync(ctx, h[0], h[1])
	})
}

// Broadcast copies root's t to every rank (see Comm).
func (c *Interposed) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	return over(c.BroadcastAsync(ctx, t, root))
}

// BroadcastAsync starts Broadcast.
func (c *Interposed) BroadcastAsync(ctx context.Context, t *tensor.Tensor, root int) Work {
	a := out("t", t) // the root's t is its input, every other rank's its output
	if root == c.Rank() {
		a = in("t", t)
	}
	return c.IP.Start(ctx, OpBroadcast, []Arg{a}, func(ctx context.Context, h []*tensor.Tensor) Work {
		return c.Inner.BroadcastAsync(ctx, h[0], root)
	})
}

// Reduce reduces every rank's t into root's (see Comm).
func (c *Interposed) Reduce(ctx context.Context, t *tensor.Tensor, root int, op ReduceOp) error {
	return over(c.ReduceAsync(ctx, t, root, op))
}

// ReduceAsync starts Reduce.
func (c *Interposed) ReduceAsync(ctx context.Context, t *tensor.Tensor, root int, op ReduceOp) Work {
	a := in("t", t)
	a.Out = root == c.Rank()
	return c.IP.Start(ctx, OpReduce, []Arg{a}, func(ctx context.Context, h []*tensor.Tensor) Work {
		return c.Inner.ReduceAsync(ctx, h[0], root, op)
	})
}

// Send sends t to peer (see Comm).
func (c *Interposed) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	return over(c.SendAsync(ctx, t, peer))
}

// SendAsync starts Send.
func (c *Interposed) SendAsync(ctx context.Context, t *tensor.Tensor, peer int) Work {
	return c.IP.Start(ctx, OpSend, []Arg{in("t", t)}, func(ctx context.Context, h []*tensor.Tensor) Work {
		return c.Inner.SendAsync(ctx, h[0], peer)
	})
}

// Recv receives t from peer (see Comm).
func (c *Interposed) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	return over(c.RecvAsync(ctx, t, peer))
}

// RecvAsync starts Recv.
func (c *Interposed) RecvAsync(ctx context.Context, t *tensor.Tensor, peer int) Work {
	return c.IP.Start(ctx, OpRecv, []Arg{out("t", t)}, func(ctx context.Context, h []*tensor.Tensor) Work {
		return c.Inner.RecvAsync(ctx, h[0], peer)
	})
}

// AllToAll sends chunk j of src to rank j and receives rank j's chunk
// into chunk j of dst (see Comm).
func (c *Interposed) AllToAll(ctx context.Context, dst, src *tensor.Tensor) error {
	return over(c.AllToAllAsync(ctx, dst, src))
}

// AllToAllAsync starts AllToAll.
func (c *Interposed) AllToAllAsync(ctx context.Context, dst, src *tensor.Tensor) Work {
	return c.IP.Start(ctx, OpAllToAll, []Arg{out("dst", dst), in("src", src)}, func(ctx context.Context, h []*tensor.Tensor) Work {
		return c.Inner.AllToAllAsync(ctx, h[0], h[1])
	})
}

// Barrier returns once every rank has called it (see Comm).
func (c *Interposed) Barrier(ctx context.Context) error { return over(c.BarrierAsync(ctx)) }

// BarrierAsync starts Barrier.
func (c *Interposed) BarrierAsync(ctx context.Context) Work {
	return c.IP.Start(ctx, OpBarrier, nil, func(ctx context.Context, _ []*tensor.Tensor) Work {
		return c.Inner.BarrierAsync(ctx)
	})
}

// Split partitions the group (see Comm); the new groups are wrapped by
// Wrap, in the order of the other operations.
func (c *Interposed) Split(ctx context.Context, color, key int, name string) (Comm, error) {
	var sub Comm
	w := c.IP.Start(ctx, OpSplit, nil, func(ctx context.Context, _ []*tensor.Tensor) Work {
		s, err := c.Inner.Split(ctx, color, key, name)
		sub = s
		return finishedWork(err)
	})
	if err := over(w); err != nil {
		return nil, err
	}
	if sub == nil || c.Wrap == nil {
		return sub, nil
	}
	return c.Wrap(sub), nil
}

// finished is a Work already over with err.
type finished struct {
	ch  chan struct{}
	err error
}

func finishedWork(err error) Work {
	ch := make(chan struct{})
	close(ch)
	return &finished{ch, err}
}

func (f *finished) Done() <-chan struct{}      { return f.ch }
func (f *finished) Wait(context.Context) error { return f.err }

// Pending is the Work of an operation an Interposer runs on a goroutine:
// it sets Err, then calls Finish.
type Pending struct {
	// Err is the operation's result, set before Finish.
	Err   error
	op    OpKind
	group string
	rank  int
	done  chan struct{}
}

// NewPending is the Work of op on group, reported by rank.
func NewPending(op OpKind, group string, rank int) *Pending {
	return &Pending{op: op, group: group, rank: rank, done: make(chan struct{})}
}

// Finish ends the operation with Err; call it once.
func (p *Pending) Finish() { close(p.done) }

// Done is closed by Finish.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Wait returns Err once the operation is over, or an *Error wrapping
// ctx.Err() when ctx ends first (see WaitDone).
func (p *Pending) Wait(ctx context.Context) error {
	return WaitDone(ctx, p.done, func() error { return p.Err }, p.op, p.group, p.rank)
}
