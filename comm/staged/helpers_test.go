package staged_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// testTimeout bounds every operation of the tests that expect success.
const testTimeout = 20 * time.Second

func newSim(t testing.TB, dev int) *sim.Backend {
	t.Helper()
	b, err := sim.NewBackend(dev, sim.Options{MaxDelay: 50 * time.Microsecond, Threads: 1})
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

// onAll runs fn on every rank concurrently and returns each rank's error.
func onAll(n int, fn func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r)
		}()
	}
	wg.Wait()
	return errs
}

// value is element i of rank r's k-th tensor: exactly representable in dt,
// with varied signs and magnitudes so that float sums round.
func value(dt tensor.DType, r, k, i int) float64 {
	x := math.Sin(float64(r)*1.37+float64(k)*0.59+float64(i)*0.731) * math.Ldexp(1, (i*3+r+k)%8-4)
	switch dt {
	case tensor.Float32:
		return float64(float32(x))
	case tensor.Int32, tensor.Int64:
		return math.Round(x * 100)
	}
	return float64(tensor.ToHalfPrecision(dt, float32(x)))
}

// hostFill makes a host tensor of n elements holding value(dt, r, k, ·).
func hostFill(t testing.TB, dt tensor.DType, n, r, k int) *tensor.Tensor {
	t.Helper()
	h, err := tensor.Empty(dt, n)
	require.NoError(t, err)
	switch dt {
	case tensor.Float32:
		f, _ := h.Float32s()
		for i := range f {
			f[i] = float32(value(dt, r, k, i))
		}
	case tensor.Float16, tensor.BFloat16:
		u, _ := h.Uint16s()
		for i := range u {
			if dt == tensor.Float16 {
				u[i] = tensor.Float32ToFloat16(float32(value(dt, r, k, i)))
			} else {
				u[i] = tensor.Float32ToBFloat16(float32(value(dt, r, k, i)))
			}
		}
	case tensor.Int32:
		d, _ := h.Int32s()
		for i := range d {
			d[i] = int32(value(dt, r, k, i))
		}
	case tensor.Int64:
		d, _ := h.Int64s()
		for i := range d {
			d[i] = int64(value(dt, r, k, i))
		}
	default:
		t.Fatalf("hostFill: dtype %v", dt)
	}
	return h
}

// placement says where a case's tensors live.
type placement int

const (
	onDevice placement = iota // every tensor on the rank's backend's device
	onHost                    // every tensor in host memory (passes straight through)
	mixed                     // alternately on the device and the host
)

func (p placement) String() string { return [...]string{"device", "host", "mixed"}[p] }

// env makes one rank's tensors for a case. On the device, each is written
// by kernels queued just before the collective (a Pack from a scratch
// tensor, then a Scale by 2 for floats), so a staging copy that does not
// order after them reads stale bytes.
type env struct {
	t     testing.TB
	be    backend.Backend
	host  backend.Backend // for host tensors
	place placement
	rank  int
	made  []*tensor.Tensor
}

// tensor makes the k-th tensor of this rank: n elements of dt.
func (e *env) tensor(dt tensor.DType, n int) *tensor.Tensor {
	e.t.Helper()
	k := len(e.made)
	h := hostFill(e.t, dt, n, e.rank, k)
	defer h.Free()
	be := e.be
	if e.place == onHost || (e.place == mixed && k%2 == 1) {
		be = e.host
	}
	x, err := be.Empty(dt, n)
	require.NoError(e.t, err)
	e.made = append(e.made, x)
	tmp, err := be.Empty(dt, n)
	require.NoError(e.t, err)
	require.NoError(e.t, be.Copy(tmp, h))
	require.NoError(e.t, be.Pack(x, []int{0}, []*tensor.Tensor{tmp}))
	if dt != tensor.Int32 && dt != tensor.Int64 {
		require.NoError(e.t, be.Scale([]*tensor.Tensor{x}, 2))
	}
	require.NoError(e.t, tmp.Free()) // stream-ordered on the device
	return x
}

// read copies x (on the host or the device) into host bytes.
func (e *env) read(x *tensor.Tensor) []byte {
	e.t.Helper()
	h, err := tensor.Empty(x.DType(), x.Numel())
	require.NoError(e.t, err)
	defer h.Free()
	if x.Device().IsCPU() {
		require.NoError(e.t, e.host.Copy(h, x))
	} else {
		require.NoError(e.t, e.be.Copy(h, x))
	}
	b, err := h.RawBytes()
	require.NoError(e.t, err)
	return append([]byte(nil), b...)
}

func (e *env) free() {
	for _, x := range e.made {
		x.Free()
	}
}

// waitAll waits for every work, returning the first error.
func waitAll(ctx context.Context, ws ...comm.Work) error {
	var first error
	for _, w := range ws {
		if err := w.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
