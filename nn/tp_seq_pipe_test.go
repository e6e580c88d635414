package nn_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TP 2 with Megatron's sequence parallelism in each of 2 pipeline stages
// (the stages exchange sequence shards), with 1 and 2 data-parallel
// ranks, under 1F1B, GPipe and the interleaved schedule, with and without
// activation checkpointing, follows the plain single-process loop to the
// TP × PP test's tolerances, and the same run without sequence parallelism
// to the same: only float32 summation order differs (each LayerNorm's
// parameter gradient is two TP ranks' shares summed). gradient_clipping
// 1.0 clips every step, so a LayerNorm gradient counted per TP rank, or a
// stage's boundary carrying the wrong rows, would move the parameters.
func TestGPTTensorSequencePipelineEquivalence(t *testing.T) {
	const steps, clip, lossTol, paramTol = 3, 1.0, 1e-6, 3e-6
	corpus, plainLoss, plainParams, clipped := pipeReference(t, tpGPT, eqSeed, steps, clip)
	require.Equal(t, steps, clipped, "gradient_clipping %g should clip every step of the plain run", clip)
	want := flatParams(plainParams)
	runs := []tppRun{
		{tp: 2, pp: 2, dp: 1, stage: 0, micro: 4, sched: "1F1B", virtual: 1},
		{tp: 2, pp: 2, dp: 1, stage: 1, micro: 4, sched: "1F1B", virtual: 1, ckpt: 1},
		{tp: 2, pp: 2, dp: 1, stage: 1, micro: 2, sched: "GPipe", virtual: 1},
		{tp: 2, pp: 2, dp: 1, stage: 1, micro: 4, sched: "Interleaved", virtual: 2},
		{tp: 2, pp: 2, dp: 1, stage: 1, micro: 4, sched: "Interleaved", virtual: 2, ckpt: 1},
		{tp: 2, pp: 2, dp: 2, stage: 0, micro: 2, sched: "1F1B", virtual: 1},
		{tp: 2, pp: 2, dp: 2, stage: 1, micro: 4, sched: "1F1B", virtual: 1, ckpt: 1},
		{tp: 2, pp: 2, dp: 2, stage: 1, micro: 4, sched: "Interleaved", virtual: 2},
	}
	if testing.Short() {
		runs = []tppRun{runs[1], runs[7]}
	}
	for _, r := range runs {
		t.Run(r.String(), func(t *testing.T) {
			plainTP := r
			r.seq = true
			loss, params, tied := tppCurve(t, r, steps, clip, corpus)
			got := flatParams(params)
			requireFollowsPlain(t, r.String()+" vs plain", plainLoss, loss, want, got, lossTol, paramTol)
			require.NotNil(t, tied[0], "stage 0 holds no wte shard")
			assert.Equal(t, tied[0], tied[1], "the stages' copies of the wte shard differ")
			tpLoss, tpParams, _ := tppCurve(t, plainTP, steps, clip, corpus)
			requireFollowsPlain(t, r.String()+" vs TP x PP", tpLoss, loss, flatParams(tpParams), got, lossTol, paramTol)
		})
	}
}

// Under bf16 TP 2 + Megatron SP × PP 2 follows TP 2 × PP 2 to bf16's
// rounding, with 1 and 2 data ranks: only the LayerNorm gradients' float32
// sums differ (in their last bits) before they round into the bf16
// gradients (measured: no difference at all over 3 steps; the bounds
// leave room for a rounding that flips).
func TestGPTTensorSequencePipelineBF16(t *testing.T) {
	const steps, lossTol, paramTol = 3, 1e-3, 1e-2
	corpus, _, _, _ := pipeReference(t, tpGPT, eqSeed, 1, 1.0)
	prec := `"bf16": {"enabled": true},`
	for _, dp := range []int{1, 2} {
		r := tppRun{tp: 2, pp: 2, dp: dp, stage: 1, micro: 2, sched: "1F1B", virtual: 1, prec: prec}
		t.Run(r.String(), func(t *testing.T) {
			wantLoss, wantParams, _ := tppCurve(t, r, steps, 1.0, corpus)
			r.seq = true
			loss, params, tied := tppCurve(t, r, steps, 1.0, corpus)
			requireFollowsPlain(t, r.String()+" vs TP x PP", wantLoss, loss, flatParams(wantParams), flatParams(params), lossTol, paramTol)
			assert.Equal(t, tied[0], tied[1], "the stages' copies of the wte shard differ")
		})
	}
}

