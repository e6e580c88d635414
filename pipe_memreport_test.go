package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipeMemRun trains a 2-stage pipeline of a small GPT on pp×dp ranks of
// dev for steps batches of gas micro-batches, evaluating once at the end,
// and returns each rank's log, rank 0's losses and parameters.
func pipeMemRun(t *testing.T, dev string, dp, gas, steps int, memoryBreakdown bool) ([]string, []float64, map[string][]float32) {
	t.Helper()
	const pp = 2
	mk, err := data.NewMarkov(16, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(4000, 4), Vocab: 16}
	cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": %d,
		"pipeline_model_parallel_size": 2, "zero_optimization": {"stage": 1}, "memory_breakdown": %v,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`, gas, memoryBreakdown)
	logs := make([]strings.Builder, pp*dp)
	var losses []float64
	var params map[string][]float32
	err = worldFor(dev)(context.Background(), pp*dp, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 8, Vocab: 16, SeqLen: 8}, nil, 1)
		if err != nil {
			return err
		}
		defer g.Free()
		tr, err := deepgo.Initialize(ctx, cfg, g, append(opts, deepgo.WithLog(&logs[c.Rank()]))...)
		if err != nil {
			return err
		}
		defer tr.Close()
		batch := func(step int) []model.MicroBatch {
			mbs := make([]model.MicroBatch, gas)
			for i := range mbs {
				k := 2*gas*dp*step + 2*gas*(c.Rank()%dp) + 2*i
				mbs[i] = corpus.MakeBatch([]int{k, k + 1}, 8).MicroBatch()
			}
			return mbs
		}
		for s := range steps {
			loss, err := tr.TrainBatch(ctx, batch(s))
			if err != nil {
				return err
			}
			if c.Rank() == 0 {
				losses = append(losses, loss)
			}
		}
		if _, err := tr.EvalBatch(ctx, batch(steps)); err != nil {
			return err
		}
		p, err := tr.(*deepgo.PipeEngine).Parameters(ctx)
		if c.Rank() == 0 {
			params = p
		}
		return err
	})
	require.NoError(t, err)
	out := make([]string, len(logs))
	for r := range logs {
		out[r] = logs[r].String()
	}
	return out, losses, params
}

// TestPipelineMemoryBreakdown: DeepSpeed's PipelineEngine inherits its
// engine's reports: the two of __init__, and its forward and backward
// hooks' around every micro-batch's forward (evaluation's too) and
// backward on the world's rank 0 (stage 0); none for the optimizer step
// (the pipeline's _exec_optimizer_step does not go through step()), none
// on another rank. The run is bit-identical without the key. On the CPU
// and the simulated device, data-parallel 1 and 2.
func TestPipelineMemoryBreakdown(t *testing.T) {
	const gas, steps = 2, 2
	for _, dev := range []string{"", "sim+delay"} {
		for _, dp := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/dp%d", devName(dev), dp), func(t *testing.T) {
				logs, losses, params := pipeMemRun(t, dev, dp, gas, steps, true)
				l := logs[0]
				count := func(s string) int { return strings.Count(l, s+"\nMA ") }
				assert.Equal(t, 1, count("DeepSpeed Engine: After args sanity test"), l)
				assert.Equal(t, 1, count("DeepSpeed Engine: Before configure distributed model"))
				assert.Equal(t, steps*gas+gas, count("Engine before forward"), "every micro-batch's forward, the evaluation's too")
				assert.Equal(t, steps*gas+gas, count("Engine after forward"))
				assert.Equal(t, steps*gas, count("Engine before backward"))
				assert.Equal(t, steps*gas, count("Engine after backward"))
				assert.NotContains(t, l, "Engine before step")
				assert.Equal(t, 2+4*steps*gas+2*gas, strings.Count(l, "\nCPU Virtual Memory:  used = "), "a full report each")
				for r := 1; r < len(logs); r++ {
					assert.NotContains(t, logs[r], "MA ", "rank %d prints none", r)
				}
				offLogs, offLosses, offParams := pipeMemRun(t, dev, dp, gas, steps, false)
				assert.NotContains(t, offLogs[0], "Engine before")
				require.Len(t, losses, len(offLosses))
				for i := range losses {
					assert.Equal(t, math.Float64bits(offLosses[i]), math.Float64bits(losses[i]), "loss of step %d", i)
				}
				require.NoError(t, bitEqual(offParams, params))
			})
		}
	}
}
