//go:build cuda

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// The comm.Comm operations: argument checks, then one launch each. Data
// movement is sent as bytes (ncclUint8), so it accepts every dtype.

// kindRecv is named for the abort test, which queues a receive that is
// never matched (test files cannot use cgo).
const kindRecv = C.DG_NCCL_RECV

var reduceTypes = map[tensor.DType]C.int{
	tensor.Float32: C.ncclFloat32, tensor.Float16: C.ncclFloat16, tensor.BFloat16: C.ncclBfloat16,
	tensor.Int32: C.ncclInt32, tensor.Int64: C.ncclInt64,
}

var reduceOps = [...]C.int{comm.Sum: C.ncclSum, comm.Avg: C.ncclAvg, comm.Max: C.ncclMax, comm.Min: C.ncclMin}

// arg checks a tensor argument: on this communicator's device, contiguous,
// not freed.
func (c *ncclComm) arg(name string, t *tensor.Tensor) error {
	switch {
	case t == nil:
		return fmt.Errorf("%w: %s is nil", comm.ErrInvalid, name)
	case t.Device() != tensor.CUDA(c.dev):
		return fmt.Errorf("%w: %s %v is on %v, the communicator on %v", comm.ErrInvalid, name, t, t.Device(), tensor.CUDA(c.dev))
	case !t.Contiguous():
		return fmt.Errorf("%w: %s %v is not contiguous", comm.ErrInvalid, name, t)
	case t.Storage().Freed():
		return fmt.Errorf("%w: %s %v: storage already freed", comm.ErrInvalid, name, t)
	}
	return nil
}

func (c *ncclComm) checkRank(what string, r int) error {
	if r < 0 || r >= c.size {
		return fmt.Errorf("%w: %s %d: group has ranks 0..%d", comm.ErrInvalid, what, r, c.size-1)
	}
	return nil
}

// reduction checks t and op and fills a typed launch.
func (c *ncclComm) reduction(kind C.int, t *tensor.Tensor, op comm.ReduceOp) (launch, error) {
	if err := c.arg("t", t); err != nil {
		return launch{}, err
	}
	if err := comm.CheckReduce(t.DType(), op); err != nil {
		return launch{}, err
	}
	return launch{kind: kind, send: t.Ptr(), recv: t.Ptr(), count: t.Numel(), dtype: reduceTypes[t.DType()], red: reduceOps[op]}, nil
}

// pair checks a dst, src pair of the same dtype where one is size times
// the other (big), allowing only the in-place layout: small is chunk Rank()
// of big.
func (c *ncclComm) pair(dst, src, big, small *tensor.Tensor) error {
	if err := c.arg("dst", dst); err != nil {
		return err
	}
	if err := c.arg("src", src); err != nil {
		return err
	}
	if dst.DType() != src.DType() {
		return fmt.Errorf("%w: dst %v and src %v differ in dtype", comm.ErrInvalid, dst, src)
	}
	if big.Numel() != c.size*small.Numel() {
		return fmt.Errorf("%w: %v must have %d x %d elements (group size x %v)", comm.ErrInvalid, big, c.size, small.Numel(), small)
	}
	inPlace := uintptr(small.Ptr()) == uintptr(big.Ptr())+uintptr(c.rank*small.Bytes())
	if comm.Overlap(dst, src) && !inPlace {
		return fmt.Errorf("%w: dst %v and src %v overlap other than as chunk %d", comm.ErrInvalid, dst, src, c.rank)
	}
	return nil
}

func bytesOf(kind C.int, t *tensor.Tensor, peer int) launch {
	return launch{kind: kind, send: t.Ptr(), recv: t.Ptr(), count: t.Bytes(), dtype: C.ncclUint8, peer: peer}
}

func wait(w *work) error {
	<-w.done
	return w.err
}

func (c *ncclComm) AllReduce(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) error {
	return wait(c.allReduce(ctx, t, op))
}
func (c *ncclComm) AllReduceAsync(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) comm.Work {
	return c.allReduce(ctx, t, op)
}
func (c *ncclComm) allReduce(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) *work {
	return c.start(ctx, comm.OpAllReduce, func() (launch, error) { return c.reduction(C.DG_NCCL_ALLREDUCE, t, op) })
}

func (c *ncclComm) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) error {
	return wait(c.reduceScatter(ctx, dst, src, op))
}
func (c *ncclComm) ReduceScatterAsync(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) comm.Work {
	return c.reduceScatter(ctx, dst, src, op)
}
func (c *ncclComm) reduceScatter(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) *work {
	return c.start(ctx, comm.OpReduceScatter, func() (launch, error) {
		if err := c.pair(dst, src, src, dst); err != nil {
			return launch{}, err
		}
		l, err := c.reduction(C.DG_NCCL_REDUCESCATTER, dst, op)
		l.send = src.Ptr()
		return l, err
	})
}

