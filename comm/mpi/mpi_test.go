//go:build mpi

package mpi

// Run under mpirun (any -np, 2 is what CI uses):
//
//	go test -tags mpi -c -o /tmp/mpi.test ./comm/mpi
//	mpirun --allow-run-as-root --oversubscribe -np 2 /tmp/mpi.test -test.v
//
// Without mpirun the binary is a singleton world of one rank.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/internal/commtest"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

var world comm.Comm

func TestMain(m *testing.M) {
	w, err := World(Options{Timeout: 20 * time.Second, Threads: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	world = w
	code := m.Run()
	Finalize()
	os.Exit(code)
}

var bg = context.Background()

func val(dt tensor.DType, r, i int) float64 { return commtest.Input(dt, r, i) }

func filled(t *testing.T, dt tensor.DType, n int, f func(i int) float64) *tensor.Tensor {
	x, err := tensor.Empty(dt, n)
	require.NoError(t, err)
	t.Cleanup(func() { x.Free() })
	commtest.Set(x, f)
	return x
}

func at(x *tensor.Tensor, i int) float64 {
	v, _ := commtest.Get(x, i)
	return v
}

func reference(dt tensor.DType, op comm.ReduceOp, n, i int, col func(r int) int) float64 {
	xs := make([]float64, n)
	for r := range xs {
		xs[r] = val(dt, r, col(r))
	}
	return commtest.Exact(op, xs)
}

// close enough: float32 sums within a few ulps, halves within one ulp of
// the rounded reference, max/min and ints exact.
func near(dt tensor.DType, got, want float64) bool {
	tol := 0.0
	switch dt {
	case tensor.Float32:
		tol = 1e-6 * (1 + math.Abs(want))
	case tensor.Float16:
		tol = math.Abs(want)*0x1p-10 + 0x1p-24
	case tensor.BFloat16:
		tol = math.Abs(want)*0x1p-7 + 0x1p-133
	}
	return math.Abs(got-want) <= tol
}

func TestReductions(t *testing.T) {
	n, me := world.Size(), world.Rank()
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Int32} {
		for _, op := range []comm.ReduceOp{comm.Sum, comm.Avg, comm.Max, comm.Min} {
			if comm.CheckReduce(dt, op) != nil {
				continue
			}
			for _, length := range []int{0, 1, 7, 1001} {
				t.Run(fmt.Sprintf("%v/%v/%d", dt, op, length), func(t *testing.T) {
					x := filled(t, dt, length, func(i int) float64 { return val(dt, me, i) })
					require.NoError(t, world.AllReduce(bg, x, op))
					src := filled(t, dt, n*length, func(i int) float64 { return val(dt, me, i) })
					dst := filled(t, dt, length, func(int) float64 { return 0 })
					require.NoError(t, world.ReduceScatter(bg, dst, src, op))
					red := filled(t, dt, length, func(i int) float64 { return val(dt, me, i) })
					require.NoError(t, world.Reduce(bg, red, 0, op))
					for i := range length {
						if w := reference(dt, op, n, i, func(int) int { return i }); !near(dt, at(x, i), w) {
							require.Failf(t, "AllReduce differs", "AllReduce[%d] = %v, want %v", i, at(x, i), w)
						}
						if w := reference(dt, op, n, i, func(int) int { return me*length + i }); !near(dt, at(dst, i), w) {
							require.Failf(t, "ReduceScatter differs", "ReduceScatter[%d] = %v, want %v", i, at(dst, i), w)
						}
						w := val(dt, me, i)
						if me == 0 {
							w = reference(dt, op, n, i, func(int) int { return i })
						}
						if !near(dt, at(red, i), w) {
							require.Failf(t, "Reduce differs", "Reduce[%d] = %v, want %v", i, at(red, i), w)
						}
					}
				})
			}
		}
	}
}

func TestDataMovement(t *testing.T) {
	n, me := world.Size(), world.Rank()
	dt := tensor.BFloat16
	for _, m := range []int{0, 1, 33} {
		src := filled(t, dt, m, func(i int) float64 { return val(dt, me, i) })
		dst := filled(t, dt, n*m, func(int) float64 { return 0 })
		require.NoError(t, world.AllGather(bg, dst, src))
		inPlace := filled(t, dt, n*m, func(i int) float64 { return val(dt, me, i%max(m, 1)) })
		mine, _ := inPlace.Slice(me*m, m)
		require.NoError(t, world.AllGather(bg, inPlace, mine))
		b := filled(t, dt, m, func(i int) float64 { return val(dt, me, i) })
		require.NoError(t, world.Broadcast(bg, b, n-1))
		a2aIn := filled(t, dt, n*m, func(i int) float64 { return val(dt, me, i) })
		a2aOut := filled(t, dt, n*m, func(int) float64 { return 0 })
		require.NoError(t, world.AllToAll(bg, a2aOut, a2aIn))
		for j := range n {
			for i := range m {
				if g, w := at(dst, j*m+i), val(dt, j, i); g != w {
					require.Failf(t, "AllGather differs", "AllGather[%d] = %v, want %v", j*m+i, g, w)
				}
				if g, w := at(inPlace, j*m+i), val(dt, j, i); g != w {
					require.Failf(t, "in-place AllGather differs", "in-place AllGather[%d] = %v, want %v", j*m+i, g, w)
				}
				if g, w := at(a2aOut, j*m+i), val(dt, j, me*m+i); g != w {
					require.Failf(t, "AllToAll differs", "AllToAll[%d] = %v, want %v", j*m+i, g, w)
				}
			}
		}
		for i := range m {
			if g, w := at(b, i), val(dt, n-1, i); g != w {
				require.Failf(t, "Broadcast differs", "Broadcast[%d] = %v, want %v", i, g, w)
			}
		}
		if n > 1 {
			out := filled(t, dt, m, func(int) float64 { return 0 })
			w := world.SendAsync(bg, src, (me+1)%n)
			require.NoError(t, world.Recv(bg, out, (me+n-1)%n))
			require.NoError(t, w.Wait(bg))
			for i := range m {
				if g, w := at(out, i), val(dt, (me+n-1)%n, i); g != w {
					require.Failf(t, "Recv differs", "Recv[%d] = %v, want %v", i, g, w)
				}
			}
		}
	}
	require.NoError(t, world.Barrier(bg))
}

// fresh splits a new group of all ranks, so a fault test breaks only it.
func fresh(t *testing.T, timeout time.Duration) comm.Comm {
	g, err := world.Split(bg, 0, world.Rank(), t.Name())
	require.NoError(t, err)
	g.(*mpiComm).timeout = timeout
	return g
}

// TestMismatch: rank 1 broadcasts while the others all-reduce; every rank
// gets ErrMismatch naming rank 1. With two ranks the classes of equal
// calls tie and rank 0's counts as the larger, so rank 1 is named too.
func TestMismatch(t *testing.T) {
	if world.Size() < 2 {
		t.Skip("needs 2 ranks")
	}
	g := fresh(t, 5*time.Second)
	x := filled(t, tensor.Float32, 10, func(int) float64 { return 1 })
	var err error
	if g.Rank() == 1 {
		err = g.Broadcast(bg, x, 0)
	} else {
		err = g.AllReduce(bg, x, comm.Sum)
	}
	var ce *comm.Error
	require.ErrorIs(t, err, comm.ErrMismatch)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "[1]", fmt.Sprint(ce.Ranks), "%v: want ErrMismatch naming rank 1", err)
	t.Log(err)
	world.Barrier(bg)
}

