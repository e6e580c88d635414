//go:build gloo

package gloo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/internal/commtest"
	"github.com/deepgo-ml/deepgo/tensor"
)

// val is element i of rank r's input, as every backend's tests use it.
func val(dt tensor.DType, r, i int) float64 { return commtest.Input(dt, r, i) }

// filled is a new tensor holding f(i); the caller frees it.
func filled(dt tensor.DType, n int, f func(i int) float64) *tensor.Tensor {
	x, err := tensor.Empty(dt, n)
	if err != nil {
		panic(err)
	}
	commtest.Set(x, f)
	return x
}

func at(x *tensor.Tensor, i int) float64 {
	v, _ := commtest.Get(x, i)
	return v
}

// checkReduced compares got with comm/local's bits where the order cannot
// matter (two ranks: a+b == b+a; max, min, integers), else (sums over more
// than two ranks, in Gloo's ring order) with the float64 reference within
// n+1 float32 roundings of sum|x|, plus, for halves, the rounding to dt
// (twice for Avg).
func checkReduced(what string, got float64, dt tensor.DType, op comm.ReduceOp, xs []float64) error {
	m := commtest.Model(dt, op, xs)
	orderFree := len(xs) <= 2 || op == comm.Max || op == comm.Min || dt == tensor.Int32 || dt == tensor.Int64
	if orderFree {
		if got != m {
			return fmt.Errorf("%s = %v, want %v bit for bit (comm/local's result; inputs %v)", what, got, m, xs)
		}
		return nil
	}
	s := 0.0
	for _, x := range xs {
		s += math.Abs(x)
	}
	if op == comm.Avg {
		s /= float64(len(xs))
	}
	want, tol := commtest.Exact(op, xs), float64(len(xs)+1)*0x1p-24*s
	if dt.IsHalf() { // plus the rounding to dt (twice for Avg)
		tol += 2 * halfULP(dt, want)
	}
	if math.Abs(got-want) > tol {
		return fmt.Errorf("%s = %v, float64 reference %v: off by more than %g", what, got, want, tol)
	}
	return nil
}

// halfULP is the spacing of dt's values at v.
func halfULP(dt tensor.DType, v float64) float64 {
	mbits, minExp := 10, -24
	if dt == tensor.BFloat16 {
		mbits, minExp = 7, -133
	}
	if v == 0 {
		return math.Ldexp(1, minExp)
	}
	_, e := math.Frexp(math.Abs(v))
	return math.Ldexp(1, max(e-1-mbits, minExp))
}

func column(dt tensor.DType, n int, idx func(r int) int) []float64 {
	xs := make([]float64, n)
	for r := range xs {
		xs[r] = val(dt, r, idx(r))
	}
	return xs
}

