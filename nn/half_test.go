package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// halfTensor makes a tensor of dt holding v rounded to dt; the returned
// float32s are the rounded values.
func halfTensor(t *testing.T, dt tensor.DType, v []float32, shape ...int) (*tensor.Tensor, []float32) {
	t.Helper()
	x := empty(t, dt, shape...)
	got := make([]float32, len(v))
	if dt == tensor.Float32 {
		f, _ := x.Float32s()
		copy(f, v)
		return x, append(got[:0], v...)
	}
	u, _ := x.Uint16s()
	for i, f := range v {
		if dt == tensor.Float16 {
			u[i] = tensor.Float32ToFloat16(f)
			got[i] = tensor.Float16ToFloat32(u[i])
		} else {
			u[i] = tensor.Float32ToBFloat16(f)
			got[i] = tensor.BFloat16ToFloat32(u[i])
		}
	}
	return x, got
}

// widened reads a float32, float16 or bfloat16 tensor as float32s.
func widened(t *testing.T, x *tensor.Tensor) []float32 {
	t.Helper()
	if x.DType() == tensor.Float32 {
		f, _ := x.Float32s()
		return append([]float32(nil), f...)
	}
	var v []float32
	u, _ := x.Uint16s()
	for _, h := range u {
		if x.DType() == tensor.Float16 {
			v = append(v, tensor.Float16ToFloat32(h))
		} else {
			v = append(v, tensor.BFloat16ToFloat32(h))
		}
	}
	return v
}

func randf(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// The issue's numbers with every parameter dtype: W = [[1, 2], [3, 4]],
// b = [0.5, -0.5], x = [1, 1] gives [3.5, 6.5].
func TestLinearIssueNumbersAllDTypes(t *testing.T) {
	for _, dt := range paramDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			be := testBackend(t)
			l := NewLinear("fc", 2, 2, true)
			w, _ := halfTensor(t, dt, []float32{1, 2, 3, 4}, 2, 2)
			b, _ := halfTensor(t, dt, []float32{0.5, -0.5}, 2)
			require.NoError(t, Bind(l, []*tensor.Tensor{w, b}, nil))
			x, _ := f32(t, []float64{1, 1})
			y, _ := f32(t, make([]float64, 2))
			require.NoError(t, l.Forward(be, y, x, 1))
			got, _ := y.Float32s()
			require.Equal(t, []float32{3.5, 6.5}, got[:2], "y")
		})
	}
}

