package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// demoConfig writes a copy of configs/demo-zero2.json with csv_monitor,
// tensorboard and wall_clock_breakdown on, printing every 10 steps, and
// returns its path and the run directory.
func demoConfig(t *testing.T) (cfgPath, runDir string) {
	t.Helper()
	var c map[string]any
	b, err := os.ReadFile("../../configs/demo-zero2.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &c))
	out := t.TempDir()
	c["steps_per_print"] = 10
	c["wall_clock_breakdown"] = true
	c["csv_monitor"] = map[string]any{"enabled": true, "output_path": out, "job_name": "demo"}
	c["tensorboard"] = map[string]any{"enabled": true, "output_path": out, "job_name": "demo"}
	b, err = json.Marshal(c)
	require.NoError(t, err)
	cfgPath = filepath.Join(t.TempDir(), "demo.json")
	require.NoError(t, os.WriteFile(cfgPath, b, 0o644))
	return cfgPath, filepath.Join(out, "demo")
}

// demoTags are the tags the demo writes every step (an fp32 run: no
// loss_scale, as DeepSpeed writes it only under fp16).
var demoTags = []string{monitor.TagLoss, monitor.TagLR,
	monitor.TagForward, monitor.TagBackward, monitor.TagBackwardInner, monitor.TagBackwardAllreduce, monitor.TagStepElapsed,
	monitor.TagGradNorm, monitor.TagSkippedSteps, monitor.TagOverflow, monitor.TagTokensPerS, monitor.TagStepTime,
	monitor.TagCommTime, monitor.TagOptimizerTime, monitor.TagMemoryHost, monitor.TagMemoryDevice, monitor.TagMemoryPeak, monitor.TagRSS}

// TestTrainMonitorDemo: the demo run with csv_monitor, tensorboard and
// wall_clock_breakdown writes one csv per tag a csv reader parses (header
// "step,<name>", steps 1..30 at DeepSpeed's x values: global_samples for
// the Train/Samples tags, train_loss a batch earlier, the step for
// deepgo's), tensorboard event files tensorboard's reader parses with the
// same tags and x values, DeepSpeed's breakdown line at every step, and
// deepgo_run.json with the train_batch_size the x values count.
func TestTrainMonitorDemo(t *testing.T) {
	cfg, dir := demoConfig(t)
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "30"}, &out, &errb)
	require.Zero(t, code, errb.String())

	var info struct {
		Config    map[string]any `json:"config"`
		World     int            `json:"world"`
		Device    string         `json:"device"`
		Params    int64          `json:"params"`
		Floor     *float64       `json:"entropy_floor"`
		Capacity  int64          `json:"memory_capacity_bytes"`
		Steps     int            `json:"steps"`
		BatchSize int64          `json:"train_batch_size"`
	}
	b, err := os.ReadFile(filepath.Join(dir, monitor.RunInfoFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &info))
	assert.Equal(t, 2, info.World)
	assert.Equal(t, "cpu", info.Device)
	assert.Positive(t, info.Params)
	assert.NotNil(t, info.Floor)
	assert.Positive(t, info.Capacity)
	assert.Equal(t, 30, info.Steps)
	assert.Contains(t, info.Config, "zero_optimization")
	require.Equal(t, int64(16), info.BatchSize, "train_batch_size: micro-batch 8 x accumulation 1 x 2 ranks")

	xs := map[string][]int{} // each tag's x values, steps 1..30
	for _, tag := range demoTags {
		for s := int64(1); s <= 30; s++ {
			xs[tag] = append(xs[tag], int(rundir.XAxis{TrainBatchSize: info.BatchSize}.X(tag, s)))
		}
	}
	assert.Equal(t, 0, xs[monitor.TagLoss][0], "train_loss of step 1 at global_samples 0")
	assert.Equal(t, int(info.BatchSize), xs[monitor.TagLR][0], "lr of step 1 at global_samples train_batch_size")
	assert.NoFileExists(t, filepath.Join(dir, monitor.CSVFileName(monitor.TagLossScale)), "loss_scale without fp16")
	for _, tag := range demoTags {
		f, err := os.Open(filepath.Join(dir, monitor.CSVFileName(tag)))
		require.NoError(t, err, tag)
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		require.NoError(t, err, tag)
		require.Len(t, rows, 31, tag)
		assert.Equal(t, []string{"step", tag[strings.LastIndex(tag, "/")+1:]}, rows[0], tag)
		var got []int
		for _, r := range rows[1:] {
			s, err := strconv.Atoi(r[0])
			require.NoError(t, err)
			got = append(got, s)
			_, err = strconv.ParseFloat(r[1], 64)
			assert.NoError(t, err, "%s step %s value %q", tag, r[0], r[1])
		}
		assert.Equal(t, xs[tag], got, tag)
	}

	line := regexp.MustCompile(`(?m)^\[Rank 0\] time \(ms\) \| fwd: \d+\.\d\d \| bwd: \d+\.\d\d \| bwd_inner: \d+\.\d\d \| bwd_allreduce: \d+\.\d\d \| step: \d+\.\d\d$`)
	assert.Len(t, line.FindAllString(out.String(), -1), 30, "a breakdown line per step, as DeepSpeed's:\n%s", out.String())

	ents, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	require.Len(t, ents, 1)
	if err := exec.Command("python3", "-c", "import tensorboard").Run(); err != nil {
		t.Skip("python3 with the tensorboard package not available (pip install tensorboard); the csv files were checked: ", err)
	}
	script := `import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
print(json.dumps({tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}))`
	o, err := exec.Command("python3", "-c", script, dir).Output()
	require.NoError(t, err)
	var tags map[string][]int
	require.NoError(t, json.Unmarshal(o, &tags))
	for _, tag := range demoTags {
		assert.Equal(t, xs[tag], tags[tag], tag)
	}
}

