package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// moeHarness is one MoE layer with its own parameters, input and
// activations on the CPU backend.
type moeHarness struct {
	m    *MoE
	pb   *ParamBuffers
	a    Arena
	acts *moeActs
	n    int
}

func newMoEHarness(t *testing.T, cfg MoEConfig, n, width int, seed uint64) *moeHarness {
	t.Helper()
	m, err := NewMoE("transformer.h.0", width, cfg)
	require.NoError(t, err)
	pb, err := NewParamBuffers(m)
	require.NoError(t, err)
	h := &moeHarness{m: m, pb: pb, n: n}
	t.Cleanup(func() { h.a.Reset(); pb.Free() })
	r := rand.New(rand.NewPCG(seed, 1))
	v, _ := pb.Values.Data.Float32s()
	for i := range v {
		v[i] = float32(r.NormFloat64() * 0.3)
	}
	h.acts, err = m.newActs(&h.a, n)
	require.NoError(t, err)
	return h
}

// loss runs the layer on x and returns Σ out·R + LossCoeff·l_aux in
// float64, with the routes it took.
func (h *moeHarness) loss(t *testing.T, x, rw []float64) (float64, []int32) {
	t.Helper()
	be := testBackend(t)
	xt, _ := f32(t, x)
	out, _ := f32(t, make([]float64, len(x)))
	require.NoError(t, h.m.forward(be, out, xt, h.acts, h.n))
	l := dot(vals(t, out), rw) + h.m.Config.LossCoeff*float64(h.m.LAux)
	return l, slices.Clone(h.acts.r.Expert)
}

// TestMoEGradients compares the layer's backward with central differences
// of Σ out·R + coeff·l_aux (float32 forward: h 3e-3, tolerance 3e-4 +
// 1e-2 relative), over the input, wg and the experts' parameters, for k
// 1 and 2 with and without dropped tokens, and with R = 0 (the aux loss's
// gradient alone, which reaches only wg and the input), and with PR-MoE's
// residual MLP and coefficient (use_residual). A perturbation
// that changes the routing is skipped (the loss is not differentiable
// there).
func TestMoEGradients(t *testing.T) {
	const n, width = 12, 4
	for _, c := range []struct {
		k        int
		cf       float64
		drop     bool
		coeff    float64
		auxAlone bool
		residual bool
	}{{1, 1, true, 0.5, false, false}, {1, 0.5, true, 0.5, false, false}, {1, 1, false, 0.5, false, false}, {2, 1, true, 0.5, false, false},
		{2, 0.4, true, 1, false, false}, {2, 1, false, 0.5, false, false}, {1, 1, true, 1, true, false}, {2, 0.5, true, 1, true, false},
		{1, 1, true, 0.5, false, true}, {2, 0.5, true, 0.5, false, true}} {
		t.Run(fmt.Sprintf("k%d_cf%v_drop%v_aux%v_residual%v", c.k, c.cf, c.drop, c.auxAlone, c.residual), func(t *testing.T) {
			cfg := MoEConfig{Experts: 3, K: c.k, CapacityFactor: c.cf, DropTokens: c.drop, LossCoeff: c.coeff, UseResidual: c.residual}
			h := newMoEHarness(t, cfg, n, width, 3)
			r := rand.New(rand.NewPCG(5, uint64(c.k)))
			x := randv(r, n*width, 1)
			rw := randv(r, n*width, 1)
			if c.auxAlone {
				clear(rw)
			}
			_, routes := h.loss(t, x, rw)
			dropped := 0
			for _, e := range routes {
				if e < 0 {
					dropped++
				}
			}
			t.Logf("%d of %d routes dropped, l_aux %v", dropped, len(routes), h.m.LAux)
			// analytic
			be := testBackend(t)
			xt, _ := f32(t, x)
			out, _ := f32(t, make([]float64, len(x)))
			require.NoError(t, h.pb.ZeroGrads())
			require.NoError(t, h.m.forward(be, out, xt, h.acts, n))
			h.m.dLAux = c.coeff
			dout, _ := f32(t, rw)
			din, _ := f32(t, make([]float64, len(x)))
			require.NoError(t, h.m.backward(be, din, dout, xt, h.acts, n))
			dx := vals(t, din)
			checked := 0
			fd := func(what string, theta []float64, set func(), analytic []float64) {
				rr := rand.New(rand.NewPCG(9, uint64(len(theta))))
				for _, i := range rr.Perm(len(theta))[:min(8, len(theta))] {
					old := theta[i]
					const step = 3e-3
					theta[i] = old + step
					set()
					lp, rp := h.loss(t, x, rw)
					theta[i] = old - step
					set()
					lm, rm := h.loss(t, x, rw)
					theta[i] = old
					set()
					if !slices.Equal(rp, routes) || !slices.Equal(rm, routes) {
						continue
					}
					checked++
					g := (lp - lm) / (2 * step)
					require.InDelta(t, g, analytic[i], 3e-4+1e-2*math.Abs(g), "%s[%d]: analytic %.6g, finite difference %.6g", what, i, analytic[i], g)
				}
			}
			fd("x", x, func() {}, dx)
			for _, p := range h.m.Params() {
				pv, _ := p.Data.Float32s()
				pg, _ := p.Grad.Float32s()
				theta, an := make([]float64, len(pv)), make([]float64, len(pg))
				for i := range pv {
					theta[i], an[i] = float64(pv[i]), float64(pg[i])
				}
				if c.auxAlone && p != h.m.WG.W {
					for i := range an {
						require.Zero(t, an[i], "%s: the aux loss alone gives it a gradient", p.Name)
					}
					continue
				}
				fd(p.Name, theta, func() {
					for i := range pv {
						pv[i] = float32(theta[i])
					}
				}, an)
			}
			require.GreaterOrEqual(t, checked, 14, "too few perturbations kept the routing")
		})
	}
}
