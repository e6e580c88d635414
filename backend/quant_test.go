package backend

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/qwzref"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The C quantizer gives the int8 values and scales of DeepSpeed's
// CUDAQuantizer (qwzref) exactly, and dequantizes as it does, for the edge
// cases and random groups in each model dtype; the first cases are checked
// against hand-computed values too, so the reference cannot drift with it.
func TestQuantizeInt8MatchesDeepSpeed(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1))
	random := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return v
	}
	cases := []struct {
		name   string
		dt     tensor.DType
		x      []float32
		groups int
		wantQ  []int8    // nil: the reference only
		wantS  []float32 // nil: the reference only
		wantY  []float32
	}{
		{"ties round to even, max and -max clamp", tensor.Float16, []float32{256, 1, 3, 5, -256, -1, 7, 0}, 1,
			[]int8{127, 0, 2, 2, -128, 0, 4, 0}, []float32{2}, []float32{254, 0, 4, 4, -256, 0, 8, 0}},
		{"all-zero group scale 1", tensor.Float16, []float32{0, 0, 0, 0, 1, -2, 0.5, 0}, 2,
			[]int8{0, 0, 0, 0, 64, -128, 32, 0}, []float32{1, 1.0 / 64}, []float32{0, 0, 0, 0, 1, -2, 0.5, 0}},
		{"fp16 max magnitude", tensor.Float16, []float32{65504, -65504, 1024, 0, 0, 0, 0, 0}, 1,
			[]int8{127, -128, 2, 0, 0, 0, 0, 0}, []float32{float32(1 / float64(float32(128.0/65504)))}, nil},
		{"bf16 rounds to half first; above 65504 the group is NaN", tensor.BFloat16, []float32{70000, 1, 2, 3, 1.00390625, 0.5, -0.25, 0}, 2,
			[]int8{0, 0, 0, 0, 127, 64, -32, 0}, nil, nil},
		{"negative extreme sets the scale", tensor.Float32, []float32{-3, 1.5, 0.75, -0.375}, 1,
			[]int8{-128, 64, 32, -16}, []float32{3.0 / 128}, []float32{-3, 1.5, 0.75, -0.375}},
		{"fp16 random", tensor.Float16, random(4096, 0.02), 8, nil, nil, nil},
		{"bf16 random", tensor.BFloat16, random(4096, 0.05), 16, nil, nil, nil},
		{"fp32 random", tensor.Float32, random(1000, 3), 5, nil, nil, nil},
	}
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				x := fill(t, c.dt, c.x)
				xv := read(t, x) // the values in dt
				refQ, refS := qwzref.Quantize(xv, c.groups)
				q := mustEmpty(t, tensor.Uint8, len(c.x))
				s := mustEmpty(t, tensor.Float32, c.groups)
				require.NoError(t, b.QuantizeInt8(q, s, x))
				raw, _ := q.RawBytes()
				gotQ := make([]int8, len(raw))
				for i, v := range raw {
					gotQ[i] = int8(v)
				}
				gotS, _ := s.Float32s()
				require.Equal(t, refQ, gotQ, "int8 values")
				require.Equal(t, refS, gotS, "scales")
				if c.wantQ != nil {
					assert.Equal(t, c.wantQ, gotQ)
				}
				if c.wantS != nil {
					assert.Equal(t, c.wantS, gotS)
				}
				y := mustEmpty(t, c.dt, len(c.x))
				require.NoError(t, b.DequantizeInt8(y, q, s))
				gotY := read(t, y)
				refY := qwzref.Dequantize(c.dt, refQ, refS)
				for i := range refY {
					require.Equal(t, math.Float32bits(refY[i]), math.Float32bits(gotY[i]), "y[%d]", i)
				}
				if c.wantY != nil {
					assert.Equal(t, c.wantY, gotY)
				}
			})
		}
	})
}

// The bf16 case above: the 70000 group's scale is Inf and dequantizes to
// NaN, the other group's values are exact multiples of its scale.
func TestQuantizeInt8InfGroup(t *testing.T) {
	b, err := NewCPU(1)
	require.NoError(t, err)
	defer b.Close()
	x := fill(t, tensor.BFloat16, []float32{70000, 1, 2, 3})
	q := mustEmpty(t, tensor.Uint8, 4)
	s := mustEmpty(t, tensor.Float32, 1)
	require.NoError(t, b.QuantizeInt8(q, s, x))
	sv, _ := s.Float32s()
	assert.True(t, math.IsInf(float64(sv[0]), 1))
	y := mustEmpty(t, tensor.BFloat16, 4)
	require.NoError(t, b.DequantizeInt8(y, q, s))
	for _, v := range read(t, y) {
		assert.True(t, math.IsNaN(float64(v)))
	}
}

// Bad arguments name the argument.
func TestQuantizeInt8Args(t *testing.T) {
	b, err := NewCPU(1)
	require.NoError(t, err)
	defer b.Close()
	x := mustEmpty(t, tensor.Float16, 8)
	q := mustEmpty(t, tensor.Uint8, 8)
	for _, c := range []struct {
		name, arg string
		q, s, x   *tensor.Tensor
	}{
		{"groups do not divide", "scales", q, mustEmpty(t, tensor.Float32, 3), x},
		{"q short", "q", mustEmpty(t, tensor.Uint8, 4), mustEmpty(t, tensor.Float32, 1), x},
		{"q dtype", "q", mustEmpty(t, tensor.Float16, 8), mustEmpty(t, tensor.Float32, 1), x},
		{"scales dtype", "scales", q, mustEmpty(t, tensor.Float16, 1), x},
		{"x dtype", "x", q, mustEmpty(t, tensor.Float32, 1), mustEmpty(t, tensor.Int32, 8)},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := b.QuantizeInt8(c.q, c.s, c.x)
			var ae *ArgError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, c.arg, ae.Arg)
		})
	}
}