// A TP 2 + Megatron SP × PP 2 checkpoint resumes bit-identically at its
// own layout and, within the resharding tolerances, without sequence
// parallelism (TP × PP), at TP 1 × PP 2, in the data-parallel Engine at TP
// 2 with sequence parallelism, and the other way round (a TP × PP
// checkpoint into TP + SP × PP): the layout of the residual stream is not
// in the checkpoint, only the parameters and their optimizer state.
func TestGPTTensorSequencePipelineCheckpoint(t *testing.T) {
	const n, m = 3, 3
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	base := tppRun{tp: 2, pp: 2, dp: 1, stage: 1, micro: 2, sched: "1F1B", virtual: 1, seq: true}
	with := func(f func(*tppRun)) tppRun { r := base; f(&r); return r }
	saves := []tppRun{base, with(func(r *tppRun) { r.dp = 2; r.ckpt = 1 }), with(func(r *tppRun) { r.seq = false })}
	loads := []tppRun{
		base,
		with(func(r *tppRun) { r.seq = false }),
		with(func(r *tppRun) { r.tp = 1; r.seq = false }),
		with(func(r *tppRun) { r.pp = 1; r.sched = "GPipe" }),
		with(func(r *tppRun) { r.dp = 2; r.micro = 1 }),
	}
	if testing.Short() {
		saves, loads = saves[:1], loads[:2]
	}
	for _, saved := range saves {
		dir := t.TempDir()
		all, refParams, err := tppSegment{r: saved, save: dir, steps: n + m, saveAt: n}.run(corpus)
		require.NoError(t, err, "saving at %v", saved)
		refLoss, want := all[n:], flatParams(refParams)
		for _, r := range loads {
			t.Run(fmt.Sprintf("saved-%v/load-%v", saved, r), func(t *testing.T) {
				loss, params, err := tppSegment{r: r, from: dir, first: n, steps: m}.run(corpus)
				require.NoError(t, err)
				requireResumedLike(t, fmt.Sprintf("%v → %v", saved, r), r == saved, refLoss, loss, want, params)
			})
		}
	}
}

// The pipeline engine refuses a model whose Megatron sequence parallelism
// disagrees with megatron_sequence_parallel, as the data-parallel Engine
// does (Ulysses × PP's refusals are TestGPTUlyssesPipelineRefusals').
func TestGPTSequenceParallelPipelineRefusals(t *testing.T) {
	for _, modelSeq := range []bool{true, false} {
		r := tppRun{tp: 2, pp: 2, dp: 1, stage: 1, micro: 2, sched: "1F1B", virtual: 1, seq: !modelSeq}
		err := local.Run(context.Background(), 4, local.Options{Timeout: 30 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
			cfg, err := config.Parse([]byte(r.config(1)))
			if err != nil {
				return err
			}
			tc, err := deepgo.PipeTensorParallelGroup(ctx, c, 2, 2)
			if err != nil {
				return err
			}
			defer tc.Close()
			gc := tpGPT(32)
			gc.TP = nn.TP{Comm: tc, SequenceParallel: modelSeq}
			g, err := nn.NewReadyGPT(gc, nil, eqSeed)
			if err != nil {
				return err
			}
			defer g.Free()
			tr, err := deepgo.Initialize(ctx, cfg, g, deepgo.WithComm(c), deepgo.WithTensorParallel(tc))
			if err == nil {
				tr.Close()
			}
			return err
		})
		require.ErrorContains(t, err, fmt.Sprintf("megatron_sequence_parallel is %v, but the model was built with nn.TP.SequenceParallel %v", !modelSeq, modelSeq))
	}
}

// A part that starts after the embedding receives what the previous
// part's last module sends: under Megatron SP a TP rank's sequence shard
// [B·T/tp, C] (Part.Input, which the pipeline engine receives into and
// sizes the returned gradient by), tp times less than plain TP's [B·T, C].
func TestGPTMegatronSequenceParallelPartBoundary(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(2000, 4), Vocab: 32}
	b := eqBatch(corpus, 0, 1, 0)
	full := b.B * b.T * tpGPT(32).Width
	for _, tp := range []int{2, 4} {
		for _, seq := range []bool{false, true} {
			var sent, recv []int
			err := local.Run(context.Background(), tp, local.Options{Timeout: 30 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
				cfg := tpGPT(32)
				cfg.TP = nn.TP{Comm: c, SequenceParallel: seq}
				g, err := nn.NewReadyGPT(cfg, c.(interface{ Backend() backend.Backend }).Backend(), eqSeed)
				if err != nil {
					return err
				}
				defer g.Free()
				out, in, err := partBoundary(ctx, g, b)
				if err != nil {
					return err
				}
				if c.Rank() == 0 {
					sent, recv = []int{out}, []int{in}
				}
				return nil
			})
			require.NoError(t, err, "tp %d seq %v", tp, seq)
			want := full
			if seq {
				want /= tp
			}
			assert.Equal(t, []int{want}, sent, "tp %d seq %v: the first part's output", tp, seq)
			assert.Equal(t, []int{want}, recv, "tp %d seq %v: the second part's input", tp, seq)
		}
	}
}
