package rundir_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/runfixture"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFileNameIsCSVMonitors(t *testing.T) {
	for tag, want := range map[string]string{
		rundir.TagLoss:       "Train_Samples_train_loss.csv",
		rundir.TagMemoryPeak: "Train_deepgo_memory_peak_bytes.csv",
		"my metric/a b":      "my_metric_a_b.csv",
	} {
		assert.Equal(t, want, rundir.FileName(tag), "FileName(%q)", tag)
	}
	assert.Equal(t, "train_loss", rundir.Header(rundir.TagLoss))
	assert.Equal(t, "plain", rundir.Header("plain"))
}

func TestReadSeries(t *testing.T) {
	cases := []struct {
		name, text string
		steps      []int64
		values     []float64
		err        string
	}{
		{name: "python csv", text: "step,train_loss\r\n1,5.5\r\n2,5.25\r\n3,nan\r\n", steps: []int64{1, 2, 3}, values: []float64{5.5, 5.25, 0}},
		{name: "unix lines", text: "step,train_loss\n1,1e-05\n2,inf\n", steps: []int64{1, 2}, values: []float64{1e-5, 0}},
		{name: "resumed job appends a header and replays steps", text: "step,train_loss\n1,4\n2,3\n3,2\nstep,train_loss\n2,30\n3,20\n4,10\n",
			steps: []int64{1, 2, 3, 4}, values: []float64{4, 30, 20, 10}},
		{name: "empty file", text: "", err: `empty: want the header row "step,train_loss"`},
		{name: "no header", text: "1,2\n", err: `line 1: "1,2" before the header row`},
		{name: "global_samples 0", text: "step,train_loss\r\n0,5.5\r\n32,5.25\r\n", steps: []int64{0, 32}, values: []float64{5.5, 5.25}},
		{name: "bad step", text: "step,train_loss\n-1,2\n", err: `line 2: step "-1": want an integer >= 0`},
		{name: "bad value", text: "step,train_loss\n1,2\n2,tensor(3.0)\n", err: `line 3: value "tensor(3.0)": want a number`},
		{name: "three fields", text: "step,train_loss\n1,2,3\n", err: "wrong number of fields"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), rundir.FileName(rundir.TagLoss))
			require.NoError(t, os.WriteFile(path, []byte(c.text), 0o644))
			s, err := rundir.ReadSeries(path)
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				assert.Contains(t, err.Error(), path, "the error names the file")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, rundir.TagLoss, s.Tag)
			assert.Equal(t, c.steps, s.Steps)
			for i, want := range c.values {
				if want != 0 {
					assert.Equal(t, want, s.Values[i], "value at step %d", s.Steps[i])
				}
			}
		})
	}
}

func TestSeriesQueries(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.csv")
	require.NoError(t, os.WriteFile(path, []byte("step,x\n1,3\n2,nan\n5,7\n9,-1\n"), 0o644))
	s, err := rundir.ReadSeries(path)
	require.NoError(t, err)
	assert.Equal(t, "x", s.Tag, "an unknown file keeps its stem as the tag")
	v, step, ok := s.Max()
	assert.True(t, ok)
	assert.Equal(t, 7.0, v)
	assert.Equal(t, int64(5), step)
	v, step, _ = s.Last()
	assert.Equal(t, -1.0, v)
	assert.Equal(t, int64(9), step)
	v, ok = s.At(5)
	assert.True(t, ok)
	assert.Equal(t, 7.0, v)
	_, ok = s.At(4)
	assert.False(t, ok)
}

func TestReadCraftedRun(t *testing.T) {
	dir, err := runfixture.Write(t.TempDir(), runfixture.Healthy())
	require.NoError(t, err)
	r, err := rundir.Read(dir)
	require.NoError(t, err)
	require.NotNil(t, r.Info)
	assert.Equal(t, runfixture.World, r.Info.World)
	assert.Equal(t, int64(runfixture.Params), r.Info.Params)
	require.NotNil(t, r.Info.EntropyFloor)
	assert.False(t, r.Info.OnCPU())
	loss := r.Get(rundir.TagLoss)
	require.NotNil(t, loss)
	assert.Equal(t, runfixture.Steps, loss.Len())
	assert.Contains(t, r.Tags(), rundir.TagMemoryPeak)
	assert.Nil(t, r.Get("Train/Samples/nothing"))
}

