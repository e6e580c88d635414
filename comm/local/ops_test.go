package local

import (
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

var (
	worldSizes = []int{1, 2, 3, 4, 8}
	floatTypes = []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16}
	reduceOps  = []comm.ReduceOp{comm.Sum, comm.Avg, comm.Max, comm.Min}
	// lengths: empty, one, odd, not a multiple of the slice alignment or of
	// any world size; worlds of one or two ranks also get one large enough
	// for the C pool's threaded path (their ranks have 2 and 1 threads).
	lengths = []int{0, 1, 7, 64, 129, 1001, 5003}
	// bigLength crosses the C core's threading threshold (32Ki elements).
	bigLength = 70001
)

func lengthsFor(n int) []int {
	if n == 1 || (n == 2 && !raceEnabled) {
		return append(lengths[:len(lengths):len(lengths)], bigLength)
	}
	return lengths
}

// column is the inputs of element i across ranks.
func column(dt tensor.DType, n, i int) []float64 {
	xs := make([]float64, n)
	for r := range xs {
		xs[r] = input(dt, r, i)
	}
	return xs
}

func TestReductions(t *testing.T) {
	dtypes := append(append([]tensor.DType(nil), floatTypes...), tensor.Int32, tensor.Int64)
	for _, n := range worldSizes {
		w := newWorld(t, n, testTimeout)
		cs := w.Comms()
		for _, dt := range dtypes {
			for _, op := range reduceOps {
				if comm.CheckReduce(dt, op) != nil {
					continue
				}
				for _, length := range lengthsFor(n) {
					t.Run(fmt.Sprintf("n=%d/%v/%v/len=%d", n, dt, op, length), func(t *testing.T) {
						testAllReduce(t, cs, dt, op, length)
						testReduceScatter(t, cs, dt, op, length)
						testReduce(t, cs, dt, op, length)
					})
				}
			}
		}
	}
}

func testAllReduce(t *testing.T, cs []comm.Comm, dt tensor.DType, op comm.ReduceOp, length int) {
	n := len(cs)
	bufs := make([]*tensor.Tensor, n)
	for r := range bufs {
		bufs[r] = newTensor(t, dt, length)
		set(bufs[r], func(i int) float64 { return input(dt, r, i) })
	}
	mustAll(t, cs, func(c comm.Comm) error { return c.AllReduce(ctxBG, bufs[c.Rank()], op) })
	got := make([][]float64, n)
	for r := range n {
		got[r] = values(bufs[r])
	}
	for i := range length {
		xs := column(dt, n, i)
		for r := range n {
			check(t, "AllReduce rank "+fmt.Sprint(r), got[r], i, dt, op, xs)
		}
	}
}

func testReduceScatter(t *testing.T, cs []comm.Comm, dt tensor.DType, op comm.ReduceOp, m int) {
	n := len(cs)
	srcs, dsts := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for r := range n {
		srcs[r] = newTensor(t, dt, n*m)
		dsts[r] = newTensor(t, dt, m)
		set(srcs[r], func(i int) float64 { return input(dt, r, i) })
	}
	mustAll(t, cs, func(c comm.Comm) error {
		return c.ReduceScatter(ctxBG, dsts[c.Rank()], srcs[c.Rank()], op)
	})
	for r := range n {
		got := values(dsts[r])
		for i := range m {
			check(t, "ReduceScatter rank "+fmt.Sprint(r), got, i, dt, op, column(dt, n, r*m+i))
		}
	}
}

func testReduce(t *testing.T, cs []comm.Comm, dt tensor.DType, op comm.ReduceOp, length int) {
	n := len(cs)
	root := n / 2
	bufs := make([]*tensor.Tensor, n)
	for r := range bufs {
		bufs[r] = newTensor(t, dt, length)
		set(bufs[r], func(i int) float64 { return input(dt, r, i) })
	}
	mustAll(t, cs, func(c comm.Comm) error { return c.Reduce(ctxBG, bufs[c.Rank()], root, op) })
	got := make([][]float64, n)
	for r := range n {
		got[r] = values(bufs[r])
	}
	for i := range length {
		xs := column(dt, n, i)
		check(t, "Reduce root", got[root], i, dt, op, xs)
		for r := range n {
			if r != root && got[r][i] != xs[r] {
				require.Failf(t, "Reduce changed a non-root rank", "rank %d's [%d]: %v, was %v", r, i, got[r][i], xs[r])
			}
		}
	}
}

// TestDataMovement covers the ops that copy: every dtype moves bits exactly.
func TestDataMovement(t *testing.T) {
	dtypes := append(append([]tensor.DType(nil), floatTypes...), tensor.Int64, tensor.Uint8)
	for _, n := range worldSizes {
		w := newWorld(t, n, testTimeout)
		cs := w.Comms()
		for _, dt := range dtypes {
			for _, m := range lengthsFor(n) {
				t.Run(fmt.Sprintf("n=%d/%v/len=%d", n, dt, m), func(t *testing.T) {
					testAllGather(t, cs, dt, m, false)
					testAllGather(t, cs, dt, m, true)
					testBroadcast(t, cs, dt, m)
					testAllToAll(t, cs, dt, m)
					testSendRecvRing(t, cs, dt, m)
				})
			}
		}
	}
}

func val(dt tensor.DType, r, i int) float64 {
	if dt == tensor.Uint8 {
		return float64((r*31 + i) % 251)
	}
	return input(dt, r, i)
}

// expect checks x[i] == want(i) for every i (exact: data movement copies bits).
func expect(t *testing.T, what string, x *tensor.Tensor, want func(i int) float64) {
	for i, got := range values(x) {
		if w := want(i); got != w {
			t.Helper()
			require.Failf(t, "not equal", "%s[%d] = %v, want %v", what, i, got, w)
		}
	}
}

