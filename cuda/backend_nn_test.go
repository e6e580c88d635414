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
// gradients one rounding per call). cuBLAS sums in another order, so
// float32 results agree to ~1e-5 relative and half ones to one half ulp.
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
					tol := 1e-5
					if host[k].DType() != tensor.Float32 {
						tol = 1.0 / 128 // one bfloat16 ulp, relative
					}
					for i := range want {
						if got[i] == want[i] {
							continue // infinities too: Inf - Inf is NaN, which no tolerance holds
						}
						d := math.Abs(float64(got[i] - want[i]))
						require.LessOrEqualf(t, d, tol*(1+math.Abs(float64(want[i]))), "%s[%d]: got %g, want %g", k, i, got[i], want[i])
					}
				}
			})
		}
	}
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
