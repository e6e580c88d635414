package nn

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func moeTestGPT(coeff float64) GPTConfig {
	return GPTConfig{Layers: 2, Heads: 2, Width: 8, Vocab: 16, SeqLen: 8,
		MoE: MoEConfig{Experts: 3, K: 2, CapacityFactor: 1, DropTokens: true, LossCoeff: coeff, EveryN: 2}}
}

// TestGPTMoEAuxLossGradient: the GPT's loss includes LossCoeff × l_aux
// and its gradient reaches wg: with a large coefficient the analytic
// gradient of wg follows central differences of the whole GPT's loss
// (float32 forward, h 1e-3; tolerance 2e-3 + 2e-2 relative; a
// perturbation that changes a route is skipped), and differs
// from the gradient without the aux loss by more than that.
func TestGPTMoEAuxLossGradient(t *testing.T) {
	be := testBackend(t)
	in := []int32{1, 5, 7, 2, 9, 3, 3, 12, 0, 4, 15, 8, 6, 6, 1, 10}
	tg := []int32{5, 7, 2, 9, 3, 3, 12, 0, 4, 15, 8, 6, 6, 1, 10, 11}
	grads := map[float64][]float32{}
	for _, coeff := range []float64{0, 5} {
		g, err := NewReadyGPT(moeTestGPT(coeff), be, 3)
		require.NoError(t, err)
		defer g.Free()
		require.Nil(t, g.Blocks[0].MoE, "EveryN 2: block 0 keeps its MLP")
		require.NotNil(t, g.Blocks[1].MoE)
		require.Equal(t, g.Config.NumParams(), NumParams(g))
		wg := g.Blocks[1].MoE.WG.W
		// loss returns the loss and the routes taken (first choices,
		// then the kept routes)
		loss := func() (float64, []int32) {
			l, err := g.Forward(be, in, tg, 2, 8)
			require.NoError(t, err)
			r := g.actsFor(1).MoE.r
			return float64(l), append(slices.Clone(r.top1), r.Expert...)
		}
		l0, counts := loss()
		st := g.MoEStats()
		require.Len(t, st, 1)
		require.InDelta(t, coeff*float64(st[0].LAux), l0-xentOnly(t, g, be, in, tg), 1e-5, "the loss adds coeff × l_aux")
		require.NoError(t, g.own.ZeroGrads())
		_, _ = loss()
		require.NoError(t, g.Backward(be))
		gv, _ := wg.Grad.Float32s()
		grads[coeff] = slices.Clone(gv)
		if coeff == 0 {
			continue
		}
		wv, _ := wg.Data.Float32s()
		checked := 0
		for i := range wv {
			old := wv[i]
			const h = 1e-3
			wv[i] = old + h
			lp, cp := loss()
			wv[i] = old - h
			lm, cm := loss()
			wv[i] = old
			if !slices.Equal(cp, counts) || !slices.Equal(cm, counts) {
				continue
			}
			fd := (lp - lm) / (2 * h)
			require.InDelta(t, fd, float64(gv[i]), 2e-3+2e-2*math.Abs(fd), "wg[%d]", i)
			checked++
		}
		require.GreaterOrEqual(t, checked, len(wv)/3, "perturbations that kept the routing")
	}
	var diff float64
	for i := range grads[0] {
		diff = max(diff, math.Abs(float64(grads[5][i]-grads[0][i])))
	}
	require.Greater(t, diff, 1e-2, "the aux loss's gradient is visible in wg's")
}

// xentOnly is the GPT's loss less the aux loss: the mean cross-entropy of
// the last forward, recomputed from the head with LossCoeff 0.
func xentOnly(t *testing.T, g *GPT, be backend.Backend, in, tg []int32) float64 {
	t.Helper()
	c := g.Config.MoE.LossCoeff
	g.Config.MoE.LossCoeff = 0
	defer func() { g.Config.MoE.LossCoeff = c }()
	l, err := g.Forward(be, in, tg, 2, 8)
	require.NoError(t, err)
	return float64(l)
}