// lockedBuffer is a Buffer two goroutines may use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTrainMetricsEndpoint: /metrics scraped twice during a run shows
// deepgo_step advancing.
func TestTrainMetricsEndpoint(t *testing.T) {
	cfg, _ := demoConfig(t)
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "2000", "--metrics-addr", ":0"}, &out, &errb)
	}()
	re := regexp.MustCompile(`http://(\S+)/metrics`)
	var addr string
	deadline := time.Now().Add(60 * time.Second)
	for addr == "" && time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NotEmpty(t, addr, "no metrics address in\n%s", out.String())
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:"), addr)
	step := func() float64 {
		resp, err := http.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^deepgo_step (\S+)$`).FindSubmatch(b)
		require.NotNil(t, m, string(b))
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	var first float64
	for first = step(); first == 0 && time.Now().Before(deadline); first = step() {
		time.Sleep(10 * time.Millisecond)
	}
	require.Positive(t, first)
	// scrape again until the step moves: a fixed sleep let a fast machine
	// finish the run (and close the endpoint) before the second scrape
	second := step()
	for second == first && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
		second = step()
	}
	assert.Greater(t, second, first, "deepgo_step advances between scrapes")
	assert.Zero(t, <-done, errb.String())
	t.Logf("deepgo_step %v then %v", first, second)
}

// TestServeTrainMetricsBind: a host-less --metrics-addr stays on the
// loopback; an explicit all-interfaces address is served with a warning.
func TestServeTrainMetricsBind(t *testing.T) {
	cases := []struct {
		addr, wantHost string
		warn           bool
	}{
		{":0", "127.0.0.1", false},
		{"127.0.0.1:0", "127.0.0.1", false},
		{"0.0.0.0:0", "", true},
	}
	for _, c := range cases {
		var out strings.Builder
		s, err := serveTrainMetrics(c.addr, &out)
		require.NoError(t, err, c.addr)
		s.Close()
		require.Contains(t, out.String(), "deepgo: serving Prometheus metrics on http://"+c.wantHost, c.addr)
		require.Equal(t, c.warn, strings.Contains(out.String(), "WARNING: the metrics on"), "%s: %s", c.addr, out.String())
	}
}
