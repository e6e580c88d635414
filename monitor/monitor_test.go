package monitor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func loadConfig(t *testing.T, doc string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	require.NoError(t, err)
	return cfg
}

// record makes step s of a synthetic run whose cumulative timers grow by
// fixed amounts each step; comm grows to commMs per step.
func record(s int, commMs float64) Record {
	d := func(ms float64) time.Duration { return time.Duration(ms * float64(s) * 1e6) }
	return Record{Step: s, Loss: 3 / float64(s), LR: 1e-3, LossScale: 1, Tokens: 256,
		Timers:   Timers{Forward: d(2), Backward: d(3), Comm: d(commMs), Reduce: d(0.5), Optimizer: d(0.25), Step: d(1)},
		StepTime: 10 * time.Millisecond, HostBytes: 1 << 20, PeakBytes: 2 << 20}
}

// TestMonitorRun: the config's csv_monitor, tensorboard and
// wall_clock_breakdown sections give the files, the per-step breakdown
// tags and DeepSpeed's lines every step (as its engine logs its global
// timers at each boundary); the NaN/Inf check runs at its interval.
func TestMonitorRun(t *testing.T) {
	out := t.TempDir()
	cfg := loadConfig(t, fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "steps_per_print": 4, "wall_clock_breakdown": true,
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "j"},
		"tensorboard": {"enabled": true, "output_path": %q, "job_name": "j"},
		"wandb": {"enabled": true}}`, out, out))
	var log bytes.Buffer
	checks := 0
	m, err := New(cfg, 0, WithLog(&log), WithFiniteCheck(5, func(context.Context) (bool, error) { checks++; return false, nil }))
	require.NoError(t, err)
	require.Len(t, m.Notes(), 1)
	assert.Contains(t, m.Notes()[0], "not supported: wandb")
	assert.Equal(t, []string{filepath.Join(out, "j")}, m.RunDirs())
	for s := 1; s <= 10; s++ {
		require.NoError(t, m.Observe(context.Background(), record(s, 1)))
	}
	require.NoError(t, m.WriteRunInfo(RunInfo{World: 2, Device: "cpu", Steps: 10}))
	require.NoError(t, m.Close())
	assert.Equal(t, 2, checks, "checks at steps 5 and 10")

	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	re := regexp.MustCompile(`^\[Rank 0\] time \(ms\) \| fwd: \d+\.\d\d \| bwd: \d+\.\d\d \| bwd_inner: \d+\.\d\d \| bwd_allreduce: \d+\.\d\d \| step: \d+\.\d\d$`)
	var bl []string
	for _, l := range lines {
		if strings.Contains(l, "time (ms)") {
			assert.Regexp(t, re, l)
			bl = append(bl, l)
		}
	}
	want := slices.Repeat([]string{"[Rank 0] time (ms) | fwd: 2.00 | bwd: 4.50 | bwd_inner: 3.00 | bwd_allreduce: 1.50 | step: 1.00"}, 10)
	assert.Equal(t, want, bl, "a line per step (steps_per_print 4 sets only the checks), one step's times each")

	dir := filepath.Join(out, "j")
	b, err := os.ReadFile(filepath.Join(dir, "Train_Samples_elapsed_time_ms_forward.csv"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), "step,elapsed_time_ms_forward\r\n1,2.0\r\n2,2.0\r\n"), string(b))
	b, err = os.ReadFile(filepath.Join(dir, "Train_deepgo_nonfinite_params.csv"))
	require.NoError(t, err)
	assert.Equal(t, "step,nonfinite_params\r\n5,0\r\n10,0\r\n", string(b))
	b, err = os.ReadFile(filepath.Join(dir, "Train_deepgo_tokens_per_s.csv"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "\r\n1,25600.0\r\n")
	assert.FileExists(t, filepath.Join(dir, RunInfoFile))
	ents, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	assert.Len(t, ents, 1)
}

// An engine that times DeepSpeed's phases itself (the pipeline engine)
// hands the step's times in Record.Breakdown and prints its own lines
// (WithoutBreakdownLines): the elapsed_time tags are those times as they
// are, not derived from the cumulative Timers, and the Monitor prints no
// time line (its target warnings still go to the log).
func TestMonitorEngineBreakdown(t *testing.T) {
	out := t.TempDir()
	cfg := loadConfig(t, fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "steps_per_print": 1, "wall_clock_breakdown": true,
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "j"}}`, out))
	var log bytes.Buffer
	m, err := New(cfg, 0, WithLog(&log), WithoutBreakdownLines())
	require.NoError(t, err)
	for s := 1; s <= 2; s++ {
		r := record(s, 5) // 50% communication: a target warning
		ms := func(v float64) time.Duration { return time.Duration(v * float64(s) * 1e6) }
		r.Breakdown = &Breakdown{Forward: ms(7), Backward: ms(11), BackwardInner: ms(8), BackwardAllreduce: ms(2), Step: ms(3)}
		require.NoError(t, m.Observe(context.Background(), r))
	}
	require.NoError(t, m.Close())
	assert.NotContains(t, log.String(), "time (ms)")
	assert.Contains(t, log.String(), "communication share is 50% of step time")
	for file, want := range map[string]string{
		"forward": "1,7.0\r\n2,14.0\r\n", "backward": "1,11.0\r\n2,22.0\r\n", "backward_inner": "1,8.0\r\n2,16.0\r\n",
		"backward_allreduce": "1,2.0\r\n2,4.0\r\n", "step": "1,3.0\r\n2,6.0\r\n",
	} {
		b, err := os.ReadFile(filepath.Join(out, "j", "Train_Samples_elapsed_time_ms_"+file+".csv"))
		require.NoError(t, err)
		assert.True(t, strings.HasSuffix(string(b), want), "%s: %q", file, b)
	}
}

