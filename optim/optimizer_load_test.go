package optim

import (
	"math"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// TestLoadState: state and step count copied out of one Adam into a fresh
// one (which has not stepped) make the next steps bit-identical; bad
// state is refused before anything changes.
func TestLoadState(t *testing.T) {
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	mk := func() (Optimizer, *tensor.Tensor, *tensor.Tensor) {
		o, err := New("AdamW", map[string]any{"lr": 0.01, "weight_decay": 0.1}, be)
		require.NoError(t, err)
		p, _ := tensor.FromFloat32([]float32{1, -2, 3, 0.5, 7})
		g, _ := tensor.FromFloat32([]float32{0.1, 0.2, -0.3, 0.4, -1})
		t.Cleanup(func() { o.Close(); p.Free(); g.Free() })
		return o, p, g
	}
	a, pa, g := mk()
	grp := func(p *tensor.Tensor) ParamGroup {
		return ParamGroup{Name: "g", Params: []*tensor.Tensor{p}, Grads: []*tensor.Tensor{g}}
	}
	for range 3 {
		require.NoError(t, a.Step(grp(pa), 0.01, 1))
	}
	b, pb, _ := mk()
	va, _ := pa.Float32s()
	vb, _ := pb.Float32s()
	copy(vb, va)
	err = LoadState(b, "g", []*tensor.Tensor{pb}, map[string][]*tensor.Tensor{"exp_avg": a.State("g")["exp_avg"]}, 3)
	require.ErrorContains(t, err, "exp_avg_sq", "missing exp_avg_sq")
	require.Nil(t, b.State("g"), "a refused LoadState changed the optimizer")
	require.Zero(t, b.Steps("g"), "a refused LoadState changed the optimizer")
	require.NoError(t, LoadState(b, "g", []*tensor.Tensor{pb}, a.State("g"), a.Steps("g")))
	for range 2 {
		require.NoError(t, a.Step(grp(pa), 0.01, 1))
		require.NoError(t, b.Step(grp(pb), 0.01, 1))
	}
	for i := range va {
		// bits: the restored run must be bit-identical, not just close
		require.Equal(t, math.Float32bits(va[i]), math.Float32bits(vb[i]),
			"param[%d] = %v after the restored steps, %v uninterrupted", i, vb[i], va[i])
	}
	// nil state resets to zero.
	require.NoError(t, LoadState(b, "g", []*tensor.Tensor{pb}, nil, 0))
	for _, ts := range b.State("g") {
		v, _ := ts[0].Float32s()
		for _, x := range v {
			require.Zero(t, x, "nil state did not zero the state")
		}
	}
	require.Zero(t, b.Steps("g"), "steps not reset")
}
