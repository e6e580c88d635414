package nn_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/stretchr/testify/require"
)

// TestGPTSequenceParallelFrozen: Ulysses SP 2 (alone, × DP 2 at ZeRO 2,
// at ZeRO 3 with activation checkpointing, and inside TP 2) with
// tpFreezes' parameters frozen (wpe among them: each SP rank reads its
// rows of it) follows plainGPTFrozen to the SP tests' tolerances (1e-6
// losses, 3e-6 parameters) at gradient_clipping 1.0, the frozen
// parameters keeping their initial values bit for bit; resumed from a
// checkpoint saved half way it is bit-identical to the run that went on.
func TestGPTSequenceParallelFrozen(t *testing.T) {
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
		runs := []tspRun{{tp: 1, sp: 2, dp: 1}, {tp: 1, sp: 2, dp: 2, stage: 2}, {tp: 1, sp: 2, dp: 1, stage: 3, ckpt: true}, {tp: 2, sp: 2, dp: 1, stage: 1}}
		for _, r := range runs {
			r.freeze = freeze
			t.Run(fmt.Sprintf("%v-%s", r, freeze), func(t *testing.T) {
				loss, got := tspCurve(t, r, steps, 1.0, corpus)
				requireFollowsPlain(t, r.String(), plainLoss, loss, want, flatParams(got), 1e-6, 3e-6)
				requireFrozenUnmoved(t, re, initial, got)
				dir := t.TempDir()
				_, _, err := tspSegment{r: r, clip: 1.0, seed: eqSeed, save: dir, steps: steps / 2, saveAt: steps / 2}.run(t, corpus)
				require.NoError(t, err)
				// the resumed engines start from other initial values
				resumed, params, err := tspSegment{r: r, clip: 1.0, seed: eqSeed + 1, from: dir, first: steps / 2, steps: steps / 2}.run(t, corpus)
				require.NoError(t, err)
				require.Equal(t, loss[steps/2:], resumed)
				require.Equal(t, flatParams(got), flatParams(params))
			})
		}
	}
}