func TestReadErrorsNameTheFile(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{name: "empty dir", want: []string{"not a run directory", "deepgo_run.json", "Train_Samples_train_loss.csv"}},
		{name: "only other files", files: map[string]string{"notes.txt": "hi"}, want: []string{"not a run directory"}},
		{name: "bad json", files: map[string]string{"deepgo_run.json": `{"world": "four"}`}, want: []string{"deepgo_run.json", "world"}},
		{name: "negative world", files: map[string]string{"deepgo_run.json": `{"world": -1}`}, want: []string{"deepgo_run.json", "world -1: want >= 0"}},
		{name: "bad csv", files: map[string]string{"deepgo_run.json": `{"world": 1}`, "Train_Samples_lr.csv": "step,lr\n1,x\n"}, want: []string{"Train_Samples_lr.csv", "line 2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, text := range c.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte(text), 0o644))
			}
			_, err := rundir.Read(dir)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.True(t, strings.Contains(err.Error(), dir), "error %q names the directory or file", err)
		})
	}
	_, err := rundir.Read(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing")
}

// XAxis.Step inverts X, DeepSpeed's x values: train_loss at (step-1)×batch
// (at step×batch for a pipeline, LossAfterStep), the other Train/Samples
// tags at step×batch, deepgo's own tags at the step.
func TestXAxis(t *testing.T) {
	cases := []struct {
		tag         string
		step, batch int64
		pipe        bool
		x           int64
	}{
		{tag: rundir.TagLoss, step: 1, batch: 32, x: 0},
		{tag: rundir.TagLoss, step: 3, batch: 32, x: 64},
		{tag: rundir.TagLoss, step: 1, batch: 32, pipe: true, x: 32},
		{tag: rundir.TagLoss, step: 3, batch: 32, pipe: true, x: 96},
		{tag: rundir.TagLR, step: 3, batch: 32, pipe: true, x: 96},
		{tag: rundir.TagGradNorm, step: 3, batch: 32, pipe: true, x: 3},
		{tag: rundir.TagLR, step: 1, batch: 32, x: 32},
		{tag: rundir.TagLossScale, step: 3, batch: 32, x: 96},
		{tag: rundir.TagStepMS, step: 2, batch: 8, x: 16},
		{tag: rundir.TagLR, step: 5, batch: 1, x: 5},
		{tag: rundir.TagGradNorm, step: 7, batch: 32, x: 7},
		{tag: rundir.TagGPUPower, step: 7, batch: 32, x: 7},
		// an evaluation after step S is at S's samples, before training at 0
		{tag: rundir.TagEvalLoss, step: 0, batch: 32, x: 0},
		{tag: rundir.TagEvalLoss, step: 3, batch: 32, x: 96},
		{tag: rundir.TagEvalLoss, step: 3, batch: 32, pipe: true, x: 96},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%d/pipe=%v", c.tag, c.step, c.pipe), func(t *testing.T) {
			a := rundir.XAxis{TrainBatchSize: c.batch, LossAfterStep: c.pipe}
			assert.Equal(t, c.x, a.X(c.tag, c.step))
			step, err := a.Step(c.tag, c.x)
			require.NoError(t, err)
			assert.Equal(t, c.step, step)
		})
	}
	for _, c := range []struct {
		tag      string
		x, batch int64
		pipe     bool
		err      string
	}{
		{tag: rundir.TagLR, x: 40, batch: 32, err: "step 40: not a multiple of train_batch_size 32"},
		{tag: rundir.TagLR, x: 0, batch: 32, err: "before the first step"},
		{tag: rundir.TagLoss, x: 0, batch: 32, pipe: true, err: "before the first step"},
		{tag: rundir.TagLoss, x: 0, batch: 0, err: "train_batch_size 0: want >= 1"},
		{tag: rundir.TagEvalLoss, x: -32, batch: 32, err: "before the first step"},
	} {
		_, err := rundir.XAxis{TrainBatchSize: c.batch, LossAfterStep: c.pipe}.Step(c.tag, c.x)
		assert.ErrorContains(t, err, c.err, "%s at %d", c.tag, c.x)
	}
}