// A layer bound to half-precision parameters computes what it computes
// bound to float32 parameters holding the same (widened) values, and its
// half gradients are exactly narrow(g0 + the float32 layer's gradient):
// one rounding per element per call.
func TestHalfLayersMatchFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const n, c, v, T = 6, 24, 9, 3
	type layer struct {
		m        HasParams
		fwd, bwd func(l HasParams) []*tensor.Tensor // outputs; input gradients
	}
	x, _ := f32(t, randv(r, n*c, 1))
	dy, _ := f32(t, randv(r, n*4*c, 1))
	tok := i32(t, []int32{3, 1, 3, 8, 0, 3})
	be := testBackend(t)
	out := func(shape int) *tensor.Tensor { o, _ := f32(t, make([]float64, shape)); return o }
	cases := map[string]func() layer{
		"Linear": func() layer {
			return layer{NewLinear("fc", c, 4*c, true),
				func(l HasParams) []*tensor.Tensor {
					y := out(n * 4 * c)
					require.NoError(t, l.(*Linear).Forward(be, y, x, n))
					return []*tensor.Tensor{y}
				},
				func(l HasParams) []*tensor.Tensor {
					dx := out(n * c)
					require.NoError(t, l.(*Linear).Backward(be, dx, dy, x, n))
					return []*tensor.Tensor{dx}
				}}
		},
		"LayerNorm": func() layer {
			m, s := out(n), out(n)
			return layer{NewLayerNorm("ln", c),
				func(l HasParams) []*tensor.Tensor {
					y := out(n * c)
					require.NoError(t, l.(*LayerNorm).Forward(be, y, m, s, x, n))
					return []*tensor.Tensor{y, m, s}
				},
				func(l HasParams) []*tensor.Tensor {
					dx := out(n * c)
					require.NoError(t, l.(*LayerNorm).Backward(be, dx, dy, x, m, s, n))
					return []*tensor.Tensor{dx}
				}}
		},
		"Embedding": func() layer {
			return layer{NewEmbedding("emb", v, T, c),
				func(l HasParams) []*tensor.Tensor {
					y := out(n * c)
					require.NoError(t, l.(*Embedding).Forward(be, y, tok, 2, T))
					return []*tensor.Tensor{y}
				},
				func(l HasParams) []*tensor.Tensor {
					require.NoError(t, l.(*Embedding).Backward(be, dy, tok, 2, T))
					return nil
				}}
		},
	}
	for name, mk := range cases {
		for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
			t.Run(fmt.Sprintf("%s %v", name, dt), func(t *testing.T) {
				half, ref := mk(), mk()
				var vals, grads, rvals, rgrads []*tensor.Tensor
				var g0 [][]float32
				for _, p := range half.m.Params() {
					hv, wv := halfTensor(t, dt, randf(r, numel(p)), p.Shape...)
					hg, gv := halfTensor(t, dt, randf(r, numel(p)), p.Shape...)
					rv, _ := halfTensor(t, tensor.Float32, wv, p.Shape...)
					rg, _ := halfTensor(t, tensor.Float32, make([]float32, numel(p)), p.Shape...)
					vals, grads, rvals, rgrads = append(vals, hv), append(grads, hg), append(rvals, rv), append(rgrads, rg)
					g0 = append(g0, gv)
				}
				require.NoError(t, Bind(half.m, vals, grads))
				require.NoError(t, Bind(ref.m, rvals, rgrads))
				sameF32(t, "forward", half.fwd(half.m), ref.fwd(ref.m))
				sameF32(t, "input gradient", half.bwd(half.m), ref.bwd(ref.m))
				for i, p := range half.m.Params() {
					got, sum := widened(t, p.Grad), widened(t, ref.m.Params()[i].Grad)
					for k := range got {
						want := tensor.ToHalfPrecision(dt, g0[i][k]+sum[k])
						require.Equal(t, want, got[k], "%s grad[%d]: want %g + %g rounded once", p.Name, k, g0[i][k], sum[k])
					}
				}
			})
		}
	}
}

// sameF32 requires equal float32 tensors, to within 1e-6 of the largest
// value (sgemm may block a product differently for a half weight's tiles).
func sameF32(t *testing.T, what string, got, want []*tensor.Tensor) {
	t.Helper()
	for i := range want {
		closeTo(t, fmt.Sprintf("%s %d", what, i), vals(t, got[i]), vals(t, want[i]), 1e-6)
	}
}

// A bfloat16 weight of 4096 x 1024 (8 MiB; 16 MiB as float32) is widened in
// tiles: the most scratch the forward and backward allocate at once is one
// tile per thread, counted by the C core.
func TestHalfLinearScratchIsBounded(t *testing.T) {
	const n, in, outw, threads = 4, 1024, 4096, 2
	be := testBackend(t) // 2 threads
	require.Equal(t, threads, be.Threads(), "backend threads")
	r := rand.New(rand.NewPCG(1, 1))
	l := NewLinear("big", in, outw, true)
	var ts []*tensor.Tensor
	for _, p := range l.Params() {
		x, _ := halfTensor(t, tensor.BFloat16, randf(r, numel(p)), p.Shape...)
		ts = append(ts, x)
	}
	grads := []*tensor.Tensor{empty(t, tensor.BFloat16, outw, in), empty(t, tensor.BFloat16, outw)}
	require.NoError(t, Bind(l, ts, grads))
	x, _ := f32(t, randv(r, n*in, 1))
	y, _ := f32(t, make([]float64, n*outw))
	dx, _ := f32(t, make([]float64, n*in))
	_, err := be.Ctx().ScratchPeak(true)
	require.NoError(t, err)
	require.NoError(t, l.Forward(be, y, x, n))
	require.NoError(t, l.Backward(be, dx, y, x, n))
	peak, err := be.Ctx().ScratchPeak(false)
	require.NoError(t, err)
	replica := int64(outw * in * 4)
	bound := int64(threads * csrc.NNTileFloats * 4)
	t.Logf("scratch peak %d bytes (bound %d, a float32 replica %d)", peak, bound, replica)
	require.Positive(t, peak, "scratch peak")
	require.LessOrEqual(t, peak, bound, "scratch peak: want at most one tile per thread")
	require.LessOrEqual(t, peak*16, replica, "scratch peak: want far below the %d-byte float32 replica", replica)
}
