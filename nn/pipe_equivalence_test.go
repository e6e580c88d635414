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

// The pipeline tests' GPT: 8 modules (embedding, 6 blocks, head), so that
// 4 stages × 2 virtual stages still give every part a module, trained on a
// global batch of pipeB windows of pipeT tokens.
const pipeB, pipeT, pipeSeed = 16, 8, 11

func pipeGPT(vocab int) nn.GPTConfig {
	return nn.GPTConfig{Layers: 6, Heads: 2, Width: 16, Vocab: vocab, SeqLen: pipeT}
}

// pipeMicro is micro-batch i of m of data-parallel rank r of dp at step:
// the global batch's windows split first by rank, then by micro-batch.
func pipeMicro(corpus *data.Tokens, step, dp, r, m, i int) model.TokenBatch {
	per := pipeB / dp / m
	idx := make([]int, per)
	for k := range idx {
		idx[k] = step*pipeB + r*(pipeB/dp) + i*per + k
	}
	return corpus.MakeBatch(idx, pipeT)
}

// pipeRun is one pipeline configuration.
type pipeRun struct {
	pp, dp, micro int
	sched         string
	virtual       int
	ckpt          int // pipeline.activation_checkpoint_interval
}

func (r pipeRun) String() string {
	return fmt.Sprintf("pp%d-dp%d-%s-v%d-m%d-ckpt%d", r.pp, r.dp, r.sched, r.virtual, r.micro, r.ckpt)
}

