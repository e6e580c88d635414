package nn_test

import (
	"context"
	"errors"
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

// tspRun is one tensor × sequence × data parallel layout (Ulysses SP with
// Megatron TP, deepgo.TensorSequenceParallelGroups' grid).
type tspRun struct {
	tp, sp, dp, stage int
	ckpt              bool
	window            int    // the model's attention window (0: full)
	extra             string // more config (a precision section), with its trailing comma
	freeze            string // the parameters to freeze (freezeGPT; "": none)
}

func (r tspRun) String() string {
	return fmt.Sprintf("tp%d-sp%d-dp%d-zero%d-ckpt%v", r.tp, r.sp, r.dp, r.stage, r.ckpt)
}

// tspSegment is one stretch of a TP × SP training run of tpGPT (4 heads,
// 8 tokens) over r.tp × r.sp × r.dp in-process ranks, each taking its
// sequence shard of its data rank's micro-batch: it loads from (unless
// ""), trains steps steps on the batches of steps first, first+1, ...,
// saving to save (unless "") after saveAt of them (resumeSegment), and
// returns rank 0's losses and the parameters unsharded over its TP group.
type tspSegment struct {
	r                    tspRun
	clip                 float64
	seed                 uint64
	from, save           string
	first, steps, saveAt int
	skipped              *int // if not nil: rank 0's skipped steps, after the run
}

func (s tspSegment) run(t *testing.T, corpus *data.Tokens) ([]float64, map[string][]float32, error) {
	t.Helper()
	r := s.r
	cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": 1,
		"gradient_clipping": %g, "zero_optimization": {"stage": %d, "reduce_bucket_size": 500},
		"tensor_model_parallel_size": %d, "sequence_parallel_size": %d, %s
		"optimizer": {"type": "AdamW", "params": {"lr": %g, "weight_decay": %g}}}`, eqB/r.dp, s.clip, r.stage, r.tp, r.sp, r.extra, eqLR, eqWD)
	losses := make([]float64, s.steps)
	var params map[string][]float32
	err := local.Run(context.Background(), r.tp*r.sp*r.dp, local.Options{Timeout: 120 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		gs, err := deepgo.TensorSequenceParallelGroups(ctx, c, r.tp, r.sp)
		if err != nil {
			return err
		}
		gc := tpGPT(corpus.Vocab)
		// size-1 groups stay out: the layouts without TP or SP as their
		// own tests build them
		opts := []deepgo.Option{deepgo.WithComm(gs.SeqData)}
		if r.tp > 1 {
			gc.TP = nn.TP{Comm: gs.Tensor}
			opts = append(opts, deepgo.WithTensorParallel(gs.Tensor))
		}
		if r.sp > 1 {
			gc.SP = nn.SP{Comm: gs.Seq}
			opts = append(opts, deepgo.WithSequenceParallel(gs.Seq))
		}
		gc.Checkpointing.Enabled = r.ckpt
		gc.AttentionWindow = r.window
		g, err := nn.NewReadyGPT(gc, nil, s.seed)
		if err != nil {
			return err
		}
		defer g.Free()
		freezeGPT(g, r.freeze)
		e, err := deepgo.Initialize(ctx, cfg, g, opts...)
		if err != nil {
			return err
		}
		defer e.Close()
		if s.skipped != nil && c.Rank() == 0 {
			defer func() { *s.skipped = e.(*deepgo.Engine).SkippedSteps() }()
		}
		return resumeSegment(ctx, e.(ckptTrainer), g, s.from, deepgo.LoadOptions{}, s.first, s.save, s.saveAt, func(off int, losses []float64) error {
			var shardErr error
			_, err := trainSteps(ctx, e, losses, c.Rank() == 0, func(step int) model.TokenBatch {
				b, err := eqBatch(corpus, s.first+off+step, r.dp, gs.DataRank).SequenceShard(gs.Seq.Rank(), r.sp)
				if err != nil {
					shardErr = err
				}
				return b
			})
			return errors.Join(err, shardErr)
		}, losses, c.Rank() == 0, &params)
	})
	return losses, params, err
}

// tspCurve trains r from eqSeed for steps steps at gradient_clipping clip.
func tspCurve(t *testing.T, r tspRun, steps int, clip float64, corpus *data.Tokens) ([]float64, map[string][]float32) {
	t.Helper()
	losses, params, err := tspSegment{r: r, clip: clip, seed: eqSeed, steps: steps, saveAt: steps}.run(t, corpus)
	require.NoError(t, err, "%v", r)
	return losses, params
}

// Ulysses SP 2 inside each TP rank of TP 2 (each rank one of the 4 heads
// over whole sequences), alone and with 2 data-parallel ranks at ZeRO 0-3,
// with and without activation checkpointing, follows the plain
// single-process loop on the whole sequences: losses to 1e-6 relative and
// the unsharded parameters to 3e-6 norm-wise (the TP and SP tests'
// tolerances). Positions read at offset 0 on every shard, an exchange of
// the wrong heads, or gradients reduced over the data ranks alone would
// each move the losses far past 1e-6 within two steps; clip 1.0 clips
// every step, so a norm that counted the replicated parameters per TP rank
// or missed the SP ranks' shares would move the parameters.
func TestGPTTensorSequenceParallelEquivalence(t *testing.T) {
	const steps, lossTol, paramTol = 4, 1e-6, 3e-6
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	var runs []tspRun
	for _, dp := range []int{1, 2} {
		for stage := range 4 {
			for _, ckpt := range []bool{false, true} {
				runs = append(runs, tspRun{tp: 2, sp: 2, dp: dp, stage: stage, ckpt: ckpt})
			}
		}
	}
	requireCurvesFollowPlain(t, corpus, steps, runs, func(t *testing.T, r tspRun, clip float64) ([]float64, map[string][]float32) {
		return tspCurve(t, r, steps, clip, corpus)
	}, lossTol, paramTol)
}

// Under bf16 the TP × SP ranks compute on the bf16 weights. Against the
// same layout in fp32 (which follows the plain loop, above) they stay
// within bf16's rounding of the weights: losses within 5e-4 relative and
// parameters within 1e-2 norm-wise (measured 5.1e-5 and 2.0e-3). Against
// bf16 at TP 1 × SP 1 and TP 2 alone only float32 summation order differs
// before the roundings to bf16 (measured 9.9e-6 and 7.6e-4), against SP 2
// alone less (2.1e-8 and 1.4e-6): losses within 1e-4 (SP's half test's
// tolerance), parameters within 5e-3.
func TestGPTTensorSequenceParallelBF16(t *testing.T) {
	const steps = 4
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	const prec = `"bf16": {"enabled": true},`
	got, gotP := tspCurve(t, tspRun{tp: 2, sp: 2, dp: 1, stage: 1, extra: prec}, steps, 1.0, corpus)
	for _, c := range []struct {
		ref               tspRun
		lossTol, paramTol float64
	}{
		{tspRun{tp: 2, sp: 2, dp: 1, stage: 1}, 5e-4, 1e-2},
		{tspRun{tp: 1, sp: 1, dp: 1, stage: 1, extra: prec}, 1e-4, 5e-3},
		{tspRun{tp: 2, sp: 1, dp: 1, stage: 1, extra: prec}, 1e-4, 5e-3},
		{tspRun{tp: 1, sp: 2, dp: 1, stage: 1, extra: prec}, 1e-4, 5e-3},
	} {
		want, wantP := tspCurve(t, c.ref, steps, 1.0, corpus)
		lr, pr := maxLossRel(want, got), relNorm(flatParams(wantP), flatParams(gotP))
		name := fmt.Sprintf("bf16 tp2-sp2 vs %v", c.ref)
		if c.ref.extra == "" {
			name += " fp32"
		}
		t.Logf("%s: loss rel %.3g, param rel %.3g", name, lr, pr)
		assert.LessOrEqual(t, lr, c.lossTol, "%s: losses", name)
		assert.LessOrEqual(t, pr, c.paramTol, "%s: parameters", name)
	}
}

// Under fp16 with a loss scale that overflows at first, TP 2 × SP 2 skips
// the steps SP 2 alone skips (the TP ranks agree on every overflow, each
// seeing only its shards' gradients) and follows its losses to
// half-precision rounding, alone and with 2 data-parallel ranks at ZeRO 3.
// The reference is SP 2, not one rank: SP, like data parallelism, rounds
// each rank's share of the gradient to fp16 before the sum, which can move
// an overflow to another step (measured: with 2 data ranks SP 1 and SP 2
// skip 4 steps each, but not the same ones; the losses part at step 5).
func TestGPTTensorSequenceParallelHalf(t *testing.T) {
	const steps = 8
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	const prec = `"fp16": {"enabled": true, "initial_scale_power": 20, "loss_scale_window": 2, "hysteresis": 1},`
	for _, c := range []struct{ dp, stage int }{{1, 1}, {2, 3}} {
		var wantSkip, skip int
		ref := tspRun{tp: 1, sp: 2, dp: c.dp, stage: c.stage, extra: prec}
		want, _, err := tspSegment{r: ref, clip: 1.0, seed: eqSeed, steps: steps, saveAt: steps, skipped: &wantSkip}.run(t, corpus)
		require.NoError(t, err, "%v", ref)
		require.NotZero(t, wantSkip, "%v skipped no step: the test needs overflows", ref)
		r := tspRun{tp: 2, sp: 2, dp: c.dp, stage: c.stage, extra: prec}
		got, _, err := tspSegment{r: r, clip: 1.0, seed: eqSeed, steps: steps, saveAt: steps, skipped: &skip}.run(t, corpus)
		require.NoError(t, err, "%v", r)
		assertSkipsLike(t, fmt.Sprintf("fp16 %v vs SP alone", r), want, got, wantSkip, skip)
	}
}

// One forward and backward on sequence shards of TP shards, without an
// engine, gives the whole batch's mean loss on every rank, and the ranks'
// gradients, unsharded over TP and averaged over SP, are the unsharded
// model's to float32 summation order; with the model's own block
// checkpointing too (its exchanges and TP collectives run again).
func TestGPTTensorSequenceParallelGradients(t *testing.T) {
	b, wantLoss, want := unshardedGrads(t)
	for _, ckpt := range []bool{false, true} {
		grads := shardedGrads(t, 4, b, wantLoss, func(ctx context.Context, c comm.Comm) (nn.GPTConfig, comm.Comm, error) {
			gs, err := deepgo.TensorSequenceParallelGroups(ctx, c, 2, 2)
			cfg := tpGPT(32)
			cfg.TP, cfg.SP = nn.TP{Comm: gs.Tensor}, nn.SP{Comm: gs.Seq}
			cfg.Checkpointing.Enabled = ckpt
			return cfg, gs.Seq, err
		})
		// every TP rank holds the full (unsharded) gradient of its SP
		// rank's tokens: the mean over all ranks is the SP average
		rel := relNorm(want, meanGrads(grads))
		t.Logf("tp 2 sp 2 ckpt %v: gradient rel %.3g", ckpt, rel)
		assert.LessOrEqual(t, rel, 1e-6, "ckpt %v: gradients vs unsharded", ckpt)
	}
}

// Heads that do not split over tp × sp are refused naming all three
// numbers; Ulysses with Megatron's sequence parallelism is refused naming
// both keys, by NewGPT and by Initialize (config check's words); an
// engine given the TP group but not the SP one says which constructor
// makes both; and the grid constructors refuse sizes that do not divide
// the world.
func TestGPTTensorSequenceParallelErrors(t *testing.T) {
	err := local.Run(context.Background(), 4, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		if _, err := deepgo.TensorSequenceParallelGroups(ctx, c, 2, 3); err == nil || !containsAll(err.Error(), "tensor_model_parallel_size 2", "sequence_parallel_size 3", "world size 4") {
			return fmt.Errorf("tp 2 x sp 3 on 4 ranks: got %v", err)
		}
		if _, err := deepgo.PipeTensorSequenceParallelGroups(ctx, c, 2, 2, 2); err == nil || !containsAll(err.Error(), "2 pipeline stages", "world size 4") {
			return fmt.Errorf("pp 2 x tp 2 x sp 2 on 4 ranks: got %v", err)
		}
		gs, err := deepgo.TensorSequenceParallelGroups(ctx, c, 2, 2)
		if err != nil {
			return err
		}
		cfg := nn.GPTConfig{Layers: 1, Heads: 2, Width: 16, Vocab: 8, SeqLen: 8, TP: nn.TP{Comm: gs.Tensor}, SP: nn.SP{Comm: gs.Seq}}
		if _, err := nn.NewGPT(cfg); err == nil || !containsAll(err.Error(), "heads 2", "tensor_model_parallel_size 2", "sequence_parallel_size 2") {
			return fmt.Errorf("heads 2 over tp 2 x sp 2: got %v", err)
		}
		cfg.Heads = 4
		cfg.TP.SequenceParallel = true
		if _, err := nn.NewGPT(cfg); err == nil || !containsAll(err.Error(), "sequence_parallel_size 2", "megatron_sequence_parallel") {
			return fmt.Errorf("ulysses with megatron sp: got %v", err)
		}
		cfg.TP.SequenceParallel = false
		g, err := nn.NewReadyGPT(cfg, nil, 1)
		if err != nil {
			return err
		}
		defer g.Free()
		for _, tc := range []struct {
			extra string
			opts  []deepgo.Option
			want  []string
		}{
			{`, "megatron_sequence_parallel": true`, gs.Options(), []string{"sequence_parallel_size 2", "megatron_sequence_parallel", "not supported"}},
			{"", []deepgo.Option{deepgo.WithComm(gs.SeqData), deepgo.WithTensorParallel(gs.Tensor)}, []string{"pass WithSequenceParallel", "TensorSequenceParallelGroups"}},
		} {
			ecfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, "tensor_model_parallel_size": 2, "sequence_parallel_size": 2` + tc.extra + `}`))
			if err != nil {
				return err
			}
			e, err := deepgo.Initialize(ctx, ecfg, g, tc.opts...)
			if err == nil {
				e.Close()
				return fmt.Errorf("%q: no error", tc.extra)
			}
			if !containsAll(err.Error(), tc.want...) {
				return fmt.Errorf("%q: got %v", tc.extra, err)
			}
		}
		return nil
	})
	require.NoError(t, err)
}