func scenarioOps(ctx context.Context, c comm.Comm) error {
	n, me := c.Size(), c.Rank()
	var free []*tensor.Tensor
	defer func() {
		for _, x := range free {
			x.Free()
		}
	}()
	mk := func(dt tensor.DType, m int, f func(i int) float64) *tensor.Tensor {
		x := filled(dt, m, f)
		free = append(free, x)
		return x
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Int32, tensor.Int64} {
		for _, op := range []comm.ReduceOp{comm.Sum, comm.Avg, comm.Max, comm.Min} {
			if comm.CheckReduce(dt, op) != nil {
				continue
			}
			for _, m := range []int{0, 1, 7, 1001, 40000} {
				mine := func(i int) float64 { return val(dt, me, i) }
				ar := mk(dt, m, mine)
				if err := c.AllReduce(ctx, ar, op); err != nil {
					return err
				}
				ara := mk(dt, m, mine)
				if err := c.AllReduceAsync(ctx, ara, op).Wait(ctx); err != nil {
					return err
				}
				src, dst := mk(dt, n*m, mine), mk(dt, m, func(int) float64 { return 0 })
				if err := c.ReduceScatter(ctx, dst, src, op); err != nil {
					return err
				}
				inPlace := mk(dt, n*m, mine)
				chunk, _ := inPlace.Slice(me*m, m)
				if err := c.ReduceScatter(ctx, chunk, inPlace, op); err != nil {
					return err
				}
				red := mk(dt, m, mine)
				if err := c.Reduce(ctx, red, n-1, op); err != nil {
					return err
				}
				for i := range m {
					xs := column(dt, n, func(int) int { return i })
					name := fmt.Sprintf("%v %v x %d: ", dt, op, m)
					if err := checkReduced(name+fmt.Sprintf("AllReduce[%d]", i), at(ar, i), dt, op, xs); err != nil {
						return err
					}
					if at(ara, i) != at(ar, i) {
						return fmt.Errorf("%sAllReduceAsync[%d] = %v, AllReduce gave %v", name, i, at(ara, i), at(ar, i))
					}
					rs := column(dt, n, func(int) int { return me*m + i })
					if err := checkReduced(name+fmt.Sprintf("ReduceScatter[%d]", i), at(dst, i), dt, op, rs); err != nil {
						return err
					}
					if err := checkReduced(name+fmt.Sprintf("in-place ReduceScatter[%d]", i), at(chunk, i), dt, op, rs); err != nil {
						return err
					}
					if me != n-1 {
						if at(red, i) != val(dt, me, i) {
							return fmt.Errorf("%sReduce changed a non-root input: [%d] = %v, was %v", name, i, at(red, i), val(dt, me, i))
						}
					} else if err := checkReduced(name+fmt.Sprintf("Reduce[%d]", i), at(red, i), dt, op, xs); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int64, tensor.Uint8} {
		for _, m := range []int{0, 1, 33, 5000} {
			mine := func(i int) float64 { return val(dt, me, i) }
			src, dst := mk(dt, m, mine), mk(dt, n*m, func(int) float64 { return 0 })
			if err := c.AllGatherAsync(ctx, dst, src).Wait(ctx); err != nil {
				return err
			}
			inPlace := mk(dt, n*m, func(i int) float64 { return val(dt, me, i%max(m, 1)) })
			chunk, _ := inPlace.Slice(me*m, m)
			if err := c.AllGather(ctx, inPlace, chunk); err != nil {
				return err
			}
			b := mk(dt, m, mine)
			if err := c.Broadcast(ctx, b, n-1); err != nil {
				return err
			}
			a2aIn, a2aOut := mk(dt, n*m, mine), mk(dt, n*m, func(int) float64 { return 0 })
			if err := c.AllToAll(ctx, a2aOut, a2aIn); err != nil {
				return err
			}
			out := mk(dt, m, func(int) float64 { return 0 })
			if n > 1 { // a ring: everyone sends right and receives from the left
				w := c.SendAsync(ctx, src, (me+1)%n)
				if err := c.Recv(ctx, out, (me+n-1)%n); err != nil {
					return err
				}
				if err := w.Wait(ctx); err != nil {
					return err
				}
			}
			for j := range n {
				for i := range m {
					if g, w := at(dst, j*m+i), val(dt, j, i); g != w {
						return fmt.Errorf("%v AllGather[%d] = %v, want %v", dt, j*m+i, g, w)
					}
					if g, w := at(inPlace, j*m+i), val(dt, j, i); g != w {
						return fmt.Errorf("%v in-place AllGather[%d] = %v, want %v", dt, j*m+i, g, w)
					}
					if g, w := at(a2aOut, j*m+i), val(dt, j, me*m+i); g != w {
						return fmt.Errorf("%v AllToAll[%d] = %v, want %v", dt, j*m+i, g, w)
					}
				}
			}
			for i := range m {
				if g, w := at(b, i), val(dt, n-1, i); g != w {
					return fmt.Errorf("%v Broadcast[%d] = %v, want %v", dt, i, g, w)
				}
				if g, w := at(out, i), val(dt, (me+n-1)%n, i); n > 1 && g != w {
					return fmt.Errorf("%v Recv[%d] = %v, want %v", dt, i, g, w)
				}
			}
		}
	}
	// Async collectives in flight together complete in call order.
	works := make([]comm.Work, 8)
	xs := make([]*tensor.Tensor, len(works))
	for k := range works {
		xs[k] = mk(tensor.Int32, 100, func(i int) float64 { return float64(k*1000 + me) })
		works[k] = c.AllReduceAsync(ctx, xs[k], comm.Sum)
	}
	for k, w := range works {
		if err := w.Wait(ctx); err != nil {
			return err
		}
		if g, want := at(xs[k], 0), float64(n*k*1000+n*(n-1)/2); g != want {
			return fmt.Errorf("async AllReduce %d = %v, want %v", k, g, want)
		}
	}
	return c.Barrier(ctx)
}

func scenarioSplit(ctx context.Context, c comm.Comm) error {
	n, me := c.Size(), c.Rank()
	g, err := c.Split(ctx, me%2, -me, fmt.Sprintf("parity-by-%d", me))
	if err != nil {
		return err
	}
	defer g.Close()
	ms := g.Members()
	if ms[g.Rank()] != me {
		return fmt.Errorf("Split: members %v, rank %d: want this rank %d there", ms, g.Rank(), me)
	}
	// Key -me: the highest world rank of the class leads, and names it.
	if want := fmt.Sprintf("parity-by-%d", ms[0]); g.Name() != want || ms[0] != n-1-(n-1-me%2)%2 {
		return fmt.Errorf("Split: name %q, members %v: want name %q and the highest rank first", g.Name(), ms, want)
	}
	x := filled(tensor.Int64, 3, func(int) float64 { return float64(me) })
	defer x.Free()
	if err := g.AllReduce(ctx, x, comm.Sum); err != nil {
		return err
	}
	want := 0
	for r := me % 2; r < n; r += 2 {
		want += r
	}
	if at(x, 2) != float64(want) {
		return fmt.Errorf("parity group sum = %v, want %d (members %v)", at(x, 2), want, ms)
	}
	// NoColor: rank 0 joins nothing; the rest form one group.
	color := 0
	if me == 0 {
		color = comm.NoColor
	}
	h, err := c.Split(ctx, color, me, "")
	if err != nil {
		return err
	}
	if me == 0 {
		if h != nil {
			return fmt.Errorf("Split(NoColor) returned a group %v", h.Members())
		}
	} else {
		defer h.Close()
		if h.Size() != n-1 || h.Rank() != me-1 {
			return fmt.Errorf("Split without rank 0: rank %d of %d, want %d of %d", h.Rank(), h.Size(), me-1, n-1)
		}
		if err := h.Barrier(ctx); err != nil {
			return err
		}
	}
	return c.Barrier(ctx)
}

// fresh is a new group of every rank, so that a fault breaks only it.
func fresh(ctx context.Context, c comm.Comm) (comm.Comm, error) {
	return c.Split(ctx, 0, c.Rank(), "fresh")
}

// scenarioMismatch: the last rank broadcasts while the others all-reduce;
// every rank gets ErrMismatch naming it, then the group is broken.
func scenarioMismatch(ctx context.Context, c comm.Comm) error {
	g, err := fresh(ctx, c)
	if err != nil {
		return err
	}
	defer g.Close()
	last := g.Size() - 1
	x := filled(tensor.Float32, 10, func(int) float64 { return 1 })
	defer x.Free()
	if g.Rank() == last {
		err = g.Broadcast(ctx, x, 0)
	} else {
		err = g.AllReduce(ctx, x, comm.Sum)
	}
	if err := wantFault(err, []int{last}, comm.ErrMismatch); err != nil {
		return err
	}
	start := time.Now()
	if err := wantFault(g.Barrier(ctx), nil, comm.ErrAborted); err != nil {
		return fmt.Errorf("after a mismatch: %w", err)
	}
	if d := time.Since(start); d > time.Second {
		return fmt.Errorf("a broken group took %v to fail", d)
	}
	return c.Barrier(ctx)
}

// scenarioInvalid: rank 0 passes a bad root; it gets ErrInvalid, the others
// ErrAborted naming it.
func scenarioInvalid(ctx context.Context, c comm.Comm) error {
	g, err := fresh(ctx, c)
	if err != nil {
		return err
	}
	defer g.Close()
	x := filled(tensor.Float32, 10, func(int) float64 { return 1 })
	defer x.Free()
	root := 0
	if g.Rank() == 0 {
		root = g.Size()
	}
	err = g.Broadcast(ctx, x, root)
	if g.Rank() == 0 {
		err = wantFault(err, nil, comm.ErrInvalid)
	} else {
		err = wantFault(err, []int{0}, comm.ErrAborted)
	}
	if err != nil {
		return err
	}
	return c.Barrier(ctx)
}

// scenarioMissing: the last rank never calls; the others time out at
// their 1 s deadline naming it.
func scenarioMissing(ctx context.Context, c comm.Comm) error {
	const deadline = time.Second
	return lastMissing(ctx, c, 0, func(g comm.Comm, x *tensor.Tensor) error {
		dctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		start := time.Now()
		err := g.AllReduce(dctx, x, comm.Sum)
		if d := time.Since(start); d < deadline || d > deadline+3*time.Second {
			return fmt.Errorf("gave up after %v, deadline %v: %v", d, deadline, err)
		}
		if err := wantFault(err, []int{g.Size() - 1}, comm.ErrTimeout); err != nil {
			return err
		}
		// the caller's deadline (1 s), not the group's timeout, ran out
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the caller's context deadline passed") {
			return fmt.Errorf("want the caller's context deadline named and wrapped, got %w", err)
		}
		return nil
	})
}

// scenarioCancel: the last rank never calls and the others cancel their
// call after a moment: each names itself as having cancelled (ErrAborted),
// not the missing rank as late, as soon as it cancels, not at the group's
// deadline (4 s): the cancel aborts the exchange's waits.
func scenarioCancel(ctx context.Context, c comm.Comm) error {
	return lastMissing(ctx, c, time.Second, func(g comm.Comm, x *tensor.Tensor) error {
		cctx, cancel := context.WithCancel(ctx)
		const after = 200 * time.Millisecond
		time.AfterFunc(after, cancel)
		start := time.Now()
		err := g.AllReduce(cctx, x, comm.Sum)
		if d := time.Since(start); d < after || d > after+time.Second {
			return fmt.Errorf("gave up after %v, cancelled after %v: %v", d, after, err)
		}
		if err := wantFault(err, []int{g.Rank()}, comm.ErrAborted); err != nil {
			return err
		}
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d cancelled its call", g.Rank())) {
			return fmt.Errorf("want the cancel named and wrapped, got %w", err)
		}
		return nil
	})
}

// scenarioCancelLate: the others cancel as in scenarioCancel, and the last
// rank joins afterwards: its descriptor lands in the aborted exchanges'
// buffers (kept until the group closes), and its call fails naming ranks
// that cancelled, never itself. Nobody crashes.
func scenarioCancelLate(ctx context.Context, c comm.Comm) error {
	g, err := fresh(ctx, c)
	if err != nil {
		return err
	}
	defer g.Close()
	x := filled(tensor.Float32, 4, func(int) float64 { return 1 })
	defer x.Free()
	last := g.Size() - 1
	if g.Rank() != last {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, cancel)
		if err := wantFault(g.AllReduce(cctx, x, comm.Sum), []int{g.Rank()}, comm.ErrAborted); err != nil {
			return err
		}
		// the world barrier's deadline (4 s) counts from here: meet the
		// last rank there after its call (1 s) and post-mortem (<= 2 s)
		time.Sleep(1500 * time.Millisecond)
	} else {
		time.Sleep(600 * time.Millisecond)
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err := g.AllReduce(dctx, x, comm.Sum)
		var ce *comm.Error
		if !errors.As(err, &ce) || len(ce.Ranks) == 0 || slices.Contains(ce.Ranks, last) {
			return fmt.Errorf("want a *comm.Error naming ranks that cancelled, got %v", err)
		}
		fmt.Printf("as expected: %v\n", err)
	}
	return c.Barrier(ctx)
}

