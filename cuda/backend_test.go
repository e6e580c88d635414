//go:build cuda

package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every kernel against the CPU backend on random data with edge values
// (zeros, infinities, NaNs, subnormals, rounding ties), sizes 0 to 1<<20+3,
// several tensors per list. Bits must match, except that a NaN made by
// arithmetic matches any NaN (GPUs give the canonical NaN, x86 keeps the
// payload); sums of squares agree to 1e-12 relative.

var sizes = []int{0, 1, 17, 4097, 1<<20 + 3}

func setup(t *testing.T) (*backend.CPU, *Backend) {
	t.Helper()
	needDevice(t)
	cpu, err := backend.NewCPU(0)
	require.NoError(t, err)
	gpu, err := NewBackend(0)
	require.NoError(t, err)
	t.Cleanup(func() { gpu.Close(); cpu.Close() })
	return cpu, gpu
}

var edge32 = []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 1, 0x807fffff,
	0x3f801000, 0x3f803000, 0x3f808000, 0x3f818000, 0x477fe000, 0x477ff000, 0x33000000, 0x33000001, 0x7f7fffff}
var edge16 = []uint16{0, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfd01, 0x7c01, 1, 0x83ff, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x0080}

// hostRand makes a host tensor of n random elements, edge values first.
func hostRand(t *testing.T, r *rand.Rand, dt tensor.DType, n int, finite bool) *tensor.Tensor {
	t.Helper()
	h, err := tensor.Empty(dt, n)
	require.NoError(t, err)
	raw, _ := h.RawBytes()
	for i := 0; i < n; i++ {
		switch dt {
		case tensor.Float32:
			u := math.Float32bits(float32(r.NormFloat64() * math.Ldexp(1, r.IntN(20)-10)))
			if i < len(edge32) && !finite {
				u = edge32[i]
			} else if r.IntN(16) == 0 && !finite {
				u = r.Uint32()
			}
			putU32(raw, i, u)
		case tensor.Float16, tensor.BFloat16:
			u := uint16(r.Uint32())
			if i < len(edge16) {
				u = edge16[i]
			}
			if finite && (u&0x7c00 == 0x7c00 && dt == tensor.Float16 || u&0x7f80 == 0x7f80 && dt == tensor.BFloat16) {
				u &= 0x83ff
			}
			raw[2*i], raw[2*i+1] = byte(u), byte(u>>8)
		case tensor.Int32:
			putU32(raw, i, uint32(r.IntN(1<<20)-1<<19))
		default:
			for k := range dt.Size() {
				raw[i*dt.Size()+k] = byte(r.Uint32())
			}
		}
	}
	return h
}

func putU32(b []byte, i int, u uint32) {
	b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

func toDevice(t *testing.T, h *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	d, err := Malloc(0, h.DType(), h.Numel())
	require.NoError(t, err)
	require.NoError(t, CopyToDevice(d, h))
	t.Cleanup(func() { d.Free() })
	return d
}

// lists returns matching host and device lists {n, 1, 17, 0, n/2}.
func lists(t *testing.T, r *rand.Rand, dt tensor.DType, n int, finite bool) (hs, ds []*tensor.Tensor) {
	for _, m := range []int{n, 1, 17, 0, n / 2} {
		h := hostRand(t, r, dt, m, finite)
		t.Cleanup(func() { h.Free() })
		hs = append(hs, h)
		ds = append(ds, toDevice(t, h))
	}
	return hs, ds
}

func isNaN(dt tensor.DType, b []byte, i int) bool {
	switch dt {
	case tensor.Float32:
		u := uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
		return u&0x7fffffff > 0x7f800000
	case tensor.Float16:
		return (uint16(b[2*i])|uint16(b[2*i+1])<<8)&0x7fff > 0x7c00
	case tensor.BFloat16:
		return (uint16(b[2*i])|uint16(b[2*i+1])<<8)&0x7fff > 0x7f80
	}
	return false
}

// same downloads d and compares it with host tensor h bit for bit.
func same(t *testing.T, what string, h, d *tensor.Tensor, nanAny bool) {
	t.Helper()
	back, err := tensor.Empty(h.DType(), h.Numel())
	require.NoError(t, err)
	defer back.Free()
	require.NoError(t, CopyToHost(back, d))
	a, _ := h.RawBytes()
	b, _ := back.RawBytes()
	es := h.DType().Size()
	bad := 0
	for i := 0; i < h.Numel(); i++ {
		if string(a[i*es:(i+1)*es]) != string(b[i*es:(i+1)*es]) && !(nanAny && isNaN(h.DType(), a, i) && isNaN(h.DType(), b, i)) {
			if bad < 3 {
				t.Logf("%s: element %d: cpu % x, gpu % x", what, i, a[i*es:(i+1)*es], b[i*es:(i+1)*es])
			}
			bad++
		}
	}
	assert.Zero(t, bad, "%s: %d of %d elements differ", what, bad, h.Numel())
}

var floats = []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16}

