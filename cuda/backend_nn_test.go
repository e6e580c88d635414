//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// Copy in every direction, then Zero, through the Backend's stream.
func TestBackendCopyZero(t *testing.T) {
	_, gpu := setup(t)
	r := rand.New(rand.NewPCG(5, 6))
	h := hostRand(t, r, tensor.Float32, 4097, false)
	a, err := gpu.Empty(tensor.Float32, 4097)
	require.NoError(t, err)
	b, err := gpu.Empty(tensor.Float32, 4097)
	require.NoError(t, err)
	back, err := tensor.Empty(tensor.Float32, 4097)
	require.NoError(t, err)
	t.Cleanup(func() { a.Free(); b.Free(); back.Free() })
	require.NoError(t, gpu.Copy(a, h))
	require.NoError(t, gpu.Copy(b, a))
	require.NoError(t, gpu.Copy(back, b))
	hb, _ := h.RawBytes()
	bb, _ := back.RawBytes()
	require.Equal(t, hb, bb, "host -> device -> device -> host changed bits")
	require.NoError(t, gpu.Zero([]*tensor.Tensor{b}))
	require.NoError(t, gpu.Copy(back, b))
	for i, v := range bb {
		require.Zerof(t, v, "byte %d after Zero", i)
	}
	short, err := tensor.Empty(tensor.Float32, 3)
	require.NoError(t, err)
	t.Cleanup(func() { short.Free() })
	var ae *backend.ArgError
	require.ErrorAs(t, gpu.Copy(b, short), &ae, "a size mismatch is an *ArgError")
}

// LinearForward/LinearBackward with every weight and gradient dtype
// against the CPU backend (the same contract: half weights widened, half
// gradients one rounding per call). cuBLAS sums in another order, so a
// float32 result agrees to ~1e-5 of the magnitude of what it sums (the
// inputs span 2^-10..2^9, so sums cancel: relative to the result itself
// there is no bound), and a half one to one half ulp more.
func TestBackendLinearMixed(t *testing.T) {
	cpu, gpu := setup(t)
	r := rand.New(rand.NewPCG(7, 8))
	const n, c, oc = 7, 33, 19
	dts := []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16}
	for _, wdt := range dts {
		for _, gdt := range dts {
			t.Run(fmt.Sprintf("w=%v/grad=%v", wdt, gdt), func(t *testing.T) {
				host := map[string]*tensor.Tensor{
					"in": hostRand(t, r, tensor.Float32, n*c, true), "w": hostRand(t, r, wdt, oc*c, true),
					"b": hostRand(t, r, wdt, oc, true), "dout": hostRand(t, r, tensor.Float32, n*oc, true),
					"out": hostRand(t, r, tensor.Float32, n*oc, true), "din": hostRand(t, r, tensor.Float32, n*c, true),
					"dw": hostRand(t, r, gdt, oc*c, true), "db": hostRand(t, r, gdt, oc, true),
				}
				shape := map[string][]int{"in": {n, c}, "w": {oc, c}}
				dev := map[string]*tensor.Tensor{}
				for k, h := range host {
					if s, ok := shape[k]; ok {
						v, err := h.Reshape(s...)
						require.NoError(t, err)
						host[k] = v
					}
					d := toDevice(t, host[k])
					if s, ok := shape[k]; ok {
						v, err := d.Reshape(s...)
						require.NoError(t, err)
						d = v
					}
					dev[k] = d
				}
				mag := linearMagnitudes(t, cpu, host, n, c, oc)
				for _, x := range []struct {
					be backend.NN
					m  map[string]*tensor.Tensor
				}{{cpu, host}, {gpu, dev}} {
					m := x.m
					require.NoError(t, x.be.LinearForward(m["out"], m["in"], m["w"], m["b"]))
					require.NoError(t, x.be.LinearBackward(m["din"], m["dw"], m["db"], m["dout"], m["in"], m["w"]))
				}
				for _, k := range []string{"out", "din", "dw", "db"} {
					want := f32s(t, cpu, host[k])
					got := f32s(t, cpu, fromDevice(t, dev[k]))
					half := 0.0
					if host[k].DType() != tensor.Float32 {
						half = 1.0 / 128 // one bfloat16 ulp, relative
					}
					for i := range want {
						if got[i] == want[i] || math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i])) {
							continue // infinities too: Inf - Inf is NaN, which no tolerance holds
						}
						if mag[k][i] > math.MaxFloat32 {
							// terms or partial sums overflow: which of +Inf, -Inf
							// and NaN comes out depends on the order (seen: the
							// CPU's NaN against cuBLAS's -Inf)
							continue
						}
						d := math.Abs(float64(got[i]) - float64(want[i]))
						bound := 1e-5*mag[k][i] + half*math.Abs(float64(want[i]))
						require.LessOrEqualf(t, d, bound, "%s[%d]: got %g, want %g (summed magnitude %g)", k, i, got[i], want[i], mag[k][i])
					}
				}
			})
		}
	}
}

