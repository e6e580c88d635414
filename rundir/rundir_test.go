package rundir_test

import (
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
		{name: "bad step", text: "step,train_loss\n0,2\n", err: `line 2: step "0": want an integer >= 1`},
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