func (c *ncclComm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	return wait(c.allGather(ctx, dst, src))
}
func (c *ncclComm) AllGatherAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.allGather(ctx, dst, src)
}
func (c *ncclComm) allGather(ctx context.Context, dst, src *tensor.Tensor) *work {
	return c.start(ctx, comm.OpAllGather, func() (launch, error) {
		if err := c.pair(dst, src, dst, src); err != nil {
			return launch{}, err
		}
		l := bytesOf(C.DG_NCCL_ALLGATHER, src, 0)
		l.recv = dst.Ptr()
		return l, nil
	})
}

func (c *ncclComm) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	return wait(c.broadcast(ctx, t, root))
}
func (c *ncclComm) BroadcastAsync(ctx context.Context, t *tensor.Tensor, root int) comm.Work {
	return c.broadcast(ctx, t, root)
}
func (c *ncclComm) broadcast(ctx context.Context, t *tensor.Tensor, root int) *work {
	return c.start(ctx, comm.OpBroadcast, func() (launch, error) {
		if err := c.arg("t", t); err != nil {
			return launch{}, err
		}
		return bytesOf(C.DG_NCCL_BROADCAST, t, root), c.checkRank("root", root)
	})
}

func (c *ncclComm) Reduce(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) error {
	return wait(c.reduce(ctx, t, root, op))
}
func (c *ncclComm) ReduceAsync(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) comm.Work {
	return c.reduce(ctx, t, root, op)
}
func (c *ncclComm) reduce(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) *work {
	return c.start(ctx, comm.OpReduce, func() (launch, error) {
		l, err := c.reduction(C.DG_NCCL_REDUCE, t, op)
		l.peer = root
		if err == nil {
			err = c.checkRank("root", root)
		}
		return l, err
	})
}

func (c *ncclComm) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	return wait(c.p2p(ctx, comm.OpSend, t, peer))
}
func (c *ncclComm) SendAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.p2p(ctx, comm.OpSend, t, peer)
}
func (c *ncclComm) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	return wait(c.p2p(ctx, comm.OpRecv, t, peer))
}
func (c *ncclComm) RecvAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.p2p(ctx, comm.OpRecv, t, peer)
}

// p2p is Send or Recv. A peer equal to this rank is refused, as comm/local
// does: NCCL pairs a self-send only with a receive in the same group.
func (c *ncclComm) p2p(ctx context.Context, op comm.OpKind, t *tensor.Tensor, peer int) *work {
	kind := C.int(C.DG_NCCL_SEND)
	if op == comm.OpRecv {
		kind = kindRecv
	}
	return c.start(ctx, op, func() (launch, error) {
		if err := c.arg("t", t); err != nil {
			return launch{}, err
		}
		if err := c.checkRank("peer", peer); err != nil {
			return launch{}, err
		}
		if peer == c.rank {
			return launch{}, fmt.Errorf("%w: peer %d is this rank", comm.ErrInvalid, peer)
		}
		return bytesOf(kind, t, peer), nil
	})
}

func (c *ncclComm) AllToAll(ctx context.Context, dst, src *tensor.Tensor) error {
	return wait(c.allToAll(ctx, dst, src))
}
func (c *ncclComm) AllToAllAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.allToAll(ctx, dst, src)
}
func (c *ncclComm) allToAll(ctx context.Context, dst, src *tensor.Tensor) *work {
	return c.start(ctx, comm.OpAllToAll, func() (launch, error) {
		if err := c.arg("dst", dst); err != nil {
			return launch{}, err
		}
		if err := c.arg("src", src); err != nil {
			return launch{}, err
		}
		switch {
		case dst.DType() != src.DType() || dst.Numel() != src.Numel():
			return launch{}, fmt.Errorf("%w: dst %v and src %v differ in dtype or size", comm.ErrInvalid, dst, src)
		case src.Numel()%c.size != 0:
			return launch{}, fmt.Errorf("%w: src %v does not split into %d chunks", comm.ErrInvalid, src, c.size)
		case comm.Overlap(dst, src):
			return launch{}, fmt.Errorf("%w: dst %v and src %v overlap", comm.ErrInvalid, dst, src)
		}
		chunk := src.Bytes() / c.size
		return launch{kind: C.DG_NCCL_ALLTOALL, send: src.Ptr(), recv: dst.Ptr(), count: chunk,
			dtype: C.ncclUint8, chunkBytes: chunk}, nil
	})
}

// Barrier is an all-reduce of one int32: complete on a rank only once
// every rank has contributed.
func (c *ncclComm) Barrier(ctx context.Context) error { return wait(c.barrierOp(ctx)) }

// BarrierAsync starts Barrier.
func (c *ncclComm) BarrierAsync(ctx context.Context) comm.Work { return c.barrierOp(ctx) }

func (c *ncclComm) barrierOp(ctx context.Context) *work {
	return c.start(ctx, comm.OpBarrier, func() (launch, error) {
		return launch{kind: C.DG_NCCL_ALLREDUCE, send: c.barrier.Ptr(), recv: c.barrier.Ptr(), count: 1,
			dtype: C.ncclInt32, red: C.ncclSum}, nil
	})
}