// linearMagnitudes returns, for every element of out, din, dw and db, the
// sum of the magnitudes of the terms the Linear call adds into it (what it
// held before included): the scale of any summation-order difference.
func linearMagnitudes(t *testing.T, cpu *backend.CPU, host map[string]*tensor.Tensor, n, c, oc int) map[string][]float64 {
	t.Helper()
	f := map[string][]float32{}
	for _, k := range []string{"in", "w", "b", "dout", "din", "dw", "db"} {
		f[k] = f32s(t, cpu, host[k])
	}
	abs := func(v float32) float64 { return math.Abs(float64(v)) }
	m := map[string][]float64{"out": make([]float64, n*oc), "din": make([]float64, n*c),
		"dw": make([]float64, oc*c), "db": make([]float64, oc)}
	for i := range n {
		for o := range oc {
			m["out"][i*oc+o] += abs(f["b"][o])
			m["db"][o] += abs(f["dout"][i*oc+o])
			for k := range c {
				m["out"][i*oc+o] += abs(f["in"][i*c+k] * f["w"][o*c+k])
				m["din"][i*c+k] += abs(f["dout"][i*oc+o] * f["w"][o*c+k])
				m["dw"][o*c+k] += abs(f["dout"][i*oc+o] * f["in"][i*c+k])
			}
		}
	}
	for _, k := range []string{"din", "dw", "db"} {
		for i := range m[k] {
			m[k][i] += abs(f[k][i])
		}
	}
	return m
}

func fromDevice(t *testing.T, d *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	h, err := tensor.Empty(d.DType(), d.Numel())
	require.NoError(t, err)
	require.NoError(t, CopyToHost(h, d))
	t.Cleanup(func() { h.Free() })
	return h
}

// f32s widens a host tensor to float32 values with the CPU backend.
func f32s(t *testing.T, cpu *backend.CPU, h *tensor.Tensor) []float32 {
	t.Helper()
	w, err := tensor.Empty(tensor.Float32, h.Numel())
	require.NoError(t, err)
	t.Cleanup(func() { w.Free() })
	flat, err := h.Reshape(h.Numel())
	require.NoError(t, err)
	require.NoError(t, cpu.Cast([]*tensor.Tensor{w}, []*tensor.Tensor{flat}))
	v, err := w.Float32s()
	require.NoError(t, err)
	return v
}

// TransposeBlocks on the GPU moves the CPU's bits (edge32's NaNs and
// infinities among them), for blocks short and long, and refuses
// overlapping tensors with the CPU's error.
func TestBackendTransposeBlocks(t *testing.T) {
	cpu, gpu := setup(t)
	r := rand.New(rand.NewPCG(23, 24))
	for _, sz := range [][3]int{{3, 5, 7}, {2, 4, 1}, {64, 3, 1024}, {1, 1, 1}} {
		a, b, w := sz[0], sz[1], sz[2]
		src, dst := hostRand(t, r, tensor.Float32, a*b*w, false), hostRand(t, r, tensor.Float32, a*b*w, false)
		t.Cleanup(func() { src.Free(); dst.Free() })
		dsrc, ddst := toDevice(t, src), toDevice(t, dst)
		require.NoError(t, cpu.TransposeBlocks(dst, src, a, b, w))
		require.NoError(t, gpu.TransposeBlocks(ddst, dsrc, a, b, w))
		same(t, fmt.Sprintf("transposed %v", sz), dst, ddst, false)
	}
	d := toDevice(t, hostRand(t, r, tensor.Float32, 64, true))
	tail, err := d.Slice(8, 56)
	require.NoError(t, err)
	var ae *backend.ArgError
	require.ErrorAs(t, gpu.TransposeBlocks(tail, d, 7, 1, 8), &ae)
	require.Equal(t, "dst", ae.Arg)
}