// lastMissing runs call on a fresh group on every rank but the last, which
// waits lastWaits, then all meet at a world barrier.
func lastMissing(ctx context.Context, c comm.Comm, lastWaits time.Duration, call func(g comm.Comm, x *tensor.Tensor) error) error {
	g, err := fresh(ctx, c)
	if err != nil {
		return err
	}
	defer g.Close()
	if g.Rank() != g.Size()-1 {
		x := filled(tensor.Float32, 4, func(int) float64 { return 1 })
		defer x.Free()
		if err := call(g, x); err != nil {
			return err
		}
	} else {
		time.Sleep(lastWaits)
	}
	return c.Barrier(ctx)
}

// scenarioDieBetween: the last rank exits between two collectives; the
// others' next call names it.
func scenarioDieBetween(ctx context.Context, c comm.Comm) error {
	last := c.Size() - 1
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if c.Rank() == last {
		os.Exit(exitDied)
	}
	time.Sleep(200 * time.Millisecond) // its sockets are closed by now
	x := filled(tensor.Float32, 1000, func(int) float64 { return 1 })
	defer x.Free()
	return wantFault(c.AllReduce(ctx, x, comm.Sum), []int{last}, comm.ErrAborted, comm.ErrTimeout)
}

// scenarioDieDuring: the last rank exits while the others are inside large
// all-reduces; every survivor's error names it.
func scenarioDieDuring(ctx context.Context, c comm.Comm) error {
	return dieDuring(ctx, c, c.Size()-1)
}

// scenarioDieRoot: rank 0, which serves the store, dies the same way.
func scenarioDieRoot(ctx context.Context, c comm.Comm) error {
	return dieDuring(ctx, c, 0)
}

func dieDuring(ctx context.Context, c comm.Comm, last int) error {
	x := filled(tensor.Float32, 4<<20, func(int) float64 { return 1 })
	defer x.Free()
	if c.Rank() == last {
		go func() {
			time.Sleep(300 * time.Millisecond)
			os.Exit(exitDied)
		}()
	}
	for k := 0; ; k++ {
		if err := c.AllReduce(ctx, x, comm.Sum); err != nil {
			fmt.Printf("failed in all-reduce %d\n", k)
			return wantFault(err, []int{last}, comm.ErrAborted, comm.ErrTimeout)
		}
	}
}
