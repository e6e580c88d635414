package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testBackend(t testing.TB) *backend.CPU {
	t.Helper()
	be, err := backend.NewCPU(2)
	require.NoError(t, err)
	t.Cleanup(func() { be.Close() })
	return be
}

func randv(r *rand.Rand, n int, scale float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = (r.Float64()*2 - 1) * scale
	}
	return v
}

// f32 makes a float32 tensor holding v (rounded); the returned float64s are
// the rounded values, so the reference sees exactly what C sees.
func f32(t testing.TB, v []float64) (*tensor.Tensor, []float64) {
	t.Helper()
	x, err := tensor.Empty(tensor.Float32, len(v))
	require.NoError(t, err)
	t.Cleanup(func() { x.Free() })
	f, _ := x.Float32s()
	out := make([]float64, len(v))
	for i := range v {
		f[i] = float32(v[i])
		out[i] = float64(f[i])
	}
	return x, out
}

func i32(t testing.TB, v []int32) *tensor.Tensor {
	t.Helper()
	x, err := tensor.Empty(tensor.Int32, len(v))
	require.NoError(t, err)
	t.Cleanup(func() { x.Free() })
	f, _ := x.Int32s()
	copy(f, v)
	return x
}

func vals(t testing.TB, x *tensor.Tensor) []float64 {
	t.Helper()
	f, err := x.Float32s()
	require.NoError(t, err)
	out := make([]float64, len(f))
	for i := range f {
		out[i] = float64(f[i])
	}
	return out
}

// closeTo fails when max |got-want| / (atol + |want|) scaled... exceeds tol,
// relative to the largest |want| so that near-zero entries do not dominate.
func closeTo(t testing.TB, what string, got, want []float64, tol float64) {
	t.Helper()
	require.GreaterOrEqual(t, len(got), len(want), "%s: values", what)
	scale := 1e-3
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	worst, at := 0.0, -1
	for i, w := range want {
		e := math.Abs(got[i]-w) / scale
		if !(e <= worst) {
			worst, at = e, i
		}
	}
	// LessOrEqual fails on a NaN worst too; got[at] exists only when it fails
	if !assert.LessOrEqual(t, worst, tol, "%s: error relative to max |want| %.3g", what, scale) {
		t.Logf("%s: worst at %d: got %g want %g", what, at, got[at], want[at])
	}
}

// fdCheck compares analytic[i] with the central difference of loss at up to
// k indices of theta (which it perturbs and restores).
func fdCheck(t testing.TB, what string, theta, analytic []float64, k int, loss func() float64) {
	t.Helper()
	r := rand.New(rand.NewPCG(7, uint64(len(theta))))
	idx := r.Perm(len(theta))
	if len(idx) > k {
		idx = idx[:k]
	}
	const h = 1e-5
	for _, i := range idx {
		old := theta[i]
		theta[i] = old + h
		lp := loss()
		theta[i] = old - h
		lm := loss()
		theta[i] = old
		fd := (lp - lm) / (2 * h)
		assert.InDelta(t, fd, analytic[i], 1e-6+1e-5*math.Abs(fd), "%s[%d]: analytic %.10g, finite difference %.10g", what, i, analytic[i], fd)
	}
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
