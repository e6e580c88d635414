package testmodel

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdamW checks the reference against values worked out by hand: after
// step 1 the bias-corrected moments are g and g², so the update is
// lr·g/(|g|+eps) after the decay p·(1−lr·wd); step 2 with the same g
// gives the same update again.
func TestAdamW(t *testing.T) {
	const lr, wd, eps = 0.1, 0.5, 1e-8
	p := [][]float64{{1, -2, 0}}
	g := [][]float64{{0.5, -4, 0}}
	a := NewAdamW(lr, wd)
	want := []float64{1, -2, 0}
	for range 2 {
		a.Step(p, g)
		for i, x := range want {
			want[i] = x*(1-lr*wd) - lr*g[0][i]/(math.Abs(g[0][i])+eps)
		}
		for i := range want {
			require.InDelta(t, want[i], p[0][i], 1e-12, "step %d: p = %v, want %v", a.step, p[0], want)
		}
	}
}

func TestClipGrads(t *testing.T) {
	for _, c := range []struct {
		g          []float64
		max, coef  float64
		wantNormSq float64
	}{
		{[]float64{3, 4}, 1, 1 / (5 + 1e-6), 25},
		{[]float64{0.3, 0.4}, 1, 1, 0.25},
		{[]float64{3, 4}, 0, 1, 25}, // 0 disables clipping
	} {
		g := [][]float64{append([]float64(nil), c.g...)}
		norm, coef := ClipGrads(g, c.max)
		assert.InDelta(t, c.wantNormSq, norm*norm, 1e-12, "ClipGrads(%v, %g): norm² (norm %g)", c.g, c.max, norm)
		assert.InDelta(t, c.coef, coef, 1e-15, "ClipGrads(%v, %g): coef", c.g, c.max)
		for i := range g[0] {
			assert.InDelta(t, c.g[i]*c.coef, g[0][i], 1e-15, "ClipGrads(%v, %g): grads %v", c.g, c.max, g[0])
		}
	}
}
