//go:build gloo

package gloo

/*
#include "gloo_shim.h"
*/
import "C"

import (
	"context"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// body is an operation's data phase, run once the descriptors match.
type body = func(left time.Duration) error

func (c *glooComm) run(o *op, b body) error {
	o.exec(b)
	return o.err
}

func (c *glooComm) async(o *op, b body) comm.Work {
	go o.exec(b)
	return o
}

func dtypeCode(dt tensor.DType) C.int {
	switch dt {
	case tensor.Int32:
		return 1
	case tensor.Int64:
		return 2
	}
	return 0
}

func opCode(o comm.ReduceOp) C.int {
	switch o {
	case comm.Max:
		return 1
	case comm.Min:
		return 2
	}
	return 0
}

// scratch is the buffer Gloo reduces: float32 for halves (widened from
// src when load), else a copy of src (or src itself when inPlace).
func (c *glooComm) scratch(src *tensor.Tensor, load, inPlace bool) (*tensor.Tensor, func(), error) {
	if inPlace && !src.DType().IsHalf() {
		return src, func() {}, nil
	}
	dt := src.DType()
	if dt.IsHalf() {
		dt = tensor.Float32
	}
	w, err := tensor.Empty(dt, src.Numel())
	if err != nil {
		return nil, nil, err
	}
	free := func() { w.Free() }
	if load && src.Numel() > 0 {
		if src.DType().IsHalf() {
			err = c.w.cpu.Cast([]*tensor.Tensor{w}, []*tensor.Tensor{src})
		} else {
			err = c.w.cpu.Copy(w, src)
		}
		if err != nil {
			free()
			return nil, nil, err
		}
	}
	return w, free, nil
}

// finish stores the float32 (or integer) result w into dst, rounding
// halves once, then scales dst for Avg: comm/local's reduce-then-scale,
// so that the bits match it wherever the summation order does.
func (c *glooComm) finish(dst, w *tensor.Tensor, red comm.ReduceOp) error {
	if dst.Numel() == 0 {
		return nil
	}
	var err error
	switch {
	case dst == w:
	case dst.DType().IsHalf():
		err = c.w.cpu.Cast([]*tensor.Tensor{dst}, []*tensor.Tensor{w})
	default:
		err = c.w.cpu.Copy(dst, w)
	}
	if err == nil && red == comm.Avg && c.size > 1 {
		err = c.w.cpu.Scale([]*tensor.Tensor{dst}, 1/float32(c.size))
	}
	return err
}

func (c *glooComm) allreduce(w *tensor.Tensor, red comm.ReduceOp, tag uint32, left time.Duration) error {
	if f := shim(func(e *C.char, n C.size_t) C.int {
		return C.dg_gloo_allreduce(c.ctx, C.uint32_t(tag), w.Ptr(), C.size_t(w.Numel()), dtypeCode(w.DType()), opCode(red), millis(left), e, n)
	}); f != nil {
		return f
	}
	return nil
}

// ---- reductions -------------------------------------------------------------

func (c *glooComm) allReduce(ctx context.Context, t *tensor.Tensor, red comm.ReduceOp) (*op, body) {
	call := comm.Call{Op: comm.OpAllReduce, Red: red}
	err := comm.CheckHost("t", t)
	if err == nil {
		call.DType, call.Count = t.DType(), t.Numel()
		err = comm.CheckReduce(t.DType(), red)
	}
	o := c.start(ctx, desc{call: call}, err)
	return o, func(left time.Duration) error {
		if t.Numel() == 0 {
			return nil
		}
		w, free, err := c.scratch(t, true, true)
		if err != nil {
			return err
		}
		defer free()
		if err := c.allreduce(w, red, o.tag, left); err != nil {
			return err
		}
		return c.finish(t, w, red)
	}
}

// AllReduce runs Gloo's ring all-reduce (float32 for halves): each element
// is summed in ring order starting at a rank that depends on its chunk, so
// float sums differ from comm/local's rank order in the last bits.
func (c *glooComm) AllReduce(ctx context.Context, t *tensor.Tensor, red comm.ReduceOp) error {
	return c.run(c.allReduce(ctx, t, red))
}

func (c *glooComm) AllReduceAsync(ctx context.Context, t *tensor.Tensor, red comm.ReduceOp) comm.Work {
	return c.async(c.allReduce(ctx, t, red))
}

func (c *glooComm) reduceScatter(ctx context.Context, dst, src *tensor.Tensor, red comm.ReduceOp) (*op, body) {
	call, err := comm.CheckChunked(comm.OpReduceScatter, dst, src, "dst", "src", c.rank, c.size)
	call.Red = red
	if err == nil {
		err = comm.CheckReduce(call.DType, red)
	}
	o := c.start(ctx, desc{call: call}, err)
	return o, func(left time.Duration) error {
		if dst.Numel() == 0 {
			return nil
		}
		// Gloo 2022 has no unbound reduce-scatter: all-reduce a copy and
		// keep this rank's chunk (twice the traffic of a true one).
		w, free, err := c.scratch(src, true, false)
		if err != nil {
			return err
		}
		defer free()
		if err := c.allreduce(w, red, o.tag, left); err != nil {
			return err
		}
		mine, err := w.Slice(c.rank*dst.Numel(), dst.Numel())
		if err != nil {
			return err
		}
		return c.finish(dst, mine, red)
	}
}

func (c *glooComm) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, red comm.ReduceOp) error {
	return c.run(c.reduceScatter(ctx, dst, src, red))
}

