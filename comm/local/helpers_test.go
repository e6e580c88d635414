package local

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/internal/commtest"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// testTimeout bounds every operation of the tests that expect success.
const testTimeout = 10 * time.Second

func newWorld(t testing.TB, n int, timeout time.Duration) *World {
	t.Helper()
	w, err := NewWorld(n, Options{Timeout: timeout})
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	return w
}

// onAll runs fn on every rank concurrently and returns each rank's error.
func onAll(cs []comm.Comm, fn func(c comm.Comm) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(c)
		}()
	}
	wg.Wait()
	return errs
}

func mustAll(t testing.TB, cs []comm.Comm, fn func(c comm.Comm) error) {
	t.Helper()
	for r, err := range onAll(cs, fn) {
		require.NoError(t, err, "rank %d", r)
	}
}

func newTensor(t testing.TB, dt tensor.DType, n int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.Empty(dt, n)
	require.NoError(t, err)
	t.Cleanup(func() { x.Free() })
	return x
}

// tolerance is the documented accuracy against the float64 reference:
// float32 sums within n*2^-24*sum|x| (rank-ordered float32 accumulation);
// halves within one unit in the last place of the rounded reference (the
// float32 sum of up to 8 halves of these magnitudes is exact, so only the
// final rounding, and for Avg the second one, remain); Max, Min and ints
// exact.
func tolerance(dt tensor.DType, op comm.ReduceOp, xs []float64, want float64) float64 {
	if op == comm.Max || op == comm.Min || dt == tensor.Int32 || dt == tensor.Int64 {
		return 0
	}
	switch dt {
	case tensor.Float32:
		s := 0.0
		for _, x := range xs {
			s += math.Abs(x)
		}
		if op == comm.Avg {
			s /= float64(len(xs))
		}
		return float64(len(xs)+1) * 0x1p-24 * s
	case tensor.Float16:
		return ulp(want, 10, -24)
	}
	return ulp(want, 7, -133)
}

// ulp is the spacing of a binary format with mbits mantissa bits at v.
func ulp(v float64, mbits, minExp int) float64 {
	if v == 0 {
		return math.Ldexp(1, minExp)
	}
	_, e := math.Frexp(math.Abs(v))
	return math.Ldexp(1, max(e-1-mbits, minExp))
}

// values reads all of x as float64.
func values(x *tensor.Tensor) []float64 {
	out := make([]float64, x.Numel())
	for i := range out {
		out[i], _ = get(x, i)
	}
	return out
}

// check compares got[i] with the bit-exact model and the float64 reference.
// (No t.Helper on this hot path: it costs a microsecond per call.)
func check(t *testing.T, what string, got []float64, i int, dt tensor.DType, op comm.ReduceOp, xs []float64) {
	g := got[i]
	m := model(dt, op, xs)
	// The conditions guard the require calls so that passing elements do
	// not box their message arguments.
	if g != m && !(math.IsNaN(g) && math.IsNaN(m)) {
		require.Failf(t, "not the bit-exact model", "%s[%d] = %v, want %v (rank-ordered float32 reduction, inputs %v)", what, i, g, m, xs)
	}
	r := ref(op, xs)
	if d := math.Abs(g - r); d > tolerance(dt, op, xs, r) {
		require.Failf(t, "outside the tolerance", "%s[%d] = %v, float64 reference %v: off by %g > tolerance %g", what, i, g, r, d, tolerance(dt, op, xs, r))
	}
}

var ctxBG = context.Background()

// The reference data and results every backend's tests share.
var (
	input = commtest.Input
	set   = commtest.Set
	get   = commtest.Get
	model = commtest.Model
	ref   = commtest.Exact
)