// Without wall_clock_breakdown there are no elapsed_time tags and no
// lines; a rank other than 0 writes nothing but still runs the check.
func TestMonitorQuietAndOtherRanks(t *testing.T) {
	out := t.TempDir()
	cfg := loadConfig(t, fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "j"}}`, out))
	var log bytes.Buffer
	m, err := New(cfg, 0, WithLog(&log))
	require.NoError(t, err)
	require.NoError(t, m.Observe(context.Background(), record(1, 0)))
	require.NoError(t, m.Close())
	assert.NoFileExists(t, filepath.Join(out, "j", "Train_Samples_elapsed_time_ms_forward.csv"))
	assert.FileExists(t, filepath.Join(out, "j", "Train_Samples_train_loss.csv"))
	assert.NotContains(t, log.String(), "time (ms)")

	out1 := t.TempDir()
	cfg = loadConfig(t, fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "wall_clock_breakdown": true,
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "j"}}`, out1))
	checks := 0
	m, err = New(cfg, 1, WithLog(&log), WithFiniteCheck(0, func(context.Context) (bool, error) { checks++; return true, nil }))
	require.NoError(t, err)
	for s := 1; s <= DefaultFiniteCheckEvery; s++ {
		require.NoError(t, m.Observe(context.Background(), record(s, 0)))
	}
	require.NoError(t, m.Close())
	assert.Equal(t, 1, checks, "the default interval is the document's 500")
	ents, _ := os.ReadDir(out1)
	assert.Empty(t, ents, "rank 1 writes nothing")
	assert.Empty(t, m.Warnings())
}

// The §6 targets warn at prints, once per crossing: communication 3 ms of
// a 10 ms step (30%) is over 25%, then 1 ms recovers, then over again; an
// update of 6 ms is over 5 ms; a non-finite parameter is named.
func TestMonitorTargets(t *testing.T) {
	cfg := loadConfig(t, `{"train_micro_batch_size_per_gpu": 1, "steps_per_print": 2}`)
	var log bytes.Buffer
	bad := false
	m, err := New(cfg, 0, WithLog(&log), WithMemoryCapacity(1), WithFiniteCheck(3, func(context.Context) (bool, error) { return bad, nil }))
	require.NoError(t, err)
	var cum Timers
	step := func(s int, commMs, stepMs float64) {
		cum.Comm += time.Duration(commMs * 1e6)
		cum.Step += time.Duration(stepMs * 1e6)
		require.NoError(t, m.Observe(context.Background(), Record{Step: s, Timers: cum, StepTime: 10 * time.Millisecond}))
	}
	step(1, 3, 1)
	step(2, 3, 1) // print: comm 30% -> warn; memory (RSS over 1 byte) -> warn
	step(3, 3, 1) // finite check: fine
	step(4, 3, 1) // still over: quiet
	step(5, 1, 6)
	bad = true
	step(6, 1, 6) // print: comm 10% recovers; update 6 ms -> warn; finite check -> warn
	step(7, 3, 1)
	step(8, 3, 1) // comm over again -> warn; update recovers
	w := m.Warnings()
	require.Len(t, w, 5, "%q", w)
	assert.Contains(t, w[0], "step 2: memory in use is")
	assert.Contains(t, w[1], "step 2: communication share is 30% of step time, at or above deepgo's health target 25% of step time (monitor.CommTargetPct)")
	assert.Contains(t, w[2], "step 6: non-finite parameters")
	assert.Contains(t, w[3], "step 6: parameter update (boundary step) time is 6 ms, at or above deepgo's health target 5 ms (monitor.UpdateTargetMs)")
	assert.Contains(t, w[4], "step 8: communication share is 30%")
	assert.Equal(t, 5, strings.Count(log.String(), "warning: "))
}

