package monitor

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// csvSteps reads the step column of a csv_monitor file (headers skipped).
func csvSteps(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	rows, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
	require.NoError(t, err)
	var steps []string
	for _, r := range rows {
		if r[0] != "step" {
			steps = append(steps, r[0])
		}
	}
	return steps
}

// The x values are DeepSpeed's: the Train/Samples tags at global_samples
// (train_loss, logged in backward() before the update, a batch earlier:
// (step-1) × train_batch_size; lr, loss_scale and the elapsed times at step
// × train_batch_size; a pipeline's train_loss beside lr, as DeepSpeed's
// PipelineEngine writes it), deepgo's own tags at the step, in the csv
// files and the tensorboard events alike; deepgo_run.json records the
// batch size and where train_loss goes.
func TestMonitorSamplesX(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string // besides the monitors
		set    int    // SetTrainBatchSize, 0: not called
		pipe   bool   // WithTrainLossAfterStep
		batch  int
		loss   []string
		lr     []string
	}{
		{name: "pipeline", config: `"train_batch_size": 8`, pipe: true, batch: 8,
			loss: []string{"8", "16", "24"}, lr: []string{"8", "16", "24"}},
		{name: "SetTrainBatchSize", config: `"train_micro_batch_size_per_gpu": 4`, set: 16, batch: 16,
			loss: []string{"0", "16", "32"}, lr: []string{"16", "32", "48"}},
		{name: "config train_batch_size", config: `"train_batch_size": 8`, batch: 8,
			loss: []string{"0", "8", "16"}, lr: []string{"8", "16", "24"}},
		{name: "SetTrainBatchSize over the config", config: `"train_batch_size": 8`, set: 32, batch: 32,
			loss: []string{"0", "32", "64"}, lr: []string{"32", "64", "96"}},
		{name: "unknown: one sample per step", config: `"train_micro_batch_size_per_gpu": 4`, batch: 1,
			loss: []string{"0", "1", "2"}, lr: []string{"1", "2", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			cfg := loadConfig(t, fmt.Sprintf(`{%s, "wall_clock_breakdown": true, "fp16": {"enabled": true},
				"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "j"},
				"tensorboard": {"enabled": true, "output_path": %q, "job_name": "j"}}`, tc.config, out, out))
			var opts []Option
			if tc.pipe {
				opts = append(opts, WithTrainLossAfterStep())
			}
			m, err := New(cfg, 0, opts...)
			require.NoError(t, err)
			m.SetTrainBatchSize(tc.set)
			assert.Equal(t, tc.batch, m.TrainBatchSize())
			for s := 1; s <= 3; s++ {
				require.NoError(t, m.Observe(context.Background(), record(s, 1)))
			}
			require.NoError(t, m.WriteRunInfo(RunInfo{World: 1, Steps: 3}))
			require.NoError(t, m.Close())

			dir := filepath.Join(out, "j")
			assert.Equal(t, tc.loss, csvSteps(t, filepath.Join(dir, CSVFileName(TagLoss))), "train_loss")
			for _, tag := range []string{TagLR, TagLossScale, TagForward, TagStepElapsed} {
				assert.Equal(t, tc.lr, csvSteps(t, filepath.Join(dir, CSVFileName(tag))), tag)
			}
			for _, tag := range []string{TagGradNorm, TagStepTime, TagMemoryPeak} {
				assert.Equal(t, []string{"1", "2", "3"}, csvSteps(t, filepath.Join(dir, CSVFileName(tag))), tag)
			}

			b, err := os.ReadFile(filepath.Join(dir, RunInfoFile))
			require.NoError(t, err)
			var info RunInfo
			require.NoError(t, json.Unmarshal(b, &info))
			assert.Equal(t, int64(tc.batch), info.TrainBatchSize, "deepgo_run.json train_batch_size")
			assert.Equal(t, tc.pipe, info.TrainLossAfterStep, "deepgo_run.json train_loss_after_step")

			// tensorboard: each tag at the same x as in its csv file
			files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
			require.Len(t, files, 1)
			got := map[string][]string{}
			for _, ev := range readEvents(t, files[0])[1:] {
				for tag := range ev.scalars {
					got[tag] = append(got[tag], fmt.Sprint(ev.step))
				}
			}
			assert.Equal(t, tc.loss, got[TagLoss], "tensorboard train_loss")
			assert.Equal(t, tc.lr, got[TagLR], "tensorboard lr")
			assert.Equal(t, []string{"1", "2", "3"}, got[TagGradNorm], "tensorboard grad_norm")

			// and rundir reads every series back keyed on steps
			r, err := rundir.Read(dir)
			require.NoError(t, err)
			for _, tag := range []string{TagLoss, TagLR, TagForward, TagGradNorm} {
				assert.Equal(t, []int64{1, 2, 3}, r.Get(tag).Steps, "rundir steps of %s", tag)
			}
		})
	}
}

