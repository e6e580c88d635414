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
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tppRun is one 3-D layout: tp × pp × dp ranks on DeepSpeed's
// PipeModelDataParallelTopology (model fastest, pipe outermost).
type tppRun struct {
	tp, pp, dp, stage, micro int
	sched                    string
	virtual                  int
	prec                     string // a precision section and its comma, or ""
	// seq is Megatron's sequence parallelism (megatron_sequence_parallel,
	// TP.SequenceParallel); ckpt is pipeline.activation_checkpoint_interval
	seq    bool
	ckpt   int
	freeze string // the parameters frozen (freezeGPT; "": none)
}

func (r tppRun) String() string {
	s := fmt.Sprintf("tp%d-pp%d-dp%d-zero%d-%s-v%d-m%d", r.tp, r.pp, r.dp, r.stage, r.sched, r.virtual, r.micro)
	if r.seq {
		s += "-megatronsp"
	}
	if r.ckpt > 0 {
		s += fmt.Sprintf("-ckpt%d", r.ckpt)
	}
	return s
}

func (r tppRun) config(clip float64) string {
	return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": %d,
		"gradient_clipping": %g, "zero_optimization": {"stage": %d}, %s
		"tensor_model_parallel_size": %d, "pipeline_model_parallel_size": %d, "megatron_sequence_parallel": %v,
		"pipeline_schedule": {"type": %q, "virtual_stages": %d},
		"pipeline": {"partition": "uniform", "activation_checkpoint_interval": %d},
		"optimizer": {"type": "AdamW", "params": {"lr": %g, "weight_decay": %g}}}`,
		pipeB/r.dp/r.micro, r.micro, clip, r.stage, r.prec, r.tp, r.pp, r.seq && r.tp > 1, r.sched, r.virtual, r.ckpt, eqLR, eqWD)
}

// runTPP runs fn on each of r's ranks with a pipeline engine over tpGPT
// sharded over the rank's TP group; d is the rank's data coordinate.
func runTPP(r tppRun, clip float64, vocab int, fn func(ctx context.Context, c comm.Comm, d int, g *nn.GPT, pe *deepgo.PipeEngine) error) error {
	return local.Run(context.Background(), r.tp*r.pp*r.dp, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(r.config(clip)))
		if err != nil {
			return err
		}
		tc, err := deepgo.PipeTensorParallelGroup(ctx, c, r.pp, r.tp)
		if err != nil {
			return err
		}
		defer tc.Close()
		gc := tpGPT(vocab)
		gc.TP = nn.TP{Comm: tc, SequenceParallel: r.seq && r.tp > 1}
		g, err := nn.NewReadyGPT(gc, nil, eqSeed)
		if err != nil {
			return err
		}
		defer g.Free()
		freezeGPT(g, r.freeze)
		tr, err := deepgo.Initialize(ctx, cfg, g, deepgo.WithComm(c), deepgo.WithTensorParallel(tc))
		if err != nil {
			return err
		}
		defer tr.Close()
		return fn(ctx, c, (c.Rank()/r.tp)%r.dp, g, tr.(*deepgo.PipeEngine))
	})
}

// tppCurve trains r for steps steps and returns rank 0's losses, the
// parameters unsharded over rank 0's TP group, and the wte shard copies
// of TP rank 0 on the first and last stage (data coordinate 0).
func tppCurve(t *testing.T, r tppRun, steps int, clip float64, corpus *data.Tokens) ([]float64, map[string][]float32, [2][]float32) {
	t.Helper()
	losses := make([]float64, steps)
	var params map[string][]float32
	var tied [2][]float32
	err := runTPP(r, clip, corpus.Vocab, func(ctx context.Context, c comm.Comm, d int, g *nn.GPT, pe *deepgo.PipeEngine) error {
		if err := trainMicro(ctx, pe, corpus, losses, c.Rank() == 0, r.dp, d, r.micro); err != nil {
			return err
		}
		ps, err := pe.Parameters(ctx)
		if err != nil {
			return err
		}
		full, err := g.Unshard(ctx, ps)
		if err != nil {
			return err
		}
		tc, err := pe.TiedCopies(ctx)
		if err != nil {
			return err
		}
		if d == 0 && c.Rank()%r.tp == 0 {
			switch pe.Stage() {
			case 0:
				tied[0] = tc["transformer.wte.weight"]
			case r.pp - 1:
				tied[1] = tc["transformer.wte.weight"]
			}
		}
		if c.Rank() == 0 {
			params = full
		}
		return nil
	})
	require.NoError(t, err, "%v", r)
	return losses, params, tied
}

// The GPT sharded over 2 tensor-parallel ranks in each of 2 pipeline
// stages, with 1 and 2 data-parallel ranks (8 in-process ranks) at ZeRO 0
// and 1, under 1F1B, GPipe and the interleaved schedule, follows the plain
// single-process loop: losses to 1e-6 relative and the unsharded
// parameters to 3e-6 norm-wise (the data-parallel equivalence test's
// tolerances: only float32 summation order and float32-vs-float64 AdamW
// differ). gradient_clipping 1.0 clips every step, so a norm that counted
// replicated parameters once per TP rank, shards on one TP rank only, or
// the tied wte on both stages would move the parameters past the
// tolerance; the stages' wte shards stay bit-identical.
func TestGPTTensorPipelineEquivalence(t *testing.T) {
	const steps, clip, lossTol, paramTol = 3, 1.0, 1e-6, 3e-6
	corpus, plainLoss, plainParams, clipped := pipeReference(t, tpGPT, eqSeed, steps, clip)
	require.Equal(t, steps, clipped, "gradient_clipping %g should clip every step of the plain run", clip)
	want := flatParams(plainParams)
	runs := []tppRun{
		{tp: 2, pp: 2, dp: 1, stage: 0, micro: 4, sched: "1F1B", virtual: 1},
		{tp: 2, pp: 2, dp: 1, stage: 1, micro: 2, sched: "GPipe", virtual: 1},
		{tp: 2, pp: 2, dp: 1, stage: 1, micro: 4, sched: "Interleaved", virtual: 2},
		{tp: 2, pp: 2, dp: 2, stage: 0, micro: 2, sched: "1F1B", virtual: 1},
		{tp: 2, pp: 2, dp: 2, stage: 1, micro: 4, sched: "1F1B", virtual: 1},
	}
	if testing.Short() {
		runs = []tppRun{runs[0], runs[4]}
	}
	for _, r := range runs {
		t.Run(r.String(), func(t *testing.T) {
			loss, params, tied := tppCurve(t, r, steps, clip, corpus)
			requireFollowsPlain(t, r.String(), plainLoss, loss, want, flatParams(params), lossTol, paramTol)
			require.NotNil(t, tied[0], "stage 0 holds no wte shard")
			assert.Equal(t, tied[0], tied[1], "the stages' copies of the wte shard differ")
		})
	}
}

// Under fp16 with a loss scale that overflows at first, TP 2 × PP 2 skips
// the same steps as PP 2 alone, with 1 and 2 data ranks, and follows its
// losses to half-precision rounding (measured: 1.3e-7). These overflows
// reach every TP shard at once, so the test shows the loss scaler running
// on the 3-D grid, not that one TP rank's overflow alone reaches the
// others (the engine gathers the verdict over the whole world for that).
func TestGPTTensorPipelineHalf(t *testing.T) {
	const steps = 8
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	prec := `"fp16": {"enabled": true, "initial_scale_power": 20, "loss_scale_window": 2, "hysteresis": 1},`
	for _, dp := range []int{1, 2} {
		train := func(tp int) ([]float64, int) {
			r := tppRun{tp: tp, pp: 2, dp: dp, stage: 1, micro: 2, sched: "1F1B", virtual: 1, prec: prec}
			losses := make([]float64, steps)
			skipped := 0
			err := runTPP(r, 1.0, corpus.Vocab, func(ctx context.Context, c comm.Comm, d int, _ *nn.GPT, pe *deepgo.PipeEngine) error {
				if err := trainMicro(ctx, pe, corpus, losses, c.Rank() == 0, r.dp, d, r.micro); err != nil {
					return err
				}
				if c.Rank() == 0 {
					skipped = pe.SkippedSteps()
				}
				return nil
			})
			require.NoError(t, err, "%v", r)
			return losses, skipped
		}
		want, wantSkip := train(1)
		require.NotZero(t, wantSkip, "dp %d: PP 2 skipped no step: the test needs overflows", dp)
		got, skip := train(2)
		assertSkipsLike(t, fmt.Sprintf("dp %d: TP 2 x PP 2 vs PP 2", dp), want, got, wantSkip, skip)
	}
}

// What 3-D parallelism refuses: ZeRO 2 (the pipeline engine's rule, as
// DeepSpeed's) and a TP group that is not the grid's model group.
func TestGPTTensorPipelineRefusals(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(4000, 4), Vocab: 32}
	r := tppRun{tp: 2, pp: 2, dp: 1, stage: 2, micro: 2, sched: "1F1B", virtual: 1}
	err = runTPP(r, 1, corpus.Vocab, func(context.Context, comm.Comm, int, *nn.GPT, *deepgo.PipeEngine) error { return nil })
	require.ErrorContains(t, err, "zero_optimization.stage: got 2; allowed: 0 or 1 with pipeline_model_parallel_size > 1")

	r.stage = 1
	// a model sharded over a group that is not the grid's model group
	// (ranks {0,2} and {1,3}: the grid pairs {0,1} and {2,3}), a TP config
	// without the group, and a sharded model without either
	wrong := func(ctx context.Context, c comm.Comm) (comm.Comm, error) {
		g, err := comm.NewGrid([]string{"model", "rest"}, []int{2, 2})
		if err != nil {
			return nil, err
		}
		return g.Group(ctx, c, "model")
	}
	right := func(ctx context.Context, c comm.Comm) (comm.Comm, error) {
		return deepgo.PipeTensorParallelGroup(ctx, c, 2, 2)
	}
	for _, tc := range []struct {
		tp     int
		group  func(context.Context, comm.Comm) (comm.Comm, error)
		passTP bool
		want   string
	}{
		{2, wrong, true, "WithTensorParallel's group holds world ranks"},
		{2, right, false, "tensor_model_parallel_size 2 with 2 pipeline stages: pass WithTensorParallel"},
		{1, right, false, "is a tensor-parallel shard (dim 0): set tensor_model_parallel_size and pass WithTensorParallel"},
	} {
		err = local.Run(context.Background(), 4, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
			rc := r
			rc.tp = tc.tp
			cfg, err := config.Parse([]byte(rc.config(1)))
			if err != nil {
				return err
			}
			tg, err := tc.group(ctx, c)
			if err != nil {
				return err
			}
			defer tg.Close()
			gc := tpGPT(corpus.Vocab)
			gc.TP = nn.TP{Comm: tg}
			m, err := nn.NewReadyGPT(gc, nil, eqSeed)
			if err != nil {
				return err
			}
			defer m.Free()
			opts := []deepgo.Option{deepgo.WithComm(c)}
			if tc.passTP {
				opts = append(opts, deepgo.WithTensorParallel(tg))
			}
			tr, err := deepgo.Initialize(ctx, cfg, m, opts...)
			if err == nil {
				tr.Close()
			}
			return err
		})
		require.ErrorContains(t, err, tc.want)
	}
}