// ObserveEval writes eval_loss at the global_samples of the steps done
// before the evaluation (0 before the first step), to csv_monitor,
// tensorboard and /metrics, on rank 0 only; the run directory reads it
// back keyed on those steps.
func TestObserveEval(t *testing.T) {
	out := t.TempDir()
	cfg := loadConfig(t, fmt.Sprintf(`{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "j"},
		"tensorboard": {"enabled": true, "output_path": %q, "job_name": "j"}}`, out, out))
	srv, err := ServeMetrics(":0")
	require.NoError(t, err)
	defer srv.Close()
	m, err := New(cfg, 0, WithWriter(srv))
	require.NoError(t, err)
	other, err := New(loadConfig(t, fmt.Sprintf(`{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "k"}}`, out)), 1)
	require.NoError(t, err)
	require.NoError(t, m.ObserveEval(0, 4.5))
	require.NoError(t, other.ObserveEval(0, 4.5))
	for s := 1; s <= 4; s++ {
		require.NoError(t, m.Observe(context.Background(), record(s, 1)))
		if s%2 == 0 {
			require.NoError(t, m.ObserveEval(s, 4-float64(s)/4))
		}
	}
	require.NoError(t, m.Close())
	require.NoError(t, other.Close())
	assert.Equal(t, 3.0, scrape(t, srv.Addr(), "deepgo_eval_loss"), "the last evaluation's")
	assert.Equal(t, 4.0, scrape(t, srv.Addr(), "deepgo_step"))

	b, err := os.ReadFile(filepath.Join(out, "j", "Train_Samples_eval_loss.csv"))
	require.NoError(t, err)
	assert.Equal(t, "step,eval_loss\r\n0,4.5\r\n16,3.5\r\n32,3.0\r\n", string(b))
	_, err = os.Stat(filepath.Join(out, "k"))
	assert.True(t, os.IsNotExist(err), "rank 1 writes nothing: %v", err)
	b, err = os.ReadFile(filepath.Join(out, "j", "Train_Samples_train_loss.csv"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), "step,train_loss\r\n0,3.0\r\n8,1.5\r\n"), "train_loss keeps its rows: %q", b)
	run, err := rundir.Read(filepath.Join(out, "j"))
	require.NoError(t, err)
	require.NotNil(t, run.Get(TagEvalLoss))
	assert.Equal(t, []int64{0, 2, 4}, run.Get(TagEvalLoss).Steps)
	assert.Equal(t, []float64{4.5, 3.5, 3}, run.Get(TagEvalLoss).Values)
}

// Close writes the last deepgo_run.json again with the last step observed
// (what the writer put in it kept), but never lowers the steps a trainer
// recorded itself.
func TestCloseRewritesRunInfoSteps(t *testing.T) {
	for _, c := range []struct{ recorded, observed, want int64 }{{0, 4, 4}, {10, 2, 10}} {
		out := t.TempDir()
		m, err := New(loadConfig(t, fmt.Sprintf(`{"train_batch_size": 2, "csv_monitor": {"enabled": true, "output_path": %q, "job_name": "j"}}`, out)), 0)
		require.NoError(t, err)
		floor := 0.5
		require.NoError(t, m.WriteRunInfo(RunInfo{World: 1, Device: "cpu", EntropyFloor: &floor, Steps: c.recorded}))
		for s := 1; s <= int(c.observed); s++ {
			require.NoError(t, m.Observe(context.Background(), record(s, 1)))
		}
		require.NoError(t, m.Close())
		info, err := rundir.ReadInfo(filepath.Join(out, "j", RunInfoFile))
		require.NoError(t, err)
		assert.Equal(t, c.want, info.Steps, "recorded %d, observed %d", c.recorded, c.observed)
		require.NotNil(t, info.EntropyFloor)
		assert.Equal(t, 0.5, *info.EntropyFloor)
		assert.Equal(t, int64(2), info.TrainBatchSize)
	}
}