// Read keys every series on optimizer steps, whoever wrote the directory:
// deepgo (global_samples, train_batch_size in deepgo_run.json), DeepSpeed
// (global_samples, no deepgo_run.json: the batch is the values' greatest
// common divisor, here too after a resume that replayed steps), or a deepgo
// from before global_samples (steps, no train_batch_size); pipeline runs
// write train_loss beside lr, one batch later (deepgo says so in
// deepgo_run.json; for DeepSpeed's the two series' first x values tell).
func TestReadKeysOnSteps(t *testing.T) {
	steps := []int64{1, 2, 3, 4}
	cases := []struct {
		name  string
		info  string            // deepgo_run.json; "" for none
		files map[string]string // file name -> content
		batch int64
		pipe  bool
		err   string
	}{
		{name: "deepgo pipeline", info: `{"world": 2, "train_batch_size": 16, "train_loss_after_step": true}`, batch: 16, pipe: true, files: map[string]string{
			"Train_Samples_train_loss.csv": "step,train_loss\r\n16,4\r\n32,3\r\n48,2\r\n64,1\r\n",
			"Train_Samples_lr.csv":         "step,lr\r\n16,0.1\r\n32,0.1\r\n48,0.1\r\n64,0.1\r\n",
		}},
		{name: "DeepSpeed pipeline, resumed from step 3", batch: 8, pipe: true, files: map[string]string{
			"Train_Samples_train_loss.csv": "step,train_loss\r\n8,4\r\n16,3\r\n24,9\r\nstep,train_loss\r\n24,2\r\n32,1\r\n",
			"Train_Samples_lr.csv":         "step,lr\r\n8,0.1\r\n16,0.1\r\n24,0.1\r\nstep,lr\r\n24,0.1\r\n32,0.1\r\n",
		}},
		{name: "deepgo", info: `{"world": 2, "train_batch_size": 16}`, batch: 16, files: map[string]string{
			"Train_Samples_train_loss.csv": "step,train_loss\r\n0,4\r\n16,3\r\n32,2\r\n48,1\r\n",
			"Train_Samples_lr.csv":         "step,lr\r\n16,0.1\r\n32,0.1\r\n48,0.1\r\n64,0.1\r\n",
			"Train_deepgo_grad_norm.csv":   "step,grad_norm\r\n1,1\r\n2,1\r\n3,1\r\n4,1\r\n",
		}},
		{name: "DeepSpeed", batch: 24, files: map[string]string{
			"Train_Samples_train_loss.csv": "step,train_loss\r\n0,4\r\n24,3\r\n48,2\r\n72,1\r\n",
			"Train_Samples_lr.csv":         "step,lr\r\n24,0.1\r\n48,0.1\r\n72,0.1\r\n96,0.1\r\n",
		}},
		{name: "DeepSpeed, resumed from step 2", batch: 24, files: map[string]string{
			"Train_Samples_train_loss.csv": "step,train_loss\r\n0,4\r\n24,3\r\n48,9\r\nstep,train_loss\r\n48,2\r\n72,1\r\n",
			"Train_Samples_lr.csv":         "step,lr\r\n24,0.1\r\n48,0.1\r\n72,0.1\r\nstep,lr\r\n72,0.1\r\n96,0.1\r\n",
		}},
		{name: "deepgo before global_samples", info: `{"world": 2}`, batch: 0, files: map[string]string{
			"Train_Samples_train_loss.csv": "step,train_loss\r\n1,4\r\n2,3\r\n3,2\r\n4,1\r\n",
			"Train_Samples_lr.csv":         "step,lr\r\n1,0.1\r\n2,0.1\r\n3,0.1\r\n4,0.1\r\n",
			"Train_deepgo_grad_norm.csv":   "step,grad_norm\r\n1,1\r\n2,1\r\n3,1\r\n4,1\r\n",
		}},
		{name: "not a multiple of train_batch_size", info: `{"world": 2, "train_batch_size": 16}`, files: map[string]string{
			"Train_Samples_lr.csv": "step,lr\r\n16,0.1\r\n20,0.1\r\n",
		}, err: "Train_Samples_lr.csv: step 20: not a multiple of train_batch_size 16"},
		{name: "negative train_batch_size", info: `{"world": 2, "train_batch_size": -4}`, err: "train_batch_size -4: want >= 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.info != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, rundir.InfoFile), []byte(c.info), 0o644))
			}
			for n, text := range c.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte(text), 0o644))
			}
			r, err := rundir.Read(dir)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.batch, r.TrainBatchSize)
			assert.Equal(t, c.pipe, r.LossAfterStep)
			for _, tag := range r.Tags() {
				assert.Equal(t, steps, r.Get(tag).Steps, tag)
			}
			loss := r.Get(rundir.TagLoss)
			assert.Equal(t, []float64{4, 3, 2, 1}, loss.Values, "train_loss by step")
		})
	}
}

// The crafted runs (DeepSpeed's layout, as deepgo writes it) read back at
// steps 1..Steps in every series, with or without deepgo_run.json.
func TestReadCraftedRunSteps(t *testing.T) {
	for _, withInfo := range []bool{true, false} {
		fx := runfixture.Healthy()
		if !withInfo {
			fx.Info = nil
		}
		dir, err := runfixture.Write(t.TempDir(), fx)
		require.NoError(t, err)
		raw, err := rundir.ReadSeries(filepath.Join(dir, rundir.FileName(rundir.TagLR)))
		require.NoError(t, err)
		assert.Equal(t, int64(runfixture.TrainBatchSize), raw.Steps[0], "the file holds global_samples")
		r, err := rundir.Read(dir)
		require.NoError(t, err)
		assert.Equal(t, int64(runfixture.TrainBatchSize), r.TrainBatchSize, "with deepgo_run.json: %v", withInfo)
		for _, tag := range r.Tags() {
			s := r.Get(tag)
			require.Equal(t, runfixture.Steps, s.Len(), tag)
			assert.Equal(t, int64(1), s.Steps[0], tag)
			assert.Equal(t, int64(runfixture.Steps), s.Steps[s.Len()-1], tag)
		}
	}
}
