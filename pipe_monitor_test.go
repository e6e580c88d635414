package deepgo_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/monitor/flops"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pipeline engine feeds csv_monitor and tensorboard as the
// data-parallel engine does (and comms_logger over all its groups), with
// DeepSpeed's PipelineEngine's x values
// (train_loss after the step, beside lr; eval_loss at the samples of the
// steps before it, as its eval_batch writes it): 2 stages × 2 data ranks, fp16
// with the first step overflowing on one rank, the NaN/Inf check (a
// collective over all four ranks) at every step. The files hold what
// TrainBatch returned and what the engine reported after each step, and
// rundir reads them back on steps, from deepgo_run.json or, without it,
// from the x values alone, as for a directory DeepSpeed wrote. On the CPU
// backend and on the simulated device with kernel delays.
func TestPipelineMonitorFiles(t *testing.T) {
	for _, dev := range []string{"", "sim+delay"} {
		t.Run(devName(dev), func(t *testing.T) { pipelineMonitorFiles(t, dev) })
	}
}

// pipelineMonitorFiles is TestPipelineMonitorFiles on dev (worldFor).
func pipelineMonitorFiles(t *testing.T, dev string) {
	const pp, dp, steps = 2, 2, 3
	mk, err := data.NewMarkov(16, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(4000, 4), Vocab: 16}
	out := t.TempDir()
	cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
		"pipeline_model_parallel_size": 2, "zero_optimization": {"stage": 1}, "wall_clock_breakdown": true, "steps_per_print": 1,
		"fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 1},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
		"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_max_lr": 0.01}},
		"comms_logger": {"enabled": true}, "flops_profiler": {"enabled": true, "profile_step": 1},
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "pipe"},
		"tensorboard": {"enabled": true, "output_path": %q, "job_name": "pipe"}}`, out, out)
	type report struct{ loss, lr, scale, norm float64 }
	var (
		mu      sync.Mutex
		got     []report            // rank 0's, per step
		evals   [pp * dp][2]float64 // each rank's evaluations, before and after training
		nparams int                 // the GPT's
		log     strings.Builder     // rank 0's wall_clock_breakdown lines
		comms   strings.Builder     // rank 0's comms_logger summary
		prof    *flops.Report       // rank 0's flops_profiler report
	)
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
		if c.Rank() == 0 {
			nparams = nn.NumParams(g)
		}
		step := 0
		poison := poisonFirstStep(c, &step)
		opts = append(opts, deepgo.WithMonitorOptions(monitor.WithFiniteCheck(1, nil)))
		if c.Rank() == 0 {
			opts = append(opts, deepgo.WithLog(&log)) // only rank 0's goroutine writes it
		}
		tr, err := deepgo.Initialize(ctx, cfg, hookGPT{g, func(string) error { return nil }, poison}, opts...)
		if err != nil {
			return err
		}
		defer tr.Close()
		pe := tr.(*deepgo.PipeEngine)
		evalData := make([]model.MicroBatch, 2)
		for i := range evalData {
			k := 400 + 4*(c.Rank()%dp) + 2*i
			evalData[i] = corpus.MakeBatch([]int{k, k + 1}, 8).MicroBatch()
		}
		if evals[c.Rank()][0], err = tr.EvalBatch(ctx, evalData); err != nil {
			return err
		}
		for ; step < steps; step++ {
			mbs := make([]model.MicroBatch, 2)
			for i := range mbs {
				k := 8*step + 4*(c.Rank()%dp) + 2*i
				mbs[i] = corpus.MakeBatch([]int{k, k + 1}, 8).MicroBatch()
			}
			loss, err := tr.TrainBatch(ctx, mbs)
			if err != nil {
				return err
			}
			if c.Rank() == 0 {
				mu.Lock()
				got = append(got, report{loss, pe.LR(), pe.LossScale(), pe.GradNorm()})
				mu.Unlock()
			}
		}
		if evals[c.Rank()][1], err = tr.EvalBatch(ctx, evalData); err != nil {
			return err
		}
		if c.Rank() == 0 {
			prof = pe.FlopsProfile()
			return pe.CommsSummary(&comms) // deepgo_run.json: the engine's own
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, got, steps)
	// flops_profiler at profile_step 1 (the second batch), on rank 0: stage
	// 0's modules, each timed, and DeepSpeed's report in the log
	require.NotNil(t, prof, "rank 0's flops_profiler report")
	assert.Equal(t, 2, prof.Step, "the second batch's profile is step 2's, as DeepSpeed numbers it")
	assert.Equal(t, pp*dp, prof.World)
	assert.Equal(t, dp, prof.DataParallel)
	var names []string
	for _, n := range prof.Root.Children {
		names = append(names, n.Name)
		assert.True(t, n.Measured, "module %s timed", n.Name)
		assert.Positive(t, n.Latency, n.Name)
	}
	assert.Equal(t, []string{"transformer.embed", "transformer.h.0"}, names, "stage 0: the embedding and the first block")
	assert.Contains(t, log.String(), "Profile Summary at step 2:")
	assert.Contains(t, strings.Join(prof.Notes, "\n"), "pipeline stage 0 of 2")
	for _, op := range []string{"send", "recv", "reduce_scatter_tensor", "all_gather_into_tensor"} {
		assert.Contains(t, comms.String(), "\n"+op+"\n", "comms_logger: stage 0's transfers, its ZeRO-1 reductions, the agreements")
	}
	assert.Equal(t, steps, strings.Count(log.String(), "time (ms) | fwd:"), "a wall_clock_breakdown line per step (steps_per_print 1)")
	// DeepSpeed's progress lines (steps_per_print 1): step=0 at Initialize,
	// then its _take_model_step's and the PipelineEngine's "steps:" line
	var progress []string
	for _, m := range regexp.MustCompile(`(?m)^\[Rank 0\] step=(\d+), skipped=(\d+), lr=\[[^]]+\], mom=\[\(0\.9, 0\.999\)\]$`).FindAllStringSubmatch(log.String(), -1) {
		progress = append(progress, m[1]+"/"+m[2])
	}
	assert.Equal(t, []string{"0/0", "1/1", "2/1", "3/1"}, progress, "step/skipped of the progress lines: the first step overflowed")
	for i, rep := range got {
		assert.Regexp(t, fmt.Sprintf(`(?m)^steps: %d loss: %.4f iter time \(s\): \d+\.\d{3} samples/sec: \d+\.\d{3}$`, i+1, rep.loss), log.String())
	}

	dir := filepath.Join(out, "pipe")
	raw, err := rundir.ReadSeries(filepath.Join(dir, rundir.FileName(rundir.TagLoss)))
	require.NoError(t, err)
	assert.Equal(t, []int64{8, 16, 24}, raw.Steps, "train_loss at step × train_batch_size (2 × 2 × 2), as DeepSpeed's PipelineEngine writes it")
	raw, err = rundir.ReadSeries(filepath.Join(dir, rundir.FileName(rundir.TagLR)))
	require.NoError(t, err)
	assert.Equal(t, []int64{8, 16, 24}, raw.Steps, "lr at step × train_batch_size")
	for r := range evals {
		assert.Equal(t, evals[0], evals[r], "rank %d's evaluations are rank 0's", r)
	}
	raw, err = rundir.ReadSeries(filepath.Join(dir, rundir.FileName(rundir.TagEvalLoss)))
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 24}, raw.Steps, "eval_loss before training and after 3 steps of 8 samples")
	assert.Equal(t, evals[0][:], raw.Values, "eval_loss is what EvalBatch returned")

	events, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	assert.Len(t, events, 1, "one tensorboard event file")

	for _, withInfo := range []bool{true, false} {
		if !withInfo {
			require.NoError(t, os.Remove(filepath.Join(dir, rundir.InfoFile)))
		}
		r, err := rundir.Read(dir)
		require.NoError(t, err)
		if withInfo {
			require.NotNil(t, r.Info, "the engine writes deepgo_run.json")
			assert.Equal(t, pp*dp, r.Info.World)
			assert.Equal(t, int64(3), r.Info.Steps, "rewritten by Close with the steps observed")
			assert.Equal(t, int64(nparams), r.Info.Params, "the whole GPT's parameters")
			assert.True(t, r.Info.HasConfig(), "the resolved config")
		}
		assert.True(t, r.LossAfterStep, "deepgo_run.json: %v", withInfo)
		assert.Equal(t, int64(8), r.TrainBatchSize, "deepgo_run.json: %v", withInfo)
		for tag, want := range map[string]func(report) float64{
			rundir.TagLoss:      func(r report) float64 { return r.loss },
			rundir.TagLR:        func(r report) float64 { return r.lr },
			rundir.TagLossScale: func(r report) float64 { return r.scale },
		} {
			s := r.Get(tag)
			require.NotNil(t, s, tag)
			assert.Equal(t, []int64{1, 2, 3}, s.Steps, tag)
			for i, rep := range got {
				assert.Equal(t, want(rep), s.Values[i], "%s at step %d", tag, i+1)
			}
		}
		require.NotNil(t, r.Get(rundir.TagEvalLoss))
		assert.Equal(t, []int64{0, 3}, r.Get(rundir.TagEvalLoss).Steps, "eval_loss on steps")
		assert.Equal(t, []float64{1, 0, 0}, r.Get(rundir.TagOverflow).Values, "the first step overflowed")
		assert.Equal(t, []float64{1, 1, 1}, r.Get(rundir.TagSkippedSteps).Values)
		assert.Equal(t, []float64{0, got[1].norm, got[2].norm}, r.Get(rundir.TagGradNorm).Values)
		assert.Equal(t, []float64{0, 0, 0}, r.Get(rundir.TagNonfiniteParams).Values, "checked every step")
		assert.Len(t, r.Get(rundir.TagForwardMS).Values, steps, "wall_clock_breakdown's elapsed times")
		for _, v := range r.Get(rundir.TagTokensPerS).Values {
			assert.Positive(t, v, "tokens/s")
		}
	}
}
