package sim_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// kern is what both the CPU backend and sim.Backend implement.
type kern interface {
	backend.Backend
	backend.NN
}

// delays are the modes every differential test runs in: none (even when
// DEEPGO_SIM_DELAY is set), and random delays of up to 300µs per kernel.
var delays = []struct {
	name string
	max  time.Duration
}{{"nodelay", -1}, {"delay", 300 * time.Microsecond}}

func newSim(t testing.TB, dev int, maxDelay time.Duration) *sim.Backend {
	t.Helper()
	b, err := sim.NewBackend(dev, sim.Options{MaxDelay: maxDelay, Seed: 7, Threads: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

func newCPU(t testing.TB) *backend.CPU {
	t.Helper()
	b, err := backend.NewCPU(1)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// spec is a tensor to make: random normal floats, or ints in [0, ints).
type spec struct {
	dt    tensor.DType
	shape []int
	ints  int
}

func f32(shape ...int) spec                 { return spec{dt: tensor.Float32, shape: shape} }
func half(dt tensor.DType, n int) spec      { return spec{dt: dt, shape: []int{n}} }
func ids(v int, shape ...int) spec          { return spec{dt: tensor.Int32, shape: shape, ints: v} }
func typed(dt tensor.DType, sh ...int) spec { return spec{dt: dt, shape: sh} }

// hostTensor makes s in host memory from r.
func hostTensor(t testing.TB, r *rand.Rand, s spec) *tensor.Tensor {
	t.Helper()
	x, err := tensor.Empty(s.dt, s.shape...)
	require.NoError(t, err)
	t.Cleanup(func() { x.Free() })
	switch s.dt {
	case tensor.Float32:
		f, _ := x.Float32s()
		for i := range f {
			f[i] = float32(r.NormFloat64())
		}
	case tensor.Float16, tensor.BFloat16:
		u, _ := x.Uint16s()
		for i := range u {
			v := float32(r.NormFloat64())
			if s.dt == tensor.Float16 {
				u[i] = tensor.Float32ToFloat16(v)
			} else {
				u[i] = tensor.Float32ToBFloat16(v)
			}
		}
	case tensor.Int32:
		d, _ := x.Int32s()
		for i := range d {
			d[i] = int32(r.IntN(s.ints))
		}
	}
	return x
}

// onDevice copies host tensor h to be's device (itself for the CPU).
func onDevice(t testing.TB, be backend.Backend, h *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	if be.Device().IsCPU() {
		x, err := tensor.Empty(h.DType(), h.Shape()...)
		require.NoError(t, err)
		t.Cleanup(func() { x.Free() })
		require.NoError(t, be.Copy(x, h))
		return x
	}
	x, err := be.Empty(h.DType(), h.Shape()...)
	require.NoError(t, err)
	t.Cleanup(func() { x.Free() })
	require.NoError(t, be.Copy(x, h))
	return x
}

// toHost copies x (on be's device) into a new host tensor and returns its bytes.
func toHost(t testing.TB, be backend.Backend, x *tensor.Tensor) []byte {
	t.Helper()
	h, err := tensor.Empty(x.DType(), x.Shape()...)
	require.NoError(t, err)
	defer h.Free()
	require.NoError(t, be.Copy(h, x))
	raw, err := h.RawBytes()
	require.NoError(t, err)
	return append([]byte(nil), raw...)
}

func floats(t testing.TB, be backend.Backend, x *tensor.Tensor) []float32 {
	t.Helper()
	h, err := tensor.Empty(tensor.Float32, x.Numel())
	require.NoError(t, err)
	defer h.Free()
	flat, err := x.Reshape(x.Numel())
	require.NoError(t, err)
	require.NoError(t, be.Copy(h, flat))
	f, _ := h.Float32s()
	return append([]float32(nil), f...)
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

var errDeadline = context.DeadlineExceeded

func contextWithTimeout(_ testing.TB, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
