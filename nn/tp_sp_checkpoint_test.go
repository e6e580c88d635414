package nn_test

import (
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/data"
	"github.com/stretchr/testify/require"
)

// A TP × SP checkpoint is a TP checkpoint sharded over the
// sequence-data group (the sequence shards are not in it): saved at TP 2 ×
// SP 2 (× 1 and × 2 data ranks, ZeRO 1-3) after N steps, it resumes bit
// for bit at its own layout, and within the equivalence tolerances (1e-6
// relative losses, 3e-6 norm-wise parameters) at TP 1 × SP 1, TP 2 alone,
// SP 2 alone, TP 4, and at TP 2 × SP 2 on another data world and ZeRO
// stage; checkpoints of TP 2 alone and SP 2 alone resume at TP 2 × SP 2.
// The schedule (WarmupLR) and Adam's moments travel with it: a resume
// without the moments lands far past the tolerance (shown for TP by
// TestGPTTensorParallelCheckpointNeedsOptimizerState).
func TestGPTTensorSequenceParallelCheckpoint(t *testing.T) {
	const n, m = 3, 3
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	const sched = `"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_max_lr": 0.003}},`
	run := func(tp, sp, dp, stage int) tspRun { return tspRun{tp: tp, sp: sp, dp: dp, stage: stage, extra: sched} }
	tsp := []tspRun{run(2, 2, 1, 1), run(2, 2, 2, 2), run(2, 2, 2, 3)}
	cases := []struct {
		saved tspRun
		loads []tspRun
	}{
		{tsp[0], []tspRun{run(1, 1, 1, 0), run(2, 1, 1, 2), run(1, 2, 1, 1), run(4, 1, 1, 1), tsp[1], tsp[2], tsp[0]}},
		{tsp[1], []tspRun{run(1, 1, 2, 1), run(2, 1, 2, 3), tsp[0], tsp[1]}},
		{tsp[2], []tspRun{run(1, 2, 2, 2), tsp[0], tsp[2]}},
		{run(2, 1, 2, 1), []tspRun{tsp[0], tsp[1]}},
		{run(1, 2, 2, 2), []tspRun{tsp[0], tsp[2]}},
	}
	for _, c := range cases {
		dir := t.TempDir()
		all, refParams, err := tspSegment{r: c.saved, clip: 1.0, seed: eqSeed, save: dir, steps: n + m, saveAt: n}.run(t, corpus)
		require.NoError(t, err, "saving at %v", c.saved)
		refLoss, want := all[n:], flatParams(refParams)
		for _, r := range c.loads {
			t.Run(fmt.Sprintf("saved-%v/load-%v", c.saved, r), func(t *testing.T) {
				loss, params, err := tspSegment{r: r, clip: 1.0, seed: eqSeed + 1, from: dir, first: n, steps: m, saveAt: m}.run(t, corpus)
				require.NoError(t, err)
				requireResumedLike(t, fmt.Sprintf("%v → %v", c.saved, r), r == c.saved, refLoss, loss, want, params)
			})
		}
	}
}
