package local

import (
	"fmt"
	"unsafe"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
)

// sliceAlign is the granularity, in elements, of the per-rank slices of an
// all-reduce or reduce: whole cache lines for every dtype, full SIMD vectors.
const sliceAlign = 64

// part is rank r's slice [lo, hi) of n elements split over size ranks.
func part(n, size, r int) (lo, hi int) {
	chunk := (n + size - 1) / size
	chunk = (chunk + sliceAlign - 1) / sliceAlign * sliceAlign
	lo = min(r*chunk, n)
	return lo, min(lo+chunk, n)
}

func at(t *tensor.Tensor, elem int) unsafe.Pointer {
	return unsafe.Add(t.Ptr(), elem*t.DType().Size())
}

// copyElems copies n elements from src at so into dst at do.
func copyElems(dst *tensor.Tensor, do int, src *tensor.Tensor, so, n int) {
	if n == 0 {
		return
	}
	es := dst.DType().Size()
	d, s := at(dst, do), at(src, so)
	if d == s {
		return
	}
	copy(unsafe.Slice((*byte)(d), n*es), unsafe.Slice((*byte)(s), n*es))
}

func redop(op comm.ReduceOp) csrc.ReduceOp {
	switch op {
	case comm.Max:
		return csrc.Max
	case comm.Min:
		return csrc.Min
	}
	return csrc.Sum
}

// reduceSlice sets dst[do:do+n] to the reduction, in rank order, of every
// party's src at element so; Avg then scales by 1/size.
func (c *rankComm) reduceSlice(s *slot, srcs []*tensor.Tensor, so int, dst *tensor.Tensor, do, n int) {
	if n == 0 {
		return
	}
	call := s.calls[0]
	ptrs := make([]unsafe.Pointer, len(srcs))
	for i, t := range srcs {
		ptrs[i] = at(t, so)
	}
	d := at(dst, do)
	dt := csrc.DType(call.DType)
	x := c.cpu.Ctx()
	if len(ptrs) > 1 || ptrs[0] != d {
		if err := x.ReduceInto(dt, redop(call.Red), ptrs, d, int64(n)); err != nil {
			s.setDataErr(fmt.Errorf("rank %d: reducing %d elements: %w", c.rank, n, err))
			return
		}
	}
	if call.Red == comm.Avg && len(srcs) > 1 {
		if err := x.Scale(dt, []unsafe.Pointer{d}, []int64{int64(n)}, 1/float32(len(srcs))); err != nil {
			s.setDataErr(fmt.Errorf("rank %d: averaging %d elements: %w", c.rank, n, err))
		}
	}
}

// allReduceSlice reduces elements [lo, lo+n) of every party's input, in rank
// order, and writes the result into that slice of every party's output, in
// one pass (dg_reduce_bcast: each byte of the slice is read once and written
// once in every buffer, outputs may be the inputs). Avg folds its 1/size
// scale into the same pass with the bits of reduce-then-scale.
func (c *rankComm) allReduceSlice(s *slot, lo, n int) {
	if n == 0 {
		return
	}
	if len(s.in) == 1 && s.in[0] == s.out[0] {
		return // a world of one, in place: nothing to do
	}
	call := s.calls[0]
	srcs := make([]unsafe.Pointer, len(s.in))
	for i, t := range s.in {
		srcs[i] = at(t, lo)
	}
	dsts := make([]unsafe.Pointer, len(s.out))
	for i, t := range s.out {
		dsts[i] = at(t, lo)
	}
	scale := float32(1)
	if call.Red == comm.Avg && len(srcs) > 1 {
		scale = 1 / float32(len(srcs))
	}
	if err := c.cpu.Ctx().ReduceBcast(csrc.DType(call.DType), redop(call.Red), srcs, dsts, int64(n), scale); err != nil {
		s.setDataErr(fmt.Errorf("rank %d: all-reducing %d elements: %w", c.rank, n, err))
	}
}

// execute runs this rank's share of a completed slot and meets the other
// parties at the slot's latches; it never returns before every party is
// done with this rank's buffers.
func (c *rankComm) execute(s *slot, pos int) {
	call := s.calls[pos]
	size := len(s.parties)
	me := s.parties[pos]
	switch call.Op {
	case comm.OpBarrier, comm.OpSplit:
		return

	case comm.OpAllReduce:
		// Reduce-scatter and all-gather fused: my slice of every input,
		// reduced, into my slice of every output. Slices are disjoint, so
		// the ranks never touch the same element; the end latch keeps every
		// buffer alive until all are done.
		lo, hi := part(call.Count, size, me)
		c.allReduceSlice(s, lo, hi-lo)

	case comm.OpReduce:
		n := call.Count
		lo, hi := part(n, size, me)
		c.reduceSlice(s, s.in, lo, s.out[call.Root], lo, hi-lo)

	case comm.OpReduceScatter:
		m := call.Count
		c.reduceSlice(s, s.in, me*m, s.out[me], 0, m)

	case comm.OpAllGather:
		m := call.Count
		for j := range size {
			copyElems(s.out[me], j*m, s.in[j], 0, m)
		}

	case comm.OpBroadcast:
		if me != call.Root {
			copyElems(s.out[me], 0, s.in[call.Root], 0, call.Count)
		}

	case comm.OpAllToAll:
		m := call.Count
		for j := range size {
			copyElems(s.out[me], j*m, s.in[j], me*m, m)
		}

	case comm.OpSend, comm.OpRecv:
		if call.Op == comm.OpRecv {
			copyElems(s.out[1], 0, s.in[0], 0, call.Count)
		}
	}
	s.end.arrive()
	s.end.wait()
}
