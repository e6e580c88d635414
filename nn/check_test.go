package nn

import (
	"testing"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layerCall builds a layer with float32 parameter buffers and valid
// activations and returns it with a call running its Forward (or Backward).
type layerCall func(t *testing.T) (HasParams, func(backward bool) error)

func linearCall(t *testing.T) (HasParams, func(bool) error) {
	be := testBackend(t)
	l := NewLinear("fc", 2, 2, true)
	bindF32(t, l)
	x, _ := f32(t, []float64{1, 1})
	y, _ := f32(t, make([]float64, 2))
	dx, _ := f32(t, make([]float64, 2))
	return l, func(backward bool) error {
		if backward {
			return l.Backward(be, dx, y, x, 1)
		}
		return l.Forward(be, y, x, 1)
	}
}

func layerNormCall(t *testing.T) (HasParams, func(bool) error) {
	be := testBackend(t)
	l := NewLayerNorm("ln", 4)
	bindF32(t, l)
	x, _ := f32(t, []float64{1, 2, 3, 4})
	y, _ := f32(t, make([]float64, 4))
	m, _ := f32(t, make([]float64, 1))
	s, _ := f32(t, make([]float64, 1))
	return l, func(backward bool) error {
		if backward {
			return l.Backward(be, x, y, x, m, s, 1)
		}
		return l.Forward(be, y, m, s, x, 1)
	}
}

func embeddingCall(t *testing.T) (HasParams, func(bool) error) {
	be := testBackend(t)
	e := NewEmbedding("emb", 5, 2, 3)
	bindF32(t, e)
	tok := i32(t, []int32{4, 1})
	y, _ := f32(t, make([]float64, 6))
	return e, func(backward bool) error {
		if backward {
			return e.Backward(be, y, tok, 1, 2)
		}
		return e.Forward(be, y, tok, 1, 2)
	}
}

func blockCall(t *testing.T) (HasParams, func(bool) error) {
	be := testBackend(t)
	k, err := NewBlock("h", 4, 2, 0)
	require.NoError(t, err)
	bindF32(t, k)
	var a Arena
	t.Cleanup(a.Reset)
	acts, err := k.NewActivations(&a, 1, 2)
	require.NoError(t, err)
	s, err := k.NewScratch(&a, 1, 2)
	require.NoError(t, err)
	x, _ := f32(t, make([]float64, 8))
	y, _ := f32(t, make([]float64, 8))
	return k, func(backward bool) error {
		if backward {
			return k.Backward(be, x, y, x, acts, s, 1, 2)
		}
		return k.Forward(be, y, x, acts, s, 1, 2)
	}
}

func bindF32(t *testing.T, m HasParams) {
	t.Helper()
	pb, err := NewParamBuffers(m)
	require.NoError(t, err)
	t.Cleanup(pb.Free)
}

func param(m HasParams, name string) *model.Param {
	for _, p := range m.Params() {
		if p.Name == name {
			return p
		}
	}
	panic("no parameter " + name)
}

// empty allocates a host tensor freed at the end of the test.
func empty(t *testing.T, dt tensor.DType, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.Empty(dt, shape...)
	require.NoError(t, err)
	t.Cleanup(func() { x.Free() })
	return x
}

// Every layer call checks the parameters bound to it, before reaching C:
// the wrong dtype, size, device or layout, a freed or missing tensor each
// give an error naming the call, the parameter and what is allowed.
func TestLayerParamChecks(t *testing.T) {
	cases := []struct {
		name     string
		call     layerCall
		param    string
		grad     bool // bind the bad tensor as the gradient (and run Backward)
		bad      func(t *testing.T) *tensor.Tensor
		backward bool
		want     []string
	}{
		{"linear weight bfloat16, bias float32", linearCall, "fc.weight", false,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.BFloat16, 2, 2) }, false,
			[]string{"nn.Linear.Forward", "fc.bias", "float32", "fc.weight's has bfloat16", "must share one dtype"}},
		{"linear weight int32", linearCall, "fc.weight", false,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Int32, 2, 2) }, false,
			[]string{"nn.Linear.Forward", "fc.weight", "dtype int32", "allowed float32, float16, bfloat16"}},
		{"linear weight float64 backward", linearCall, "fc.weight", false,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Float64, 2, 2) }, true,
			[]string{"nn.Linear.Backward", "fc.weight", "dtype float64"}},
		{"linear weight short", linearCall, "fc.weight", false,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Float32, 3) }, false,
			[]string{"nn.Linear.Forward", "fc.weight", "3 elements", "declared shape [2 2] has 4"}},
		{"linear weight long", linearCall, "fc.weight", false,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Float32, 2, 3) }, false,
			[]string{"fc.weight", "6 elements", "declared shape [2 2] has 4"}},
		{"linear bias gradient int32", linearCall, "fc.bias", true,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Int32, 2) }, true,
			[]string{"nn.Linear.Backward", "fc.bias", "gradient", "dtype int32"}},
		{"linear bias gradient missing", linearCall, "fc.bias", true,
			func(t *testing.T) *tensor.Tensor { return nil }, true,
			[]string{"nn.Linear.Backward", "fc.bias", "no gradient bound"}},
		{"linear weight freed", linearCall, "fc.weight", false,
			func(t *testing.T) *tensor.Tensor {
				x, _ := tensor.Empty(tensor.Float32, 2, 2)
				x.Free()
				return x
			}, false,
			[]string{"fc.weight", "freed"}},
		{"linear weight not contiguous", linearCall, "fc.weight", false,
			func(t *testing.T) *tensor.Tensor {
				v, err := empty(t, tensor.Float32, 2, 4).Narrow(1, 0, 2)
				require.NoError(t, err)
				return v
			}, false,
			[]string{"fc.weight", "not contiguous"}},
		{"linear weight on a GPU", linearCall, "fc.weight", false,
			func(t *testing.T) *tensor.Tensor {
				host := empty(t, tensor.Float32, 4)
				st := tensor.WrapStorage(host.Ptr(), host.Bytes(), tensor.CUDA(0), nil)
				x, err := tensor.FromStorage(st, tensor.Float32, 0, 2, 2)
				require.NoError(t, err)
				return x
			}, false,
			[]string{"fc.weight", "cuda", "want host memory"}},
		{"layernorm weight gradient float64", layerNormCall, "ln.weight", true,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Float64, 4) }, true,
			[]string{"nn.LayerNorm.Backward", "ln.weight", "gradient", "float64"}},
		{"layernorm bias short", layerNormCall, "ln.bias", false,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Float32, 3) }, false,
			[]string{"nn.LayerNorm.Forward", "ln.bias", "3 elements", "declared shape [4] has 4"}},
		{"embedding tokens table int32", embeddingCall, "emb.wte.weight", false,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Int32, 5, 3) }, false,
			[]string{"nn.Embedding.Forward", "emb.wte.weight", "int32"}},
		{"embedding position table short", embeddingCall, "emb.wpe.weight", false,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Float32, 5) }, false,
			[]string{"nn.Embedding.Forward", "emb.wpe.weight", "5 elements", "declared shape [2 3] has 6"}},
		{"embedding position gradient short", embeddingCall, "emb.wpe.weight", true,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Float32, 3, 3) }, true,
			[]string{"nn.Embedding.Backward", "emb.wpe.weight", "gradient", "9 elements"}},
		{"block fc weight short", blockCall, "h.mlp.c_fc.weight", false,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.Float32, 4, 4) }, false,
			[]string{"nn.Block.Forward", "h.mlp.c_fc.weight", "16 elements", "declared shape [16 4] has 64"}},
		{"block ln_2 bias gradient bfloat16, weight gradient float32", blockCall, "h.ln_2.bias", true,
			func(t *testing.T) *tensor.Tensor { return empty(t, tensor.BFloat16, 4) }, true,
			[]string{"nn.Block.Backward", "h.ln_2.bias", "gradient has dtype bfloat16", "must share one dtype"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, run := c.call(t)
			p := param(m, c.param)
			if c.grad {
				p.Grad = c.bad(t)
			} else {
				p.Data = c.bad(t)
			}
			err := run(c.backward)
			require.Error(t, err, "accepted")
			t.Log(err)
			for _, w := range c.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}

// A layer whose dimensions no longer match its parameters' declared shapes
// (the fields were changed after NewLinear) is refused too.
func TestLayerShapeMismatch(t *testing.T) {
	m, run := linearCall(t)
	m.(*Linear).In = 1
	require.ErrorContains(t, run(false), "declared with shape [2 2], the layer computes with [2 1]")
}