// TestGPTMoERefusals: what MoE does not support is refused naming it.
func TestGPTMoERefusals(t *testing.T) {
	base := moeTestGPT(0.01)
	for _, c := range []struct {
		edit func(*MoEConfig)
		want string
	}{
		{func(m *MoEConfig) { m.EPSize = 2 }, "not supported: expert parallelism (ep_size 2 > 1)"},
		{func(m *MoEConfig) { m.UseRTS = true }, "moe.use_rts true: not supported"},
		{func(m *MoEConfig) { m.NoisyGatePolicy = "RSample" }, `moe.noisy_gate_policy "RSample": not supported`},
		{func(m *MoEConfig) { m.NoisyGatePolicy = "Jitter" }, `moe.noisy_gate_policy "Jitter": not supported`},
		{func(m *MoEConfig) { m.Top2SecondExpertSampling = true }, "moe.top2_2nd_expert_sampling true: not supported"},
		{func(m *MoEConfig) { m.K = 3 }, "moe.k 3"},
		{func(m *MoEConfig) { m.Experts = 1 }, "moe.k 2: more than num_experts 1"},
		{func(m *MoEConfig) { m.CapacityFactor = -1 }, "moe.capacity_factor -1"},
		{func(m *MoEConfig) { m.LossCoeff = math.NaN() }, "moe.loss_coeff NaN"},
	} {
		cfg := base
		c.edit(&cfg.MoE)
		_, err := NewGPT(cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", cfg.MoE, err, c.want)
		}
	}
	g, err := NewGPT(base)
	require.NoError(t, err)
	_, err = g.NewPart(0, 2)
	require.ErrorContains(t, err, "not supported: MoE with pipeline stages")
}

// TestGPTMoEEvalCapacity: SetTraining(false) routes with
// EvalCapacityFactor (here large enough to drop nothing), true again with
// CapacityFactor (small enough to drop).
func TestGPTMoEEvalCapacity(t *testing.T) {
	be := testBackend(t)
	cfg := moeTestGPT(0.01)
	cfg.MoE.CapacityFactor, cfg.MoE.EvalCapacityFactor = 0.25, 2
	g, err := NewReadyGPT(cfg, be, 3)
	require.NoError(t, err)
	defer g.Free()
	in := []int32{1, 5, 7, 2, 9, 3, 3, 12, 0, 4, 15, 8, 6, 6, 1, 10}
	dropped := func() int {
		_, err := g.Forward(be, in, in, 2, 8)
		require.NoError(t, err)
		return g.MoEStats()[0].Dropped
	}
	require.Positive(t, dropped(), "training capacity factor 0.25")
	g.SetTraining(false)
	require.Zero(t, dropped(), "eval capacity factor 2")
	g.SetTraining(true)
	require.Positive(t, dropped(), "training again")
}

// TestGPTMoEResidualNames: PR-MoE's parameters carry DeepSpeed's names
// under the block's MLP and count in NumParams.
func TestGPTMoEResidualNames(t *testing.T) {
	cfg := moeTestGPT(0.01)
	cfg.MoE.UseResidual = true
	g, err := NewGPT(cfg)
	require.NoError(t, err)
	var names []string
	for _, p := range g.Blocks[1].MoE.Params() {
		names = append(names, p.Name)
	}
	for _, want := range []string{"transformer.h.1.mlp.deepspeed_moe.gate.wg.weight", "transformer.h.1.mlp.deepspeed_moe.experts.deepspeed_experts.2.c_proj.weight",
		"transformer.h.1.mlp.mlp.c_fc.weight", "transformer.h.1.mlp.mlp.c_proj.bias", "transformer.h.1.mlp.coefficient.weight", "transformer.h.1.mlp.coefficient.bias"} {
		require.Contains(t, names, want)
	}
	require.Equal(t, cfg.NumParams(), NumParams(g))
}

// TestGPTMoEEvalLoss: in training the GPT's loss adds LossCoeff × Σ l_aux;
// out of training (SetTraining(false)) it is the language-model loss
// alone, whatever the coefficient, as Megatron-DeepSpeed's validation
// reports lm loss apart from the MoE loss.
func TestGPTMoEEvalLoss(t *testing.T) {
	be := testBackend(t)
	in := []int32{1, 5, 7, 2, 9, 3, 3, 12, 0, 4, 15, 8, 6, 6, 1, 10}
	losses := func(coeff float64, training bool) (float32, float32) {
		g, err := NewReadyGPT(moeTestGPT(coeff), be, 3)
		require.NoError(t, err)
		defer g.Free()
		g.SetTraining(training)
		l, err := g.Forward(be, in, in, 2, 8)
		require.NoError(t, err)
		return l, g.MoEStats()[0].LAux
	}
	lm, _ := losses(0, true)
	train, aux := losses(0.5, true)
	require.Positive(t, aux)
	assert.InDelta(t, lm+0.5*aux, train, 1e-6, "training: lm loss + 0.5 × l_aux")
	evalLM, _ := losses(0, false)
	eval, _ := losses(0.5, false)
	assert.Equal(t, evalLM, eval, "evaluation: the lm loss alone")
}