// TestTimeoutNamesMissingRank: a call that stops waiting for rank 1 names
// it, and says whose clock ran out: the group's timeout (never joined), the
// caller's context deadline (wraps context.DeadlineExceeded), or the
// caller's cancel (aborted by this rank).
func TestTimeoutNamesMissingRank(t *testing.T) {
	if world.Size() < 2 {
		t.Skip("needs 2 ranks")
	}
	const deadline = 300 * time.Millisecond
	for _, tc := range []struct {
		name     string
		timeout  time.Duration // the group's
		deadline time.Duration // the caller's context's; 0: none
		cancel   time.Duration // the caller cancels after this; 0: never
		sentinel error
		ranks    string // named by the error ("me": the calling rank)
		want     string
		callers  bool // wraps context.DeadlineExceeded
	}{
		{name: "group timeout", timeout: deadline, sentinel: comm.ErrTimeout, ranks: "[1]", want: "never joined"},
		{name: "caller's deadline", timeout: time.Minute, deadline: deadline, sentinel: comm.ErrTimeout, ranks: "[1]",
			want: "the caller's context deadline passed after", callers: true},
		{name: "caller's cancel", timeout: time.Minute, cancel: deadline, sentinel: comm.ErrAborted, ranks: "[me]",
			want: "rank me cancelled its call before ranks [1] joined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := fresh(t, tc.timeout)
			if g.Rank() != 1 { // rank 1 never joins: it waits at the world barrier below
				ctx := bg
				if tc.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(bg, tc.deadline)
					defer cancel()
				}
				if tc.cancel > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(bg)
					time.AfterFunc(tc.cancel, cancel)
				}
				start := time.Now()
				err := g.AllReduce(ctx, filled(t, tensor.Float32, 4, func(int) float64 { return 1 }), comm.Sum)
				var ce *comm.Error
				require.ErrorIs(t, err, tc.sentinel)
				require.ErrorAs(t, err, &ce)
				me := fmt.Sprint(g.Rank()) // "me": the calling rank, whatever -np
				require.Equal(t, strings.ReplaceAll(tc.ranks, "me", me), fmt.Sprint(ce.Ranks), "%v", err)
				require.ErrorContains(t, err, strings.ReplaceAll(tc.want, "me", me))
				require.Equal(t, tc.callers, errors.Is(err, context.DeadlineExceeded), "%v", err)
				d := time.Since(start)
				require.GreaterOrEqual(t, d, deadline, "gave up too early")
				require.LessOrEqual(t, d, deadline+10*time.Second, "gave up too late")
				t.Log(err)
			}
			world.Barrier(bg)
		})
	}
}

func TestSplit(t *testing.T) {
	n, me := world.Size(), world.Rank()
	g, err := world.Split(bg, me%2, -me, "parity")
	require.NoError(t, err)
	x := filled(t, tensor.Int32, 1, func(int) float64 { return float64(me) })
	require.NoError(t, g.AllReduce(bg, x, comm.Sum))
	want := 0
	for r := me % 2; r < n; r += 2 {
		want += r
	}
	require.Equal(t, float64(want), at(x, 0), "parity group sum (members %v)", g.Members())
	require.Equal(t, me, g.Members()[g.Rank()], "members %v, rank %d", g.Members(), g.Rank())
}
