package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/runfixture"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeRun(t *testing.T, run runfixture.Run) string {
	t.Helper()
	dir, err := runfixture.Write(filepath.Join(t.TempDir(), "job"), run)
	require.NoError(t, err)
	return dir
}

func TestDoctorCommand(t *testing.T) {
	cases := []struct {
		name string
		run  runfixture.Run
		code int
		want []string
	}{
		{name: "healthy", run: runfixture.Healthy(), code: 0, want: []string{"config: deepgo_run.json", "memory: peak 48.5 GiB (Train/GPU/memory_used_bytes) = 60.6% of 80.0 GiB", "no findings"}},
		{name: "near OOM", run: runfixture.NearOOM(), code: doctorFindings, want: []string{"finding 1 [memory]: out-of-memory risk", "measured: peak memory 76.5 GiB", "try: zero_optimization.stage 1 -> 3"}},
		{name: "communication-bound", run: runfixture.CommBound(), code: doctorFindings, want: []string{"finding 1 [communication]", "46.9%", "try: zero_optimization.overlap_comm false -> true"}},
		{name: "overflow storm", run: runfixture.OverflowStorm(), code: doctorFindings, want: []string{"finding 1 [overflow]", "min_loss_scale 1 at step 39"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeRun(t, c.run)
			var out, errb bytes.Buffer
			code := run([]string{"doctor", dir}, &out, &errb)
			assert.Equal(t, c.code, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			for _, w := range c.want {
				assert.Contains(t, out.String(), w)
			}
			if c.code == 0 {
				assert.NotContains(t, out.String(), "finding 1")
			} else {
				assert.NotContains(t, out.String(), "finding 2", "one finding per crafted run")
			}
		})
	}
}

func TestDoctorConfigFlag(t *testing.T) {
	// a recorded stage-1 run diagnosed against a --config naming stage 3:
	// no stage advice is left to give, and the flag may follow the directory
	dir := writeRun(t, runfixture.NearOOM())
	cfg := filepath.Join(t.TempDir(), "ds.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true}, "zero_optimization": {"stage": 3}}`), 0o644))
	var out, errb bytes.Buffer
	code := run([]string{"doctor", dir, "--config", cfg}, &out, &errb)
	assert.Equal(t, doctorFindings, code, errb.String())
	assert.Contains(t, out.String(), "config: "+cfg)
	assert.NotContains(t, out.String(), "zero_optimization.stage 3 ->")
	assert.Contains(t, out.String(), "estimate_zero3_model_states_mem_needs")
}

func TestDoctorErrors(t *testing.T) {
	empty := t.TempDir()
	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, "Train_Samples_train_loss.csv"), []byte("step,train_loss\n1,oops\n"), 0o644))
	badCfg := writeRun(t, runfixture.Healthy())
	require.NoError(t, os.WriteFile(filepath.Join(badCfg, "deepgo_run.json"), []byte(`{"config": {"zero_optimization": {"stage": 9}}}`), 0o644))
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{name: "no dir", args: []string{"doctor"}, code: 2, want: "usage:"},
		{name: "empty dir", args: []string{"doctor", empty}, code: 1, want: "not a run directory"},
		{name: "malformed csv", args: []string{"doctor", bad}, code: 1, want: "Train_Samples_train_loss.csv: line 2: value \"oops\""},
		{name: "bad recorded config", args: []string{"doctor", badCfg}, code: 1, want: "deepgo_run.json: config:"},
		{name: "missing --config", args: []string{"doctor", badCfg, "--config", filepath.Join(empty, "nope.json")}, code: 1, want: "--config"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			assert.Equal(t, c.code, run(c.args, &out, &errb))
			assert.Contains(t, errb.String(), c.want)
		})
	}
}

// TestDoctorNothingMeasured: a run without csv_monitor series (tensorboard
// files only) is not called healthy: doctor says nothing was measured and
// exits doctorNothingMeasured, or doctorFindings when the config alone
// gives a finding.
func TestDoctorNothingMeasured(t *testing.T) {
	noSeries := runfixture.Healthy()
	noSeries.Values = nil
	pipelined := runfixture.Healthy()
	pipelined.Values = nil
	pipelined.Info.Config = []byte(`{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4, "pipeline_model_parallel_size": 4}`)
	for _, tc := range []struct {
		name        string
		run         runfixture.Run
		tensorboard bool
		code        int
		want        []string
	}{
		{name: "an empty tensorboard file", run: noSeries, tensorboard: true, code: doctorNothingMeasured,
			want: []string{"memory: not measured", "nothing measured: doctor reads csv_monitor and tensorboard files", "its 1 tensorboard event file(s) hold none of them (empty"}},
		{name: "no series", run: noSeries, code: doctorNothingMeasured, want: []string{"nothing measured:"}},
		{name: "no series, bubble finding", run: pipelined, code: doctorFindings, want: []string{"nothing measured:", "finding 1 [bubble]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRun(t, tc.run)
			if tc.tensorboard {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "events.out.tfevents.1700000000.host.1.0"), []byte{0}, 0o644))
			}
			var out, errb bytes.Buffer
			assert.Equal(t, tc.code, run([]string{"doctor", dir}, &out, &errb), "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			for _, w := range tc.want {
				assert.Contains(t, out.String(), w)
			}
			assert.NotContains(t, out.String(), "no findings")
		})
	}
}

// A run with tensorboard alone, in DeepSpeed's layout (event files torch's SummaryWriter
// wrote, package rundir's fixture): doctor measures its loss and plot draws
// loss, lr and loss scale.
func TestDoctorPlotTensorboardOnly(t *testing.T) {
	dir := filepath.Join("..", "..", "rundir", "testdata", "tensorboard-deepspeed")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"doctor", dir}, &out, &errb), "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	assert.Contains(t, out.String(), "spikes: 0 loss spikes in 4 steps")
	assert.Contains(t, out.String(), "no findings")

	plots := t.TempDir()
	out.Reset()
	require.Equal(t, 0, run([]string{"plot", "--out", plots, dir}, &out, &errb), errb.String())
	for _, name := range []string{"loss.png", "lr.png", "loss_scale.png"} {
		assert.FileExists(t, filepath.Join(plots, name))
	}
}
