package nn_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/stretchr/testify/require"
)

// TestGPTFrozenEquivalence: the GPT with its tied wte (embedding and
// head), block 0's attention weight and ln_f's bias frozen trains the same
// at ZeRO stages 0-3 on 1 and 2 ranks as plainGPTFrozen, a loop with no
// engine whose clipping and AdamW see only the trainable parameters, to
// TestGPTEquivalenceAcrossStagesAndWorlds' tolerances against the plain
// loop (1e-6 losses, 3e-6 parameters), at gradient_clipping 1.0 (which
// clips every step); the frozen parameters keep their initial values
// exactly.
func TestGPTFrozenEquivalence(t *testing.T) {
	const steps = 6
	freeze := regexp.MustCompile(`wte|h\.0\.attn\.c_attn\.weight|ln_f\.bias`)
	m, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: m.Generate(20000, 4), Vocab: 32}
	plainLoss, plain, _ := plainGPTFrozen(t, eqGPT(corpus.Vocab), eqSeed, steps, 1.0, func(step int) model.TokenBatch {
		return eqBatch(corpus, step, 1, 0)
	}, freeze)
	_, initial, _ := plainGPTFrozen(t, eqGPT(corpus.Vocab), eqSeed, 0, 1.0, nil, freeze)
	for name, v := range initial {
		if freeze.MatchString(name) {
			require.Equal(t, v, plain[name], "plain loop moved frozen %s", name)
		}
	}
	want := flatParams(plain)
	for _, stage := range []int{0, 1, 2, 3} {
		for _, world := range []int{1, 2} {
			loss, got := gptCurveFrozen(t, stage, world, steps, 1.0, corpus, freeze)
			requireFollowsPlain(t, fmt.Sprintf("frozen stage %d world %d", stage, world), plainLoss, loss, want, got, 1e-6, 3e-6)
		}
	}
}