// Close may come from another goroutine while the training loop observes
// (a process exiting on a signal): every step observed before is in the
// csv and tensorboard files, whole rows only, later steps are dropped, and
// later Observe and Close calls are harmless.
func TestMonitorCloseWhileObserving(t *testing.T) {
	out := t.TempDir()
	cfg := loadConfig(t, fmt.Sprintf(`{"train_batch_size": 2,
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "j"},
		"tensorboard": {"enabled": true, "output_path": %q, "job_name": "j"}}`, out, out))
	m, err := New(cfg, 0)
	require.NoError(t, err)
	const before, during = 100, 200 // more than the queue holds
	for s := 1; s <= before; s++ {
		require.NoError(t, m.Observe(context.Background(), record(s, 1)))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the loop goes on while Close runs
		defer wg.Done()
		for s := before + 1; s <= before+during; s++ {
			assert.NoError(t, m.Observe(context.Background(), record(s, 1)))
		}
	}()
	require.NoError(t, m.Close())
	wg.Wait()
	require.NoError(t, m.Close(), "a second Close")

	dir := filepath.Join(out, "j")
	r, err := rundir.Read(dir) // whole rows: a torn last row would not parse
	require.NoError(t, err)
	n := r.Get(TagGradNorm).Len()
	assert.GreaterOrEqual(t, n, before, "steps written")
	for _, tag := range r.Tags() {
		s := r.Get(tag)
		require.Equal(t, n, s.Len(), "%s: every tag ends at the same step", tag)
		assert.Equal(t, int64(n), s.Steps[n-1], tag)
	}
	loss := csvSteps(t, filepath.Join(dir, CSVFileName(TagLoss)))
	assert.Equal(t, fmt.Sprint(2*(before-1)), loss[before-1], "train_loss of step 100 at global_samples 198")
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	require.Len(t, files, 1)
	// the version, then three per step: train_loss at (step-1)×2, the other
	// Train/Samples tags at step×2, deepgo's at the step
	assert.Equal(t, 1+3*n, len(readEvents(t, files[0])), "tensorboard records")
}

// A run directory holding a run at another train_batch_size (or a pipeline
// run's train_loss placement) refuses the next run's deepgo_run.json, naming
// both, instead of mixing x values no reader can key on steps; the same
// batch resumes.
func TestRunInfoRefusesAnotherBatch(t *testing.T) {
	out := t.TempDir()
	start := func(batch int, opts ...Option) error {
		cfg := loadConfig(t, fmt.Sprintf(`{"train_batch_size": %d, "csv_monitor": {"enabled": true, "output_path": %q, "job_name": "j"}}`, batch, out))
		m, err := New(cfg, 0, opts...)
		require.NoError(t, err)
		defer m.Close()
		return m.WriteRunInfo(RunInfo{World: 1})
	}
	require.NoError(t, start(16))
	require.NoError(t, start(16), "the same batch resumes")
	err := start(8)
	assert.ErrorContains(t, err, "holds a run at train_batch_size 16; this run's is 8")
	assert.ErrorContains(t, err, "another job_name")
	err = start(16, WithTrainLossAfterStep())
	assert.ErrorContains(t, err, "this run's is 16 (a pipeline run: train_loss after the step)")
	b, err := os.ReadFile(filepath.Join(out, "j", RunInfoFile))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"train_batch_size": 16`, "the refused runs wrote nothing")
}
