//go:build mpi

package mpi

/*
#include "mpi_shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

func opCode(o comm.ReduceOp) C.int {
	switch o {
	case comm.Max:
		return 2
	case comm.Min:
		return 3
	}
	return 0
}

// wide is the tensor MPI reduces: t itself, or a float32 copy of a half.
type wide struct {
	t, w *tensor.Tensor
	own  bool
}

func (c *mpiComm) widen(t *tensor.Tensor, load bool) (wide, error) {
	if !t.DType().IsHalf() {
		return wide{t: t, w: t}, nil
	}
	w, err := tensor.Empty(tensor.Float32, t.Numel())
	if err != nil {
		return wide{}, err
	}
	if load && t.Numel() > 0 {
		if err := c.cpu.Cast([]*tensor.Tensor{w}, []*tensor.Tensor{t}); err != nil {
			w.Free()
			return wide{}, err
		}
	}
	return wide{t: t, w: w, own: true}, nil
}

// narrow scales the float32 result for Avg and rounds it back into t once.
func (c *mpiComm) narrow(x wide, red comm.ReduceOp, store bool) error {
	defer func() {
		if x.own {
			x.w.Free()
		}
	}()
	if red == comm.Avg && c.size > 1 && x.w.Numel() > 0 {
		if err := c.cpu.Scale([]*tensor.Tensor{x.w}, 1/float32(c.size)); err != nil {
			return err
		}
	}
	if x.own && store && x.t.Numel() > 0 {
		return c.cpu.Cast([]*tensor.Tensor{x.t}, []*tensor.Tensor{x.w})
	}
	return nil
}

func mpiType(dt tensor.DType) C.MPI_Datatype {
	switch dt {
	case tensor.Int32:
		return C.dg_dtype(3)
	case tensor.Int64:
		return C.dg_dtype(4)
	}
	return C.dg_dtype(0)
}

func (c *mpiComm) run(o *op, body func() ([]request, func() error, error)) error {
	o.exec(body)
	return o.err
}

func (c *mpiComm) async(o *op, body func() ([]request, func() error, error)) comm.Work {
	go o.exec(body)
	return o
}

// ---- reductions -------------------------------------------------------------

func (c *mpiComm) allReduce(ctx context.Context, t *tensor.Tensor, red comm.ReduceOp) (*op, func() ([]request, func() error, error)) {
	call := comm.Call{Op: comm.OpAllReduce, Red: red}
	err := comm.CheckHost("t", t)
	if err == nil {
		call.DType, call.Count = t.DType(), t.Numel()
		err = comm.CheckReduce(t.DType(), red)
	}
	return c.start(ctx, call, err), func() ([]request, func() error, error) {
		x, err := c.widen(t, true)
		if err != nil {
			return nil, nil, err
		}
		var req request
		mu.Lock()
		rc := C.MPI_Iallreduce(C.dg_in_place(), x.w.Ptr(), C.int(t.Numel()), mpiType(x.w.DType()), C.dg_op(opCode(red)), c.comm, &req)
		mu.Unlock()
		if err := mpiErr("MPI_Iallreduce", rc); err != nil {
			return nil, nil, err
		}
		return []request{req}, func() error { return c.narrow(x, red, true) }, nil
	}
}

func (c *mpiComm) AllReduce(ctx context.Context, t *tensor.Tensor, red comm.ReduceOp) error {
	return c.run(c.allReduce(ctx, t, red))
}

func (c *mpiComm) AllReduceAsync(ctx context.Context, t *tensor.Tensor, red comm.ReduceOp) comm.Work {
	return c.async(c.allReduce(ctx, t, red))
}

func (c *mpiComm) reduceScatter(ctx context.Context, dst, src *tensor.Tensor, red comm.ReduceOp) (*op, func() ([]request, func() error, error)) {
	call, err := comm.CheckChunked(comm.OpReduceScatter, dst, src, "dst", "src", c.rank, c.size)
	call.Red = red
	if err == nil {
		err = comm.CheckReduce(call.DType, red)
	}
	return c.start(ctx, call, err), func() ([]request, func() error, error) {
		in, err := c.widen(src, true)
		if err != nil {
			return nil, nil, err
		}
		// A separate output (MPI forbids aliasing; halves need float32).
		out, err := tensor.Empty(in.w.DType(), dst.Numel())
		if err != nil {
			return nil, nil, err
		}
		var req request
		mu.Lock()
		rc := C.MPI_Ireduce_scatter_block(in.w.Ptr(), out.Ptr(), C.int(dst.Numel()), mpiType(in.w.DType()), C.dg_op(opCode(red)), c.comm, &req)
		mu.Unlock()
		if err := mpiErr("MPI_Ireduce_scatter_block", rc); err != nil {
			out.Free()
			return nil, nil, err
		}
		return []request{req}, func() error {
			defer out.Free()
			if in.own {
				in.w.Free()
			}
			err := c.narrow(wide{t: dst, w: out}, red, false) // Avg scaling only
			if err == nil && dst.Numel() > 0 {
				if dst.DType().IsHalf() {
					err = c.cpu.Cast([]*tensor.Tensor{dst}, []*tensor.Tensor{out})
				} else {
					b1, _ := dst.RawBytes()
					b2, _ := out.RawBytes()
					copy(b1, b2)
				}
			}
			return err
		}, nil
	}
}

func (c *mpiComm) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, red comm.ReduceOp) error {
	return c.run(c.reduceScatter(ctx, dst, src, red))
}

func (c *mpiComm) ReduceScatterAsync(ctx context.Context, dst, src *tensor.Tensor, red comm.ReduceOp) comm.Work {
	return c.async(c.reduceScatter(ctx, dst, src, red))
}

func (c *mpiComm) reduce(ctx context.Context, t *tensor.Tensor, root int, red comm.ReduceOp) (*op, func() ([]request, func() error, error)) {
	call := comm.Call{Op: comm.OpReduce, Red: red, Root: root}
	err := comm.CheckHost("t", t)
	if err == nil {
		call.DType, call.Count = t.DType(), t.Numel()
		err = comm.CheckReduce(t.DType(), red)
	}
	if err == nil {
		err = comm.CheckRank("root", root, c.size)
	}
	return c.start(ctx, call, err), func() ([]request, func() error, error) {
		x, err := c.widen(t, true)
		if err != nil {
			return nil, nil, err
		}
		send, recv := x.w.Ptr(), unsafe.Pointer(nil)
		if c.rank == root {
			send, recv = C.dg_in_place(), x.w.Ptr()
		}
		var req request
		mu.Lock()
		rc := C.MPI_Ireduce(send, recv, C.int(t.Numel()), mpiType(x.w.DType()), C.dg_op(opCode(red)), C.int(root), c.comm, &req)
		mu.Unlock()
		if err := mpiErr("MPI_Ireduce", rc); err != nil {
			return nil, nil, err
		}
		return []request{req}, func() error {
			if c.rank != root {
				if x.own {
					x.w.Free()
				}
				return nil
			}
			return c.narrow(x, red, true)
		}, nil
	}
}

func (c *mpiComm) Reduce(ctx context.Context, t *tensor.Tensor, root int, red comm.ReduceOp) error {
	return c.run(c.reduce(ctx, t, root, red))
}

func (c *mpiComm) ReduceAsync(ctx context.Context, t *tensor.Tensor, root int, red comm.ReduceOp) comm.Work {
	return c.async(c.reduce(ctx, t, root, red))
}

// ---- data movement (bytes) --------------------------------------------------

func bytesOf(t *tensor.Tensor) C.int { return C.int(t.Bytes()) }

func (c *mpiComm) allGather(ctx context.Context, dst, src *tensor.Tensor) (*op, func() ([]request, func() error, error)) {
	call, err := comm.CheckChunked(comm.OpAllGather, src, dst, "src", "dst", c.rank, c.size)
	return c.start(ctx, call, err), func() ([]request, func() error, error) {
		send := src.Ptr()
		if comm.Overlap(src, dst) || src.Bytes() == 0 {
			send = C.dg_in_place()
		}
		var req request
		mu.Lock()
		rc := C.MPI_Iallgather(send, bytesOf(src), C.dg_dtype(-1), dst.Ptr(), bytesOf(src), C.dg_dtype(-1), c.comm, &req)
		mu.Unlock()
		return []request{req}, nil, mpiErr("MPI_Iallgather", rc)
	}
}

func (c *mpiComm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	return c.run(c.allGather(ctx, dst, src))
}

func (c *mpiComm) AllGatherAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.async(c.allGather(ctx, dst, src))
}

func (c *mpiComm) broadcast(ctx context.Context, t *tensor.Tensor, root int) (*op, func() ([]request, func() error, error)) {
	call := comm.Call{Op: comm.OpBroadcast, Root: root}
	err := comm.CheckHost("t", t)
	if err == nil {
		call.DType, call.Count = t.DType(), t.Numel()
		err = comm.CheckRank("root", root, c.size)
	}
	return c.start(ctx, call, err), func() ([]request, func() error, error) {
		var req request
		mu.Lock()
		rc := C.MPI_Ibcast(t.Ptr(), bytesOf(t), C.dg_dtype(-1), C.int(root), c.comm, &req)
		mu.Unlock()
		return []request{req}, nil, mpiErr("MPI_Ibcast", rc)
	}
}

func (c *mpiComm) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	return c.run(c.broadcast(ctx, t, root))
}

func (c *mpiComm) BroadcastAsync(ctx context.Context, t *tensor.Tensor, root int) comm.Work {
	return c.async(c.broadcast(ctx, t, root))
}

func (c *mpiComm) allToAll(ctx context.Context, dst, src *tensor.Tensor) (*op, func() ([]request, func() error, error)) {
	call, err := comm.CheckAllToAll(dst, src, c.size)
	return c.start(ctx, call, err), func() ([]request, func() error, error) {
		n := C.int(src.Bytes() / c.size)
		var req request
		mu.Lock()
		rc := C.MPI_Ialltoall(src.Ptr(), n, C.dg_dtype(-1), dst.Ptr(), n, C.dg_dtype(-1), c.comm, &req)
		mu.Unlock()
		return []request{req}, nil, mpiErr("MPI_Ialltoall", rc)
	}
}

func (c *mpiComm) AllToAll(ctx context.Context, dst, src *tensor.Tensor) error {
	return c.run(c.allToAll(ctx, dst, src))
}

func (c *mpiComm) AllToAllAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.async(c.allToAll(ctx, dst, src))
}

func (c *mpiComm) p2p(ctx context.Context, k comm.OpKind, t *tensor.Tensor, peer int) (*op, func() ([]request, func() error, error)) {
	call, err := comm.CheckP2P(k, t, peer, c.rank, c.size)
	return c.start(ctx, call, err), func() ([]request, func() error, error) {
		var req request
		var rc C.int
		mu.Lock()
		if k == comm.OpSend {
			rc = C.MPI_Issend(t.Ptr(), bytesOf(t), C.dg_dtype(-1), C.int(peer), 0, c.comm, &req)
		} else {
			rc = C.MPI_Irecv(t.Ptr(), bytesOf(t), C.dg_dtype(-1), C.int(peer), 0, c.comm, &req)
		}
		mu.Unlock()
		return []request{req}, nil, mpiErr(k.String(), rc)
	}
}

func (c *mpiComm) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.run(c.p2p(ctx, comm.OpSend, t, peer))
}

func (c *mpiComm) SendAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.async(c.p2p(ctx, comm.OpSend, t, peer))
}

func (c *mpiComm) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.run(c.p2p(ctx, comm.OpRecv, t, peer))
}

func (c *mpiComm) RecvAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.async(c.p2p(ctx, comm.OpRecv, t, peer))
}

func (c *mpiComm) barrier(ctx context.Context) (*op, func() ([]request, func() error, error)) {
	// The descriptor exchange is itself a barrier.
	return c.start(ctx, comm.Call{Op: comm.OpBarrier}, nil), func() ([]request, func() error, error) { return nil, nil, nil }
}

func (c *mpiComm) Barrier(ctx context.Context) error { return c.run(c.barrier(ctx)) }

func (c *mpiComm) BarrierAsync(ctx context.Context) comm.Work { return c.async(c.barrier(ctx)) }

// Split checks that every rank calls it (under the deadline), then runs
// MPI_Comm_split, which cannot time out but cannot hang either once all
// ranks are known to be in it. The name is this rank's.
func (c *mpiComm) Split(ctx context.Context, color, key int, name string) (comm.Comm, error) {
	var argErr error
	if color < comm.NoColor {
		argErr = fmt.Errorf("%w: color %d: want >= 0 or NoColor", comm.ErrInvalid, color)
	}
	var out *mpiComm
	o := c.start(ctx, comm.Call{Op: comm.OpSplit}, argErr)
	err := c.run(o, func() ([]request, func() error, error) {
		col := C.int(color)
		if color == comm.NoColor {
			col = C.dg_undefined()
		}
		var nc C.MPI_Comm
		mu.Lock()
		defer mu.Unlock()
		if err := mpiErr("MPI_Comm_split", C.MPI_Comm_split(c.comm, col, C.int(key), &nc)); err != nil {
			return nil, nil, err
		}
		if color == comm.NoColor {
			return nil, nil, nil
		}
		var size, rank C.int
		C.MPI_Comm_size(nc, &size)
		C.MPI_Comm_rank(nc, &rank)
		// Members: gather the world ranks.
		members := make([]int, size)
		buf := newCbuf(8 * int(size))
		defer buf.free()
		me := newCbuf(8)
		defer me.free()
		me.int64s()[0] = int64(c.members[c.rank])
		C.MPI_Allgather(me.p, 1, C.dg_dtype(4), buf.p, 1, C.dg_dtype(4), nc)
		for i, v := range buf.int64s() {
			members[i] = int(v)
		}
		if name == "" {
			name = fmt.Sprintf("%s/split:%d", c.name, color)
		}
		var err error
		out, err = newComm(nc, name, members, int(rank), int(size), c.timeout, c.cpu)
		return nil, nil, err
	})
	if err != nil || out == nil {
		return nil, err
	}
	return out, nil
}