func testAllGather(t *testing.T, cs []comm.Comm, dt tensor.DType, m int, inPlace bool) {
	n := len(cs)
	srcs, dsts := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for r := range n {
		dsts[r] = newTensor(t, dt, n*m)
		if inPlace {
			srcs[r], _ = dsts[r].Slice(r*m, m)
		} else {
			srcs[r] = newTensor(t, dt, m)
		}
		set(srcs[r], func(i int) float64 { return val(dt, r, i) })
	}
	mustAll(t, cs, func(c comm.Comm) error { return c.AllGather(ctxBG, dsts[c.Rank()], srcs[c.Rank()]) })
	for r := range n {
		expect(t, fmt.Sprintf("AllGather(in place %v) rank %d", inPlace, r), dsts[r], func(i int) float64 { return val(dt, i/max(m, 1), i%max(m, 1)) })
	}
}

func testBroadcast(t *testing.T, cs []comm.Comm, dt tensor.DType, m int) {
	n := len(cs)
	root := n - 1
	bufs := make([]*tensor.Tensor, n)
	for r := range n {
		bufs[r] = newTensor(t, dt, m)
		set(bufs[r], func(i int) float64 { return val(dt, r, i) })
	}
	mustAll(t, cs, func(c comm.Comm) error { return c.Broadcast(ctxBG, bufs[c.Rank()], root) })
	for r := range n {
		expect(t, fmt.Sprintf("Broadcast rank %d", r), bufs[r], func(i int) float64 { return val(dt, root, i) })
	}
}

func testAllToAll(t *testing.T, cs []comm.Comm, dt tensor.DType, m int) {
	n := len(cs)
	srcs, dsts := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for r := range n {
		srcs[r], dsts[r] = newTensor(t, dt, n*m), newTensor(t, dt, n*m)
		set(srcs[r], func(i int) float64 { return val(dt, r, i) })
	}
	mustAll(t, cs, func(c comm.Comm) error { return c.AllToAll(ctxBG, dsts[c.Rank()], srcs[c.Rank()]) })
	for r := range n {
		// chunk j of my output is chunk r of rank j's input
		expect(t, fmt.Sprintf("AllToAll rank %d", r), dsts[r], func(i int) float64 { return val(dt, i/max(m, 1), r*m+i%max(m, 1)) })
	}
}

// testSendRecvRing sends each rank's tensor to the next rank around the
// ring, with SendAsync then Recv (the exchange pattern of pipelines).
func testSendRecvRing(t *testing.T, cs []comm.Comm, dt tensor.DType, m int) {
	n := len(cs)
	if n == 1 {
		return
	}
	srcs, dsts := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for r := range n {
		srcs[r], dsts[r] = newTensor(t, dt, m), newTensor(t, dt, m)
		set(srcs[r], func(i int) float64 { return val(dt, r, i) })
	}
	mustAll(t, cs, func(c comm.Comm) error {
		r := c.Rank()
		w := c.SendAsync(ctxBG, srcs[r], (r+1)%n)
		if err := c.Recv(ctxBG, dsts[r], (r+n-1)%n); err != nil {
			return err
		}
		return w.Wait(ctxBG)
	})
	for r := range n {
		expect(t, fmt.Sprintf("Recv rank %d", r), dsts[r], func(i int) float64 { return val(dt, (r+n-1)%n, i) })
	}
}

func TestAsyncManyInFlight(t *testing.T) {
	const n, k, length = 4, 16, 1003
	w := newWorld(t, n, testTimeout)
	bufs := make([][]*tensor.Tensor, n)
	for r := range n {
		for j := range k {
			b := newTensor(t, tensor.Float32, length)
			set(b, func(i int) float64 { return input(tensor.Float32, r, i+j) })
			bufs[r] = append(bufs[r], b)
		}
	}
	mustAll(t, w.Comms(), func(c comm.Comm) error {
		var ws []comm.Work
		for j := range k {
			ws = append(ws, c.AllReduceAsync(ctxBG, bufs[c.Rank()][j], comm.Sum))
		}
		ws = append(ws, c.BarrierAsync(ctxBG))
		for _, w := range ws {
			if err := w.Wait(ctxBG); err != nil {
				return err
			}
		}
		return nil
	})
	for j := range k {
		got := values(bufs[0][j])
		for i := range length {
			xs := make([]float64, n)
			for r := range xs {
				xs[r] = input(tensor.Float32, r, i+j)
			}
			check(t, fmt.Sprintf("AllReduceAsync #%d rank 0", j), got, i, tensor.Float32, comm.Sum, xs)
		}
	}
}

// TestDeterministic repeats an all-reduce whose float32 result depends on
// the summation order and demands the same bits every time.
func TestDeterministic(t *testing.T) {
	const n, length = 8, 50021
	w := newWorld(t, n, testTimeout)
	var first []uint64
	for rep := range 20 {
		bufs := make([]*tensor.Tensor, n)
		for r := range n {
			bufs[r] = newTensor(t, tensor.Float32, length)
			set(bufs[r], func(i int) float64 { return input(tensor.Float32, r, i) * float64(1+r*1000) })
		}
		mustAll(t, w.Comms(), func(c comm.Comm) error { return c.AllReduce(ctxBG, bufs[c.Rank()], comm.Sum) })
		for r := range n {
			for i := range length {
				_, bits := get(bufs[r], i)
				if rep == 0 && r == 0 {
					first = append(first, bits)
				} else if bits != first[i] {
					require.Failf(t, "not bitwise reproducible", "repetition %d rank %d element %d: bits %#x, first run %#x", rep, r, i, bits, first[i])
				}
			}
		}
	}
}