func (c *glooComm) ReduceScatterAsync(ctx context.Context, dst, src *tensor.Tensor, red comm.ReduceOp) comm.Work {
	return c.async(c.reduceScatter(ctx, dst, src, red))
}

func (c *glooComm) reduce(ctx context.Context, t *tensor.Tensor, root int, red comm.ReduceOp) (*op, body) {
	call := comm.Call{Op: comm.OpReduce, Red: red, Root: root}
	err := comm.CheckHost("t", t)
	if err == nil {
		call.DType, call.Count = t.DType(), t.Numel()
		err = comm.CheckReduce(t.DType(), red)
	}
	if err == nil {
		err = comm.CheckRank("root", root, c.size)
	}
	o := c.start(ctx, desc{call: call}, err)
	return o, func(left time.Duration) error {
		if t.Numel() == 0 {
			return nil
		}
		// Gloo uses the buffer as scratch on every rank: the others' t
		// must stay unchanged, so they reduce a copy.
		w, free, err := c.scratch(t, true, c.rank == root)
		if err != nil {
			return err
		}
		defer free()
		if f := shim(func(e *C.char, n C.size_t) C.int {
			return C.dg_gloo_reduce(c.ctx, C.uint32_t(o.tag), w.Ptr(), C.size_t(w.Numel()), dtypeCode(w.DType()), opCode(red), C.int(root), millis(left), e, n)
		}); f != nil {
			return f
		}
		if c.rank != root {
			return nil
		}
		return c.finish(t, w, red)
	}
}

func (c *glooComm) Reduce(ctx context.Context, t *tensor.Tensor, root int, red comm.ReduceOp) error {
	return c.run(c.reduce(ctx, t, root, red))
}

func (c *glooComm) ReduceAsync(ctx context.Context, t *tensor.Tensor, root int, red comm.ReduceOp) comm.Work {
	return c.async(c.reduce(ctx, t, root, red))
}

// ---- data movement (bytes) --------------------------------------------------

func (c *glooComm) allGather(ctx context.Context, dst, src *tensor.Tensor) (*op, body) {
	call, err := comm.CheckChunked(comm.OpAllGather, src, dst, "src", "dst", c.rank, c.size)
	o := c.start(ctx, desc{call: call}, err)
	return o, func(left time.Duration) error {
		if src.Bytes() == 0 {
			return nil
		}
		in := src.Ptr()
		if comm.Overlap(src, dst) {
			in = nil
		}
		if f := shim(func(e *C.char, n C.size_t) C.int {
			return C.dg_gloo_allgather(c.ctx, C.uint32_t(o.tag), in, dst.Ptr(), C.size_t(src.Bytes()), millis(left), e, n)
		}); f != nil {
			return f
		}
		return nil
	}
}

func (c *glooComm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	return c.run(c.allGather(ctx, dst, src))
}

