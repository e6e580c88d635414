package nn_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/require"
)

// freezeGPT marks g's parameters whose names match freeze frozen ("":
// none).
func freezeGPT(g *nn.GPT, freeze string) {
	if freeze == "" {
		return
	}
	re := regexp.MustCompile(freeze)
	for _, p := range g.Params() {
		p.Frozen = re.MatchString(p.Name)
	}
}

// tpFreezes are the frozen sets of the TP tests: the tied wte (vocabulary
// parallel embedding and head), a column-parallel weight, a row-parallel
// weight, a replicated LayerNorm bias and weight; and wpe (replicated,
// read by the vocabulary-parallel embedding) with a column-parallel bias.
var tpFreezes = []string{
	`wte|h\.0\.attn\.c_attn\.weight|h\.1\.mlp\.c_proj\.weight|h\.0\.ln_1\.bias|ln_f\.weight`,
	`wpe|h\.1\.attn\.c_attn\.bias|h\.1\.ln_2\.weight`,
}

// TestGPTTensorParallelFrozen: the GPT sharded over 2 TP ranks (alone and
// with 2 data-parallel ranks at ZeRO 0-2, with and without Megatron's
// sequence parallelism) with frozen TP shards and replicated parameters
// follows plainGPTFrozen, the plain loop whose clipping and AdamW see only
// the trainable parameters, to the TP equivalence test's tolerances (1e-6
// losses, 3e-6 parameters) at gradient_clipping 1.0 (which clips every
// step: a norm that counted a frozen parameter would move the rest); the
// frozen parameters, unsharded, keep their initial values bit for bit.
func TestGPTTensorParallelFrozen(t *testing.T) {
	const steps = 4
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	batch := func(step int) model.TokenBatch { return eqBatch(corpus, step, 1, 0) }
	for _, freeze := range tpFreezes {
		re := regexp.MustCompile(freeze)
		plainLoss, plain, _ := plainGPTFrozen(t, tpGPT(corpus.Vocab), eqSeed, steps, 1.0, batch, re)
		_, initial, _ := plainGPTFrozen(t, tpGPT(corpus.Vocab), eqSeed, 0, 1.0, nil, re)
		want := flatParams(plain)
		runs := []tpRun{{tp: 2, dp: 1}, {tp: 2, dp: 2, stage: 1}, {tp: 2, dp: 2, stage: 2, seq: true}, {tp: 2, dp: 1, stage: 2, seq: true}}
		for _, r := range runs {
			r.freeze = freeze
			t.Run(fmt.Sprintf("%v-%s", r, freeze), func(t *testing.T) {
				loss, got, _ := tpCurve(t, r, steps, 1.0, corpus)
				requireFollowsPlain(t, r.String(), plainLoss, loss, want, flatParams(got), 1e-6, 3e-6)
				require.Positive(t, requireFrozenUnmoved(t, re, initial, got))
			})
		}
	}
}

// TestGPTTensorParallelFrozenBF16: in bf16, TP 2 (with Megatron's sequence
// parallelism, × DP 2 at ZeRO 2) with frozen parameters follows the same
// bf16 run on one rank (TP 1) to the TP × SP bf16 test's tolerances
// (losses 1e-4, parameters 5e-3: the rounding of bf16 weights and
// gradients, after float32 sums in another order); the frozen parameters,
// kept in bf16 by both, are bit-identical (the bf16 rounding of their
// initial values).
func TestGPTTensorParallelFrozenBF16(t *testing.T) {
	const steps = 4
	const prec = `"bf16": {"enabled": true},`
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	freeze := tpFreezes[0]
	re := regexp.MustCompile(freeze)
	want, wantP, _ := tpCurve(t, tpRun{tp: 1, dp: 1, stage: 1, prec: prec, freeze: freeze}, steps, 1.0, corpus)
	for _, r := range []tpRun{{tp: 2, dp: 1, stage: 1, seq: true}, {tp: 2, dp: 2, stage: 2}} {
		r.prec, r.freeze = prec, freeze
		got, gotP, _ := tpCurve(t, r, steps, 1.0, corpus)
		lr, pr := maxLossRel(want, got), relNorm(flatParams(wantP), flatParams(gotP))
		t.Logf("bf16 %v vs tp1: loss rel %.3g, param rel %.3g", r, lr, pr)
		require.LessOrEqual(t, lr, 1e-4, "%v: losses", r)
		require.LessOrEqual(t, pr, 5e-3, "%v: parameters", r)
		for name, v := range wantP {
			if re.MatchString(name) {
				require.Equal(t, v, gotP[name], "%v: frozen %s", r, name)
			}
		}
	}
}
