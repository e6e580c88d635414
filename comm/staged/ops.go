package staged

import (
	"context"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// AllReduce reduces t across the ranks (see comm.Comm).
func (c *Comm) AllReduce(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) error {
	return c.allReduce(ctx, t, op).wait()
}

// AllReduceAsync starts AllReduce.
func (c *Comm) AllReduceAsync(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) comm.Work {
	return c.allReduce(ctx, t, op)
}

func (c *Comm) allReduce(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) *work {
	return c.start(ctx, comm.OpAllReduce, []arg{{"t", t, in | out}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
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
	return c.start(ctx, comm.OpReduceScatter, []arg{{"dst", dst, out}, {"src", src, in}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
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
	return c.start(ctx, comm.OpAllGather, []arg{{"dst", dst, out}, {"src", src, in}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
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
	r := out // the root's t is its input, every other rank's its output
	if root == c.Rank() {
		r = in
	}
	return c.start(ctx, comm.OpBroadcast, []arg{{"t", t, r}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
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
	r := in // the other ranks' t are left unchanged: nothing to copy back
	if root == c.Rank() {
		r |= out
	}
	return c.start(ctx, comm.OpReduce, []arg{{"t", t, r}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
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
	return c.start(ctx, comm.OpSend, []arg{{"t", t, in}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
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
	return c.start(ctx, comm.OpRecv, []arg{{"t", t, out}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
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
	return c.start(ctx, comm.OpAllToAll, []arg{{"dst", dst, out}, {"src", src, in}}, func(ctx context.Context, h []*tensor.Tensor) comm.Work {
		return c.inner.AllToAllAsync(ctx, h[0], h[1])
	})
}

// Barrier returns once every rank has called it. It does not wait for
// the device's queued work (Backend.Synchronize does).
func (c *Comm) Barrier(ctx context.Context) error { return c.barrier(ctx).wait() }

// BarrierAsync starts Barrier.
func (c *Comm) BarrierAsync(ctx context.Context) comm.Work { return c.barrier(ctx) }

func (c *Comm) barrier(ctx context.Context) *work {
	return c.start(ctx, comm.OpBarrier, nil, func(ctx context.Context, _ []*tensor.Tensor) comm.Work {
		return c.inner.BarrierAsync(ctx)
	})
}

// Split partitions the group (see comm.Comm); each new group is staged on
// the same backend, with its own buffers.
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
	return New(sub, c.be), nil
}