func (c *glooComm) AllGatherAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.async(c.allGather(ctx, dst, src))
}

func (c *glooComm) broadcast(ctx context.Context, t *tensor.Tensor, root int) (*op, body) {
	call := comm.Call{Op: comm.OpBroadcast, Root: root}
	err := comm.CheckHost("t", t)
	if err == nil {
		call.DType, call.Count = t.DType(), t.Numel()
		err = comm.CheckRank("root", root, c.size)
	}
	o := c.start(ctx, desc{call: call}, err)
	return o, func(left time.Duration) error {
		if t.Bytes() == 0 {
			return nil
		}
		if f := shim(func(e *C.char, n C.size_t) C.int {
			return C.dg_gloo_broadcast(c.ctx, C.uint32_t(o.tag), t.Ptr(), C.size_t(t.Bytes()), C.int(root), millis(left), e, n)
		}); f != nil {
			return f
		}
		return nil
	}
}

func (c *glooComm) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	return c.run(c.broadcast(ctx, t, root))
}

func (c *glooComm) BroadcastAsync(ctx context.Context, t *tensor.Tensor, root int) comm.Work {
	return c.async(c.broadcast(ctx, t, root))
}

func (c *glooComm) allToAll(ctx context.Context, dst, src *tensor.Tensor) (*op, body) {
	call, err := comm.CheckAllToAll(dst, src, c.size)
	o := c.start(ctx, desc{call: call}, err)
	return o, func(left time.Duration) error {
		if src.Bytes() == 0 {
			return nil
		}
		if f := shim(func(e *C.char, n C.size_t) C.int {
			return C.dg_gloo_alltoall(c.ctx, C.uint32_t(o.tag), src.Ptr(), dst.Ptr(), C.size_t(src.Bytes()), millis(left), e, n)
		}); f != nil {
			return f
		}
		return nil
	}
}

func (c *glooComm) AllToAll(ctx context.Context, dst, src *tensor.Tensor) error {
	return c.run(c.allToAll(ctx, dst, src))
}

func (c *glooComm) AllToAllAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.async(c.allToAll(ctx, dst, src))
}

// p2p: the descriptor exchange is the rendezvous (a Send returns only
// after the Recv was called), then Gloo's unbound send or receive.
func (c *glooComm) p2p(ctx context.Context, k comm.OpKind, t *tensor.Tensor, peer int) (*op, body) {
	call, err := comm.CheckP2P(k, t, peer, c.rank, c.size)
	o := c.start(ctx, desc{call: call}, err)
	return o, func(left time.Duration) error {
		if t.Bytes() == 0 {
			return nil
		}
		slot := C.uint64_t(uint64(slotP2PData) | o.slot)
		var f *shimFail
		if k == comm.OpSend {
			f = shim(func(e *C.char, n C.size_t) C.int {
				return C.dg_gloo_send(c.ctx, slot, t.Ptr(), C.size_t(t.Bytes()), C.int(peer), millis(left), e, n)
			})
		} else {
			f = shim(func(e *C.char, n C.size_t) C.int {
				return C.dg_gloo_recv(c.ctx, slot, t.Ptr(), C.size_t(t.Bytes()), C.int(peer), millis(left), e, n)
			})
		}
		if f != nil {
			return f
		}
		return nil
	}
}

func (c *glooComm) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.run(c.p2p(ctx, comm.OpSend, t, peer))
}

func (c *glooComm) SendAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.async(c.p2p(ctx, comm.OpSend, t, peer))
}

func (c *glooComm) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.run(c.p2p(ctx, comm.OpRecv, t, peer))
}

func (c *glooComm) RecvAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.async(c.p2p(ctx, comm.OpRecv, t, peer))
}

// Barrier is the descriptor exchange alone: every rank has sent its
// descriptor to every other.
func (c *glooComm) Barrier(ctx context.Context) error {
	return c.run(c.start(ctx, desc{call: comm.Call{Op: comm.OpBarrier}}, nil), func(time.Duration) error { return nil })
}

func (c *glooComm) BarrierAsync(ctx context.Context) comm.Work {
	return c.async(c.start(ctx, desc{call: comm.Call{Op: comm.OpBarrier}}, nil), func(time.Duration) error { return nil })
}
