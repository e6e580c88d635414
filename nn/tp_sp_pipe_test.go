package nn_test

import (
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/data"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ulysses SP 2 inside TP 2 in each of 2 pipeline stages (8 in-process
// ranks, and 16 with 2 data ranks) on PipeTensorSequenceParallelGroups'
// grid, at ZeRO 0 and 1, under 1F1B, GPipe and the interleaved schedule,
// with and without activation checkpointing, follows the plain
// single-process loop on the whole sequences to the pipeline tests'
// tolerances (losses 1e-6 relative, parameters 3e-6 norm-wise): a stage's
// (seq, model) rank sends its shard of the TP-replicated residual stream
// to the same (seq, model) rank of the next stage, the tied wte is summed
// per (seq, model) coordinate, and the stage's ZeRO group is the
// sequence-data group of its TP slice. gradient_clipping 1.0 clips every
// step, so a norm that counted the replicated parameters per TP rank or
// a gradient averaged over the data ranks only would move the parameters;
// the stages' wte shards stay bit-identical.
func TestGPTTensorUlyssesPipelineEquivalence(t *testing.T) {
	const steps, clip, lossTol, paramTol = 3, 1.0, 1e-6, 3e-6
	corpus, plainLoss, plainParams, clipped := pipeReference(t, tpGPT, eqSeed, steps, clip)
	require.Equal(t, steps, clipped, "gradient_clipping %g should clip every step of the plain run", clip)
	want := flatParams(plainParams)
	runs := []upRun{
		{tp: 2, pp: 2, sp: 2, dp: 1, stage: 0, micro: 4, sched: "1F1B", virtual: 1},
		{tp: 2, pp: 2, sp: 2, dp: 1, stage: 1, micro: 4, sched: "1F1B", virtual: 1, ckpt: 1},
		{tp: 2, pp: 2, sp: 2, dp: 1, stage: 1, micro: 2, sched: "GPipe", virtual: 1},
		{tp: 2, pp: 2, sp: 2, dp: 1, stage: 0, micro: 4, sched: "Interleaved", virtual: 2, ckpt: 1},
		{tp: 2, pp: 2, sp: 2, dp: 2, stage: 1, micro: 2, sched: "1F1B", virtual: 1},
		{tp: 2, pp: 2, sp: 2, dp: 2, stage: 0, micro: 4, sched: "Interleaved", virtual: 2},
	}
	if testing.Short() {
		runs = runs[1:2]
	}
	for _, r := range runs {
		t.Run(r.String(), func(t *testing.T) {
			loss, params, tied := upCurve(t, r, steps, clip, corpus)
			requireFollowsPlain(t, r.String()+" vs plain", plainLoss, loss, want, flatParams(params), lossTol, paramTol)
			require.NotNil(t, tied[0], "stage 0 holds no wte copy")
			assert.Equal(t, tied[0], tied[1], "the stages' copies of wte differ")
		})
	}
}

// Under bf16 TP 2 × SP 2 × PP 2 follows TP 2 × PP 2 in bf16 to bf16's
// rounding (measured: losses 3.5e-6, parameters 1.4e-3) and the fp32
// plain loop to bf16's training noise (5.9e-5 and 2.4e-3); the bounds,
// losses 1e-3 and parameters 1e-2, are the Ulysses × PP and TP + Megatron
// SP × PP bf16 tests'.
func TestGPTTensorUlyssesPipelineBF16(t *testing.T) {
	const steps, lossTol, paramTol = 3, 1e-3, 1e-2
	corpus, plainLoss, plainParams, _ := pipeReference(t, tpGPT, eqSeed, steps, 1.0)
	r := upRun{tp: 2, pp: 2, sp: 1, dp: 1, stage: 1, micro: 2, sched: "1F1B", virtual: 1, prec: `"bf16": {"enabled": true},`}
	wantLoss, wantParams, _ := upCurve(t, r, steps, 1.0, corpus)
	r.sp = 2
	loss, params, tied := upCurve(t, r, steps, 1.0, corpus)
	requireFollowsPlain(t, r.String()+" bf16 vs TP x PP bf16", wantLoss, loss, flatParams(wantParams), flatParams(params), lossTol, paramTol)
	requireFollowsPlain(t, r.String()+" bf16 vs fp32 plain", plainLoss, loss, flatParams(plainParams), flatParams(params), lossTol, paramTol)
	assert.Equal(t, tied[0], tied[1], "the stages' copies of wte differ")
}

// A TP 2 × SP 2 × PP 2 checkpoint (the pipeline's: TP shards as
// mp_rank_XX, sharded over each stage's sequence-data group) resumes bit
// for bit at its own layout and within the resharding tolerances (1e-6
// relative losses, 3e-6 norm-wise parameters) at TP 2 × PP 2 without SP,
// SP 2 × PP 2 without TP, PP 2 alone, in the data-parallel Engine at
// TP 2 × SP 2 and at TP 1 × SP 1, and at another data world; TP 2 × PP 2
// and Engine TP 2 × SP 2 checkpoints resume at TP 2 × SP 2 × PP 2.
func TestGPTTensorUlyssesPipelineCheckpoint(t *testing.T) {
	const n, m = 3, 3
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	base := upRun{tp: 2, pp: 2, sp: 2, dp: 1, stage: 1, micro: 2, sched: "1F1B", virtual: 1}
	with := func(f func(*upRun)) upRun { r := base; f(&r); return r }
	engine := func(r *upRun) { r.pp = 1; r.sched = "GPipe" }
	saves := []upRun{
		base,
		with(func(r *upRun) { r.sp = 1 }),
		with(engine),
	}
	loads := []upRun{
		base,
		with(func(r *upRun) { r.sp = 1 }),
		with(func(r *upRun) { r.tp = 1 }),
		with(func(r *upRun) { r.tp, r.sp = 1, 1 }),
		with(engine),
		with(func(r *upRun) { engine(r); r.tp, r.sp = 1, 1 }),
		with(func(r *upRun) { r.dp = 2; r.micro = 1 }),
	}
	if testing.Short() {
		saves, loads = saves[:1], loads[:2]
	}
	for _, saved := range saves {
		dir := t.TempDir()
		all, refParams, _, err := upSegment{r: saved, clip: 1.0, save: dir, steps: n + m, saveAt: n}.run(corpus)
		require.NoError(t, err, "saving at %v", saved)
		refLoss, want := all[n:], flatParams(refParams)
		for _, r := range loads {
			if saved != base && r != base {
				continue // the other checkpoints: only into TP × SP × PP
			}
			t.Run(fmt.Sprintf("saved-%v/load-%v", saved, r), func(t *testing.T) {
				loss, params, _, err := upSegment{r: r, clip: 1.0, from: dir, first: n, steps: m}.run(corpus)
				require.NoError(t, err)
				requireResumedLike(t, fmt.Sprintf("%v → %v", saved, r), r == saved, refLoss, loss, want, params)
			})
		}
	}
}
