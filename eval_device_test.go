package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/require"
)

// evalSteps are the steps before whose TrainBatch a stepEvals evaluates.
var evalSteps = []int{1, 3}

// stepEvals records what EvalBatch returned on every rank before the
// TrainBatch of evalSteps: on the step's own micro-batches (own), and on
// them twice over (twice: as many micro-batches again as the training's).
type stepEvals struct {
	mu         sync.Mutex
	own, twice map[[2]int]float64 // (step, rank) → loss
	// Evaluate's of the step's micro-batches (with Outputs and
	// PerMicroBatch), only where stepEvals.outputs is set
	outputs bool
	outs    map[[2]int][][]float32
	losses  map[[2]int][]float64
}

// before is a parSeg.before that evaluates before the steps of evalSteps.
func (s *stepEvals) before(ctx context.Context, rank, step int, tr deepgo.Trainer, mbs []model.MicroBatch) error {
	if !slices.Contains(evalSteps, step) {
		return nil
	}
	own, err := tr.EvalBatch(ctx, mbs)
	if err != nil {
		return fmt.Errorf("rank %d step %d: EvalBatch of the step's micro-batches: %w", rank, step, err)
	}
	twice, err := tr.EvalBatch(ctx, append(slices.Clone(mbs), mbs...))
	if err != nil {
		return fmt.Errorf("rank %d step %d: EvalBatch of the step's micro-batches twice over: %w", rank, step, err)
	}
	var outs [][]float32
	var losses []float64
	if s.outputs {
		if outs, losses, err = evaluateOwn(ctx, tr, mbs, own); err != nil {
			return fmt.Errorf("rank %d step %d: %w", rank, step, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own == nil {
		s.own, s.twice = map[[2]int]float64{}, map[[2]int]float64{}
		s.outs, s.losses = map[[2]int][][]float32{}, map[[2]int][]float64{}
	}
	s.own[[2]int{step, rank}], s.twice[[2]int{step, rank}] = own, twice
	if s.outputs {
		s.outs[[2]int{step, rank}], s.losses[[2]int{step, rank}] = outs, losses
	}
	return nil
}

// require checks the evaluations of a run on ranks ranks that trained
// got: every rank's evaluation of a step's micro-batches is that step's
// TrainBatch loss, bit for bit, and of them twice over the same within
// twiceTol (0: bit for bit).
func (s *stepEvals) require(t *testing.T, got *result, ranks int, twiceTol float64) {
	t.Helper()
	for _, step := range evalSteps {
		want := got.losses[step]
		for r := range ranks {
			own, ok := s.own[[2]int{step, r}]
			require.True(t, ok, "step %d rank %d: no evaluation", step, r)
			require.Equal(t, math.Float64bits(want), math.Float64bits(own), "step %d rank %d: EvalBatch %v, TrainBatch %v", step, r, own, want)
			twice := s.twice[[2]int{step, r}]
			if twiceTol == 0 {
				require.Equal(t, math.Float64bits(want), math.Float64bits(twice), "step %d rank %d: EvalBatch twice over %v, TrainBatch %v", step, r, twice, want)
			} else {
				require.InEpsilon(t, want, twice, twiceTol, "step %d rank %d: EvalBatch twice over", step, r)
			}
		}
	}
}

// sameEvals requires b's evaluations to be a's, bit for bit.
func sameEvals(t *testing.T, what string, a, b *stepEvals) {
	t.Helper()
	require.Len(t, b.own, len(a.own), what)
	require.Equal(t, a.outs, b.outs, "%s: Evaluate's outputs", what)
	require.Equal(t, a.losses, b.losses, "%s: Evaluate's per-micro-batch losses", what)
	for k, v := range a.own {
		require.Equal(t, math.Float64bits(v), math.Float64bits(b.own[k]), "%s: step %d rank %d", what, k[0], k[1])
		require.Equal(t, math.Float64bits(a.twice[k]), math.Float64bits(b.twice[k]), "%s: step %d rank %d, twice over", what, k[0], k[1])
	}
}

// TestEvalBatchModelParallel: EvalBatch on the data-parallel engine over
// the GPT with tensor parallelism (Megatron's sequence parallelism too),
// Ulysses sequence parallelism, both, ZeRO 1-3, the engine's activation
// checkpointing and bf16 (the device tables' parDevCases), on the CPU
// backend and the simulated device with kernel delays: evaluating a
// step's micro-batches (once, and twice over) before its TrainBatch gives
// that TrainBatch's loss bit for bit on every rank (Evaluate's too, with
// outputs and per-micro-batch losses: evaluateOwn), the run trains
// bit-identically to one without the evaluations, and the device's
// evaluations, outputs and per-micro-batch losses are the CPU's.
func TestEvalBatchModelParallel(t *testing.T) {
	const steps = 4
	for _, c := range parDevCases() {
		t.Run(c.String(), func(t *testing.T) {
			want, err := parDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu, no evaluations")
			ranks := max(1, c.tp) * max(1, c.sp) * c.dp
			var cpu *stepEvals
			for _, dev := range []string{"", "sim+delay"} {
				ev := &stepEvals{outputs: true}
				got, err := parDevSegment(t, dev, c, parSeg{to: steps, before: ev.before})
				require.NoError(t, err, devName(dev))
				bitEqualRuns(t, want, got)
				ev.require(t, got, ranks, 0)
				if cpu == nil {
					cpu = ev
				} else {
					sameEvals(t, devName(dev), cpu, ev)
				}
			}
		})
	}
}

// pipeEvalCases are the device tables' pipelines EvalBatch runs on: plain,
// data-parallel, interleaved, GPipe, half precision, checkpointed,
// offloaded, tensor-parallel (Megatron SP too) and Ulysses stages.
func pipeEvalCases() []pipeDevCase {
	cases := pipeDevCases()
	cases = append(cases, pipeTPDevCases()...)
	cases = append(cases, pipeSeqDevCases()[2], pipeUlyssesDevCases()[1], pipeUlyssesDevCases()[3], pipeTensorUlyssesDevCases()[1])
	return cases
}

// TestPipelineEvalBatch: EvalBatch on the pipeline engine (the
// InferenceSchedule; the interleaved schedule's forward half) over
// pipeEvalCases, on the CPU backend and the simulated device with kernel
// delays: evaluating a step's micro-batches before its TrainBatch gives
// that TrainBatch's loss bit for bit on every rank of every stage (twice
// over, to float64 rounding of the mean), the run trains bit-identically
// to one without the evaluations (every loss, scale, gradient norm and
// parameter), and the device's evaluations (Evaluate's outputs on the
// last stage and per-micro-batch losses too: evaluateOwn) are the CPU's.
func TestPipelineEvalBatch(t *testing.T) {
	const steps = 4
	for _, c := range pipeEvalCases() {
		t.Run(c.String(), func(t *testing.T) {
			want, err := pipeDevRun(t, "", c, steps)
			require.NoError(t, err, "cpu, no evaluations")
			var cpu *stepEvals
			for _, dev := range []string{"", "sim+delay"} {
				ev := &stepEvals{outputs: true}
				got, err := pipeDevSegment(t, dev, c, parSeg{to: steps, before: ev.before})
				require.NoError(t, err, devName(dev))
				bitEqualRuns(t, &want.result, &got.result)
				require.Equal(t, want.norms, got.norms, "%s: gradient norms", devName(dev))
				ev.require(t, &got.result, len(got.mem), 1e-14)
				if cpu == nil {
					cpu = ev
				} else {
					sameEvals(t, devName(dev), cpu, ev)
				}
			}
		})
	}
}

// TestPipelineEvalMatchesEngine: a pipeline of 2 stages (1F1B and
// interleaved, with 1 and 2 data-parallel ranks) trains 2 steps and saves;
// its EvalBatch of 4 micro-batches per data-parallel rank equals, to fp32
// summation order, the data-parallel engine's EvalBatch of the same
// micro-batches on the same parameters (the checkpoint loaded into it),
// whose Evaluate outputs (the GPT's logits, copied before its loss
// overwrites them) and per-micro-batch losses are a plain GPT forward's.
func TestPipelineEvalMatchesEngine(t *testing.T) {
	const vocab, seqLen = 32, 16
	evalData := gptEvalData(t, 1000)
	for _, c := range []pipeDevCase{
		{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1},
		{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1},
		{pp: 2, dp: 1, gas: 2, sched: "Interleaved", virtual: 2},
		{pp: 2, dp: 2, gas: 2, sched: "Interleaved", virtual: 2},
	} {
		t.Run(c.String(), func(t *testing.T) {
			dir := t.TempDir()
			pipeLoss := make([]float64, c.pp*c.dp)
			got, err := pipeDevSegment(t, "", c, parSeg{to: 2, save: dir, after: func(ctx context.Context, rank int, tr deepgo.Trainer) error {
				l, err := tr.EvalBatch(ctx, evalData(rank%c.dp)) // the grid is pipe × data
				pipeLoss[rank] = l
				return err
			}})
			require.NoError(t, err, "pipeline")
			for r, l := range pipeLoss {
				require.Equal(t, math.Float64bits(pipeLoss[0]), math.Float64bits(l), "rank %d's evaluation %v, rank 0's %v", r, l, pipeLoss[0])
			}
			engLoss := make([]float64, c.dp)
			engOuts, engLosses := make([][][]float32, c.dp), make([][]float64, c.dp)
			var mu sync.Mutex
			cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": %d, "gradient_clipping": %g,
				"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}}}`, c.gas, pipeDevClip)
			gc := nn.GPTConfig{Layers: 2, Heads: 2, Width: 32, Vocab: vocab, SeqLen: seqLen}
			err = newWorld(context.Background(), c.dp, func(ctx context.Context, cm comm.Comm, opts []deepgo.Option) error {
				return withGPTOpts(ctx, cfgJSON, gc, 1, asIsGPT, opts, func(tr deepgo.Trainer) error {
					if _, err := tr.Load(ctx, dir, deepgo.LoadOptions{}); err != nil {
						return err
					}
					var err error
					engLoss[cm.Rank()], err = tr.EvalBatch(ctx, evalData(cm.Rank()))
					if err != nil {
						return err
					}
					res, err := tr.Evaluate(ctx, evalData(cm.Rank()), deepgo.EvalOptions{Outputs: true, PerMicroBatch: true})
					if err != nil {
						return err
					}
					outs, err := outputValues(&res, 4)
					mu.Lock()
					defer mu.Unlock()
					engOuts[cm.Rank()], engLosses[cm.Rank()] = outs, res.Losses
					return err
				})
			})
			require.NoError(t, err, "data-parallel engine")
			for d := range c.dp {
				ref, refLosses := plainGPT(t, gc, got.params, evalData(d))
				requireGPTOutputs(t, fmt.Sprintf("data-parallel engine rank %d", d), engOuts[d], ref, vocab, 0, 1, gptOutTol)
				require.Len(t, engLosses[d], len(refLosses), "data-parallel engine rank %d: losses", d)
				for i, l := range engLosses[d] {
					require.InEpsilon(t, refLosses[i], l, gptLossTol, "data-parallel engine rank %d micro-batch %d: loss vs the plain forward's", d, i)
				}
			}
			require.InEpsilon(t, engLoss[0], pipeLoss[0], 1e-6, "pipeline %v, data-parallel engine %v", pipeLoss[0], engLoss[0])
			t.Logf("pipeline %.9f, engine %.9f (rel %.1e)", pipeLoss[0], engLoss[0], math.Abs(pipeLoss[0]-engLoss[0])/engLoss[0])
		})
	}
}