func TestCast(t *testing.T) {
	cpu, gpu := setup(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range sizes {
		for _, a := range floats {
			for _, b := range floats {
				hs, ds := lists(t, r, a, n, false)
				hd, dd := lists(t, r, b, n, false)
				require.NoError(t, cpu.Cast(hd, hs))
				require.NoError(t, gpu.Cast(dd, ds))
				for i := range hd {
					same(t, a.String()+">"+b.String(), hd[i], dd[i], false)
				}
			}
		}
	}
}

func TestScaleAxpy(t *testing.T) {
	cpu, gpu := setup(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range sizes {
		for _, dt := range floats {
			hx, dx := lists(t, r, dt, n, false)
			hy, dy := lists(t, r, dt, n, false)
			require.NoError(t, cpu.Scale(hx, 0.37))
			require.NoError(t, gpu.Scale(dx, 0.37))
			for i := range hx {
				same(t, "scale "+dt.String(), hx[i], dx[i], true)
			}
			// hx and dx agree now (NaN payloads aside, which stay NaN)
			require.NoError(t, cpu.Axpy(-1.5, hx, hy))
			require.NoError(t, gpu.Axpy(-1.5, dx, dy))
			for i := range hy {
				same(t, "axpy "+dt.String(), hy[i], dy[i], true)
			}
		}
	}
}

// Axpy adds across dtypes as the CPU backend does (the GPT adds its
// float32 tied-embedding share into a bf16 or f16 gradient): same bits.
func TestAxpyMixed(t *testing.T) {
	cpu, gpu := setup(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range sizes {
		for _, xt := range floats {
			for _, yt := range floats {
				if xt == yt {
					continue
				}
				hx, dx := lists(t, r, xt, n, false)
				hy, dy := lists(t, r, yt, n, false)
				require.NoError(t, cpu.Axpy(0.75, hx, hy))
				require.NoError(t, gpu.Axpy(0.75, dx, dy))
				for i := range hy {
					same(t, "axpy "+xt.String()+" into "+yt.String(), hy[i], dy[i], true)
				}
			}
		}
	}
}

func TestSumSquaresNonFinite(t *testing.T) {
	cpu, gpu := setup(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range sizes {
		for _, dt := range floats {
			hs, ds := lists(t, r, dt, n, true)
			pc, pg := make([]float64, len(hs)), make([]float64, len(ds))
			tc, err := cpu.SumSquares(hs, pc)
			require.NoError(t, err)
			tg, err := gpu.SumSquares(ds, pg)
			require.NoError(t, err)
			for i, want := range append([]float64{tc}, pc...) {
				got := append([]float64{tg}, pg...)[i]
				assert.InDelta(t, want, got, 1e-12*math.Abs(want), "sumsq %v n=%d [%d]: gpu %v, cpu %v", dt, n, i-1, got, want)
			}
			fc, _ := cpu.NonFinite(hs)
			fg, err := gpu.NonFinite(ds)
			assert.NoError(t, err, "nonfinite %v n=%d", dt, n)
			assert.False(t, fc, "nonfinite %v n=%d on finite data: cpu", dt, n)
			assert.False(t, fg, "nonfinite %v n=%d on finite data: gpu", dt, n)
			hs2, ds2 := lists(t, r, dt, n, false)
			fc, _ = cpu.NonFinite(hs2)
			fg, _ = gpu.NonFinite(ds2)
			assert.Equal(t, fc, fg, "nonfinite %v n=%d: cpu vs gpu", dt, n)
		}
	}
}

func TestPackUnpack(t *testing.T) {
	cpu, gpu := setup(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range sizes {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Uint8, tensor.Int64} {
			hs, ds := lists(t, r, dt, n, false)
			offs, total := make([]int, len(hs)), 0
			for i := len(hs) - 1; i >= 0; i-- {
				offs[i], total = total, total+hs[i].Numel()+3
			}
			hf, _ := tensor.Empty(dt, total)
			defer hf.Free()
			df, err := gpu.Empty(dt, total)
			require.NoError(t, err)
			defer df.Free()
			require.NoError(t, cpu.Pack(hf, offs, hs))
			require.NoError(t, gpu.Pack(df, offs, ds))
			same(t, "pack "+dt.String(), hf, df, false)
			hu, du := lists(t, r, dt, n, false)
			require.NoError(t, cpu.Unpack(hu, hf, offs))
			require.NoError(t, gpu.Unpack(du, df, offs))
			for i := range hu {
				same(t, "unpack "+dt.String(), hu[i], du[i], false)
			}
		}
	}
}

func TestReduce(t *testing.T) {
	cpu, gpu := setup(t)
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range sizes {
		for _, dt := range append(floats, tensor.Int32, tensor.Int64) {
			for _, op := range []backend.ReduceOp{backend.Sum, backend.Max, backend.Min} {
				hs, ds := lists(t, r, dt, n, false)
				hs, ds = hs[:1], ds[:1]
				for range 3 {
					h2, d2 := lists(t, r, dt, n, false)
					hs, ds = append(hs, h2[0]), append(ds, d2[0])
				}
				require.NoError(t, cpu.Reduce(op, hs[1], hs)) // in place, dst = srcs[1]
				require.NoError(t, gpu.Reduce(op, ds[1], ds))
				same(t, "reduce "+op.String()+" "+dt.String(), hs[1], ds[1], op == backend.Sum)
			}
		}
	}
}

func TestArgErrors(t *testing.T) {
	cpu, gpu := setup(t)
	h, _ := tensor.Empty(tensor.Float32, 4)
	defer h.Free()
	d, _ := gpu.Empty(tensor.Float32, 4)
	defer d.Free()
	d16, _ := gpu.Empty(tensor.Float16, 5)
	defer d16.Free()
	var ae *backend.ArgError
	check := func(name, arg string, err error) {
		t.Helper()
		if assert.ErrorAs(t, err, &ae, name) {
			assert.Equal(t, arg, ae.Arg, "%s: the ArgError names", name)
		}
	}
	check("host tensor", "xs[0]", gpu.Scale([]*tensor.Tensor{h}, 2))
	check("dtype mix", "xs[1]", gpu.Scale([]*tensor.Tensor{d, d16}, 2))
	check("count", "ys[0]", gpu.Axpy(1, []*tensor.Tensor{d}, []*tensor.Tensor{d16}))
	check("lens", "dsts", gpu.Cast([]*tensor.Tensor{d}, nil))
	check("offs", "offs[0]", gpu.Pack(d, []int{2}, []*tensor.Tensor{d}))
	check("no srcs", "srcs", gpu.Reduce(backend.Sum, d, nil))
	_ = cpu
}

func TestSynchronizeHonoursContext(t *testing.T) {
	_, gpu := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	x, _ := gpu.Empty(tensor.Float32, 1<<24)
	defer x.Free()
	for range 50 {
		gpu.Scale([]*tensor.Tensor{x}, 1.0001)
	}
	if err := gpu.Synchronize(ctx); err != nil {
		require.ErrorIs(t, err, context.Canceled, "Synchronize")
	}

	require.NoError(t, gpu.Synchronize(context.Background()))
}
