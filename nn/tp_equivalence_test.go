package nn_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tpGPT has 4 heads, a 64-wide MLP and 32 tokens: all split over 2 and 4.
func tpGPT(vocab int) nn.GPTConfig {
	return nn.GPTConfig{Layers: 2, Heads: 4, Width: 16, Vocab: vocab, SeqLen: eqT}
}

// tpRun is one tensor × data parallel layout; prec is extra config
// (a precision section), ckpt turns on activation checkpointing, seq
// Megatron's sequence parallelism (TP.SequenceParallel), freeze (a
// regular expression, "": none) the parameters it marks frozen.
type tpRun struct {
	tp, dp, stage int
	prec, freeze  string
	ckpt, seq     bool
}

func (r tpRun) String() string {
	s := fmt.Sprintf("tp%d-dp%d-zero%d-ckpt%v", r.tp, r.dp, r.stage, r.ckpt)
	if r.seq {
		s += "-megatronsp"
	}
	return s
}

// tpCurve trains tpGPT with the engine over r.tp × r.dp in-process ranks
// (TensorParallelGroups' layout) and returns rank 0's losses and the
// parameters unsharded over its TP group, and the number of skipped steps.
func tpCurve(t *testing.T, r tpRun, steps int, clip float64, corpus *data.Tokens) ([]float64, map[string][]float32, int) {
	t.Helper()
	cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": 1,
		"gradient_clipping": %g, "zero_optimization": {"stage": %d, "reduce_bucket_size": 500},
		"tensor_model_parallel_size": %d, "megatron_sequence_parallel": %v, %s
		"optimizer": {"type": "AdamW", "params": {"lr": %g, "weight_decay": %g}}}`, eqB/r.dp, clip, r.stage, r.tp, r.seq, r.prec, eqLR, eqWD)
	losses := make([]float64, steps)
	var params map[string][]float32
	skipped := 0
	err := local.Run(context.Background(), r.tp*r.dp, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		dc, tc, err := deepgo.TensorParallelGroups(ctx, c, r.tp)
		if err != nil {
			return err
		}
		gc := tpGPT(corpus.Vocab)
		gc.TP = nn.TP{Comm: tc, SequenceParallel: r.seq}
		gc.Checkpointing.Enabled = r.ckpt
		g, err := nn.NewReadyGPT(gc, nil, eqSeed)
		if err != nil {
			return err
		}
		defer g.Free()
		freezeGPT(g, r.freeze)
		e, err := deepgo.Initialize(ctx, cfg, g, deepgo.WithComm(dc), deepgo.WithTensorParallel(tc))
		if err != nil {
			return err
		}
		defer e.Close()
		ps, err := trainSteps(ctx, e, losses, c.Rank() == 0, func(step int) model.TokenBatch {
			return eqBatch(corpus, step, r.dp, dc.Rank())
		})
		if err != nil {
			return err
		}
		full, err := g.Unshard(ctx, ps)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			params = full
			skipped = e.(*deepgo.Engine).SkippedSteps()
		}
		return nil
	})
	require.NoError(t, err, "%v", r)
	return losses, params, skipped
}

// The GPT sharded Megatron-style over 2 and 4 tensor-parallel ranks, alone
// and with 2 data-parallel ranks at ZeRO 0-3, follows the plain
// single-process loop: losses to 1e-6 relative and the unsharded
// parameters to 3e-6 norm-wise after the steps (the data-parallel
// equivalence test's tolerances: only float32 summation order differs,
// now also across the split matmuls and the vocabulary-parallel softmax).
// gradient_clipping 1.0 clips every step, so a gradient norm that counted
// the replicated parameters once per TP rank, or the shards on one rank
// only, would move the parameters far past the tolerance.
func TestGPTTensorParallelEquivalence(t *testing.T) {
	const steps, lossTol, paramTol = 4, 1e-6, 3e-6
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	runs := []tpRun{{tp: 2, dp: 1}, {tp: 4, dp: 1, stage: 1}, {tp: 2, dp: 2}, {tp: 2, dp: 2, stage: 1},
		{tp: 2, dp: 2, stage: 2}, {tp: 4, dp: 1, stage: 2}, {tp: 2, dp: 2, stage: 1, ckpt: true},
		{tp: 2, dp: 2, stage: 3}, {tp: 2, dp: 1, stage: 3}, {tp: 2, dp: 2, stage: 3, ckpt: true}}
	requireCurvesFollowPlain(t, corpus, steps, runs, func(t *testing.T, r tpRun, clip float64) ([]float64, map[string][]float32) {
		loss, params, _ := tpCurve(t, r, steps, clip, corpus)
		return loss, params
	}, lossTol, paramTol)
}

// requireCurvesFollowPlain trains tpGPT with the plain loop for steps
// steps at gradient_clipping 1.0 and mixedClip and requires each of runs'
// curves (losses and parameters unsharded) at that clip to follow it
// (requireFollowsPlain).
func requireCurvesFollowPlain[R fmt.Stringer](t *testing.T, corpus *data.Tokens, steps int, runs []R,
	curve func(t *testing.T, r R, clip float64) ([]float64, map[string][]float32), lossTol, paramTol float64) {
	t.Helper()
	for _, clip := range []float64{1.0, mixedClip} {
		plainLoss, plainParams, clipped := plainGPT(t, tpGPT(corpus.Vocab), eqSeed, steps, clip, func(step int) model.TokenBatch {
			return eqBatch(corpus, step, 1, 0)
		})
		t.Logf("gradient_clipping %g: the plain run clipped %d of %d steps", clip, clipped, steps)
		want := flatParams(plainParams)
		for _, r := range runs {
			t.Run(fmt.Sprintf("clip%g-%v", clip, r), func(t *testing.T) {
				loss, params := curve(t, r, clip)
				requireFollowsPlain(t, fmt.Sprintf("%v clip %g", r, clip), plainLoss, loss, want, flatParams(params), lossTol, paramTol)
			})
		}
	}
}

// Under fp16 with a loss scale that overflows at first, the TP ranks
// agree on every overflow (each sees only its shards' gradients): TP 2 and
// 4, with and without Megatron's sequence parallelism (whose LayerNorm
// gradients are summed in float32 and rounded into the fp16 gradient
// once), skip the same steps as one rank, and TP 2 × DP 2 (ZeRO 2 and 3)
// the same as DP 2 alone (data parallelism by itself changes which steps overflow: each
// rank's half-batch gradient is scaled in fp16 before the average), and
// they follow its losses to half-precision rounding (measured: 8e-8).
func TestGPTTensorParallelHalf(t *testing.T) {
	const steps = 8
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	prec := `"fp16": {"enabled": true, "initial_scale_power": 20, "loss_scale_window": 2, "hysteresis": 1},`
	for _, dp := range []int{1, 2} {
		want, _, wantSkip := tpCurve(t, tpRun{tp: 1, dp: dp, stage: dp, prec: prec}, steps, 1.0, corpus)
		require.NotZero(t, wantSkip, "dp %d: TP 1 skipped no step: the test needs overflows", dp)
		runs := []tpRun{{tp: 2, dp: dp, stage: dp, prec: prec}, {tp: 4, dp: dp, stage: dp, prec: prec}}
		if dp == 2 {
			runs[1] = tpRun{tp: 2, dp: dp, stage: 3, prec: prec} // ZeRO-3's fp16 parameters sharded over the data ranks
		}
		for _, r := range runs {
			for _, seq := range []bool{false, true} {
				r.seq = seq
				got, _, skip := tpCurve(t, r, steps, 1.0, corpus)
				assertSkipsLike(t, fmt.Sprintf("%v vs TP 1", r), want, got, wantSkip, skip)
			}
		}
	}
}

// assertSkipsLike asserts that an fp16 run skipped the reference's number
// of steps and followed its losses to half-precision rounding (5e-5).
func assertSkipsLike(t *testing.T, name string, want, got []float64, wantSkip, skip int) {
	t.Helper()
	t.Logf("%s: skipped %d (reference %d), loss rel %.3g", name, skip, wantSkip, maxLossRel(want, got))
	assert.Equal(t, wantSkip, skip, "%s: skipped steps", name)
	assert.LessOrEqual(t, maxLossRel(want, got), 5e-5, "%s: losses", name)
}

// One forward and backward of the sharded GPT, without an engine, gives
// the unsharded loss on every rank and gradients whose unsharded
// concatenation is the unsharded model's; with Megatron's sequence
// parallelism too (8 sequences: the sequence-shard permutation matters),
// also when the model recomputes its checkpointed blocks itself (their
// collectives run again in backward).
func TestGPTTensorParallelGradients(t *testing.T) {
	b, wantLoss, want := unshardedGrads(t)
	for _, tc := range []struct {
		tp        int
		seq, ckpt bool
	}{{2, false, false}, {4, false, false}, {2, true, false}, {4, true, false}, {4, true, true}} {
		grads := shardedGrads(t, tc.tp, b, wantLoss, func(_ context.Context, c comm.Comm) (nn.GPTConfig, comm.Comm, error) {
			cfg := tpGPT(32)
			cfg.TP = nn.TP{Comm: c, SequenceParallel: tc.seq}
			cfg.Checkpointing.Enabled = tc.ckpt
			return cfg, nil, nil
		})
		for r, got := range grads {
			require.Len(t, got, len(want), "tp %d: gradient elements", tc.tp)
			assert.LessOrEqual(t, relNorm(want, got), 1e-5, "tp %d seq %v ckpt %v rank %d: gradients vs the unsharded model's, norm-wise", tc.tp, tc.seq, tc.ckpt, r)
		}
	}
}

// Sizes that do not split over the TP degree are refused naming both, as
// are a missing TP group, a sharded model without one, a config whose
// tensor_model_parallel_size disagrees with the group, and a model built
// otherwise than megatron_sequence_parallel says (TP with pipeline stages:
// tp_pipe_equivalence_test.go).
func TestGPTTensorParallelErrors(t *testing.T) {
	for _, tc := range []struct {
		heads, width, vocab, tp int
		want                    string
	}{
		{3, 12, 32, 2, "heads 3 is not divisible by tensor_model_parallel_size 2"},
		{4, 16, 30, 4, "vocab 30 is not divisible by tensor_model_parallel_size 4 (pad it, as Megatron does: Vocab 32 trains the same ids)"},
	} {
		err := local.Run(context.Background(), tc.tp, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
			_, err := nn.NewGPT(nn.GPTConfig{Layers: 1, Heads: tc.heads, Width: tc.width, Vocab: tc.vocab, SeqLen: 4, TP: nn.TP{Comm: c}})
			if err == nil {
				return fmt.Errorf("no error")
			}
			if !assert.ErrorContains(t, err, tc.want) {
				return err
			}
			return nil
		})
		require.NoError(t, err)
	}
	for _, tc := range []struct {
		extra string
		tp    int
		want  string
	}{
		{`"tensor_model_parallel_size": 2`, 0, "pass WithTensorParallel"},
		{`"tensor_model_parallel_size": 1`, -2, "transformer.wte.weight is a tensor-parallel shard (dim 0)"},
		{`"tensor_model_parallel_size": 4`, 2, "tensor_model_parallel_size 4, but WithTensorParallel's group has 2 ranks"},
		{`"tensor_model_parallel_size": 2, "megatron_sequence_parallel": true`, 2, "megatron_sequence_parallel is true, but the model was built with nn.TP.SequenceParallel false"},
	} {
		n := max(tc.tp, 2)
		err := local.Run(context.Background(), n, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
			cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, ` + tc.extra + `}`))
			if err != nil {
				return err
			}
			gc := tpGPT(32)
			opts := []deepgo.Option{}
			if tc.tp != 0 {
				gc.TP = nn.TP{Comm: c} // tp < 0: a sharded model without the TP group
			}
			if tc.tp > 0 {
				opts = append(opts, deepgo.WithTensorParallel(c))
			}
			g, err := nn.NewReadyGPT(gc, nil, 1)
			if err != nil {
				return err
			}
			defer g.Free()
			tr, err := deepgo.Initialize(ctx, cfg, g, opts...)
			if err == nil {
				tr.Close()
				return fmt.Errorf("%s: no error", tc.extra)
			}
			if !assert.ErrorContains(t, err, tc.want, tc.extra) {
				return err
			}
			return nil
		})
		require.NoError(t, err, tc.extra)
	}
}

// trainSteps runs one TrainBatch per element of losses on batch(step),
// recording the losses when record is set, and returns the trainer's
// parameters at the end.
func trainSteps(ctx context.Context, tr deepgo.Trainer, losses []float64, record bool, batch func(step int) model.TokenBatch) (map[string][]float32, error) {
	for step := range losses {
		loss, err := tr.TrainBatch(ctx, []model.MicroBatch{batch(step).MicroBatch()})
		if err != nil {
			return nil, err
		}
		if record {
			losses[step] = loss
		}
	}
	return tr.Parameters(ctx)
}