func (r pipeRun) config(clip float64) string {
	return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": %d,
		"gradient_clipping": %g, "zero_optimization": {"stage": 1},
		"pipeline_model_parallel_size": %d,
		"pipeline_schedule": {"type": %q, "virtual_stages": %d},
		"pipeline": {"partition": "uniform", "activation_checkpoint_interval": %d},
		"optimizer": {"type": "AdamW", "params": {"lr": %g, "weight_decay": %g}}}`,
		pipeB/r.dp/r.micro, r.micro, clip, r.pp, r.sched, r.virtual, r.ckpt, eqLR, eqWD)
}

// runPipe runs fn on each of r's pp × dp in-process ranks with a pipeline
// engine over the test GPT.
func runPipe(r pipeRun, clip float64, vocab int, fn func(ctx context.Context, c comm.Comm, pe *deepgo.PipeEngine) error) error {
	return runGPT(r.pp*r.dp, r.config(clip), vocab, func(ctx context.Context, c comm.Comm, tr deepgo.Trainer) error {
		return fn(ctx, c, tr.(*deepgo.PipeEngine))
	})
}

// runGPT runs fn on each of n in-process ranks with the trainer cfgJSON
// asks for over the test GPT.
func runGPT(n int, cfgJSON string, vocab int, fn func(ctx context.Context, c comm.Comm, tr deepgo.Trainer) error) error {
	return local.Run(context.Background(), n, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		g, err := nn.NewReadyGPT(pipeGPT(vocab), nil, pipeSeed)
		if err != nil {
			return err
		}
		defer g.Free()
		tr, err := deepgo.Initialize(ctx, cfg, g, deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer tr.Close()
		return fn(ctx, c, tr)
	})
}

// pipeReference is the pipeline tests' corpus and the plain loop's run
// of the GPT cfg(vocab) on its global batches (see plainGPT).
func pipeReference(t *testing.T, cfg func(vocab int) nn.GPTConfig, seed uint64, steps int, clip float64) (*data.Tokens, []float64, map[string][]float32, int) {
	t.Helper()
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	loss, params, clipped := plainGPT(t, cfg(corpus.Vocab), seed, steps, clip, func(step int) model.TokenBatch {
		return pipeMicro(corpus, step, 1, 0, 1, 0)
	})
	return corpus, loss, params, clipped
}

// trainMicro runs one TrainBatch of micro pipeMicro micro-batches of data
// rank d of dp per element of losses, recording the losses when record is
// set.
func trainMicro(ctx context.Context, tr deepgo.Trainer, corpus *data.Tokens, losses []float64, record bool, dp, d, micro int) error {
	return trainMicroFrom(ctx, tr, corpus, losses, record, dp, d, micro, 0)
}

// trainMicroFrom is trainMicro on the batches of steps first, first+1, ...
func trainMicroFrom(ctx context.Context, tr deepgo.Trainer, corpus *data.Tokens, losses []float64, record bool, dp, d, micro, first int) error {
	return trainShards(ctx, tr, corpus, losses, record, dp, d, micro, first, nil)
}

// pipeCurve trains the GPT with the pipeline engine over pp × dp
// in-process ranks and returns rank 0's losses, the gathered parameters,
// and each stage's copies of the tied weights (rank of data coordinate 0).
func pipeCurve(t *testing.T, r pipeRun, steps int, clip float64, corpus *data.Tokens) ([]float64, map[string][]float32, []map[string][]float32) {
	t.Helper()
	losses := make([]float64, steps)
	var params map[string][]float32
	tied := make([]map[string][]float32, r.pp)
	err := runPipe(r, clip, corpus.Vocab, func(ctx context.Context, c comm.Comm, pe *deepgo.PipeEngine) error {
		tr := deepgo.Trainer(pe)
		d := c.Rank() % r.dp // the grid is pipe × data, data fastest
		if err := trainMicro(ctx, tr, corpus, losses, c.Rank() == 0, r.dp, d, r.micro); err != nil {
			return err
		}
		return pipeResults(ctx, c, pe, r.dp, &params, tied)
	})
	require.NoError(t, err, "%v", r)
	return losses, params, tied
}

// pipeResults gathers a trained pipeline's parameters (into *params, on
// rank 0) and each stage's tied copies (into tied[stage], from its data
// rank 0): collectives every rank calls.
func pipeResults(ctx context.Context, c comm.Comm, pe *deepgo.PipeEngine, dp int, params *map[string][]float32, tied []map[string][]float32) error {
	ps, err := deepgo.Trainer(pe).Parameters(ctx)
	if err != nil {
		return err
	}
	tc, err := pe.TiedCopies(ctx)
	if err != nil {
		return err
	}
	if c.Rank()%dp == 0 {
		tied[pe.Stage()] = tc
	}
	if c.Rank() == 0 {
		*params = ps
	}
	return nil
}

// The GPT trained through the pipeline engine, with every schedule, 2 and
// 4 stages, 1 and 2 data-parallel ranks (ZeRO-1 in each stage's group) and
// 1, 4 and 8 micro-batches, and with activation checkpointing, follows
// the plain single-process loop: losses to 1e-6 relative, parameters to 3e-6 norm-wise (the tolerances of the
// data-parallel equivalence test, whose reasoning holds here: only float32
// summation order and float32-vs-float64 AdamW differ), and the stages'
// copies of the tied wte stay bit-identical.
func TestGPTPipelineEquivalence(t *testing.T) {
	const steps, clip, lossTol, paramTol = 3, 1.0, 1e-6, 3e-6
	corpus, plainLoss, plainParams, _ := pipeReference(t, pipeGPT, pipeSeed, steps, clip)
	want := flatParams(plainParams)
	var runs []pipeRun
	for _, pp := range []int{2, 4} {
		for _, dp := range []int{1, 2} {
			for _, m := range []int{1, 4, 8} {
				runs = append(runs, pipeRun{pp, dp, m, "1F1B", 1, 0}, pipeRun{pp, dp, m, "GPipe", 1, 0})
				if m%pp == 0 { // the interleaved schedule needs micro-batches in groups of pp
					runs = append(runs, pipeRun{pp, dp, m, "Interleaved", 2, 0})
				}
			}
		}
	}
	// activation checkpointing (every block recomputed in backward)
	runs = append(runs, pipeRun{2, 2, 4, "1F1B", 1, 1}, pipeRun{4, 1, 8, "Interleaved", 2, 1})
	if testing.Short() {
		runs = []pipeRun{{2, 2, 4, "1F1B", 1, 0}, {4, 1, 4, "Interleaved", 2, 0}, {2, 2, 4, "1F1B", 1, 1}}
	}
	for _, r := range runs {
		t.Run(r.String(), func(t *testing.T) {
			loss, params, tied := pipeCurve(t, r, steps, clip, corpus)
			requireFollowsPlain(t, r.String(), plainLoss, loss, want, flatParams(params), lossTol, paramTol)
			wte := "transformer.wte.weight"
			require.NotNil(t, tied[0][wte], "stage 0 holds no tied wte")
			require.NotNil(t, tied[r.pp-1][wte], "the last stage holds no tied wte")
			assert.Equal(t, tied[0][wte], tied[r.pp-1][wte], "the stages' copies of the tied wte differ")
			assert.LessOrEqual(t, relNorm(plainParams[wte], tied[r.pp-1][wte]), paramTol, "the last stage's wte vs plain")
		})
	}
}

// pipeline.activation_checkpoint_interval 1 makes every block of a stage
// keep only its input (a stage of blocks holds less activation memory per
// micro-batch); other intervals are refused naming the key and the value.
func TestGPTPipelineCheckpointInterval(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(4000, 4), Vocab: 32}
	bytes := map[int]int64{}
	for _, n := range []int{0, 1, 2} {
		r := pipeRun{2, 1, 2, "1F1B", 1, n}
		err := runPipe(r, 1, corpus.Vocab, func(ctx context.Context, _ comm.Comm, pe *deepgo.PipeEngine) error {
			mbs := []model.MicroBatch{pipeMicro(corpus, 0, 1, 0, 2, 0).MicroBatch(), pipeMicro(corpus, 0, 1, 0, 2, 1).MicroBatch()}
			if _, err := pe.TrainBatch(ctx, mbs); err != nil {
				return err
			}
			if pe.Stage() == 0 {
				bytes[n] = pe.ActivationBytes() / int64(pe.PartsMade())
			}
			return nil
		})
		if n == 2 {
			require.ErrorContains(t, err, "pipeline.activation_checkpoint_interval 2: nn.GPT: activation checkpoint interval 2: not supported (allowed 1")
			continue
		}
		require.NoError(t, err, "interval %d", n)
	}
	t.Logf("stage 0 activation bytes per micro-batch: %d without checkpointing, %d with interval 1", bytes[0], bytes[1])
	assert.Less(t, bytes[1], bytes[0], "checkpointing did not reduce stage 0's activation memory")
}

// Under fp16 and bf16 the pipeline (2 stages × 2 data ranks, 4
// micro-batches) follows the data-parallel engine on the same global
// batches: the modules' arithmetic is the same, the tied wte's two shares
// are rounded to half precision separately on their stages before being
// summed (the data-parallel engine sums them in float32 first), so the
// runs agree to half-precision rounding, not to the bit (measured over 4
// steps: fp16 3e-7, bf16 5e-6 relative; the bound is 5e-5); the stages'
// copies of wte stay identical.
func TestGPTPipelineHalf(t *testing.T) {
	const steps, micro = 4, 4
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	for _, prec := range []string{`"fp16": {"enabled": true, "initial_scale_power": 12}`, `"bf16": {"enabled": true}`,
		// gradients accumulated in fp32 apart from the bf16 ones backward writes
		`"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}`} {
		cfg := func(pp, dp int) string {
			return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": %d, %s,
				"gradient_clipping": 1.0, "zero_optimization": {"stage": 1}, "pipeline_model_parallel_size": %d,
				"pipeline": {"partition": "uniform"},
				"optimizer": {"type": "AdamW", "params": {"lr": %g, "weight_decay": %g}}}`, pipeB/dp/micro, micro, prec, pp, eqLR, eqWD)
		}
		train := func(pp, dp int) ([]float64, []map[string][]float32) {
			losses := make([]float64, steps)
			tied := make([]map[string][]float32, pp)
			err := runGPT(pp*dp, cfg(pp, dp), corpus.Vocab, func(ctx context.Context, c comm.Comm, tr deepgo.Trainer) error {
				d := c.Rank() % dp
				if err := trainMicro(ctx, tr, corpus, losses, c.Rank() == 0, dp, d, micro); err != nil {
					return err
				}
				if pe, ok := tr.(*deepgo.PipeEngine); ok {
					tc, err := pe.TiedCopies(ctx) // a collective over the stage's data ranks
					if d == 0 {
						tied[pe.Stage()] = tc
					}
					return err
				}
				return nil
			})
			require.NoError(t, err, "%s pp %d dp %d", prec, pp, dp)
			return losses, tied
		}
		want, _ := train(1, 2)
		got, tied := train(2, 2)
		t.Logf("%s: losses %v vs data-parallel %v: max rel %.3g", prec, got, want, maxLossRel(want, got))
		assert.LessOrEqual(t, maxLossRel(want, got), 5e-5, "%s: pipeline vs data-parallel losses", prec)
		assert.Equal(t, tied[0]["transformer.wte.weight"], tied[1]["transformer.wte.weight"], "%s: the stages' wte copies differ", prec)
	}
}
