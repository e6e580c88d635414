package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tpCheckpointConfig writes the config of the TP resume tests: the small
// GPT (4 heads, so TP 1, 2 and 4 all split it) at tp and pp pipeline
// stages, a checkpoint into save every 6 steps, resuming from load when
// it is set.
func tpCheckpointConfig(t *testing.T, dir string, tp, pp int, save, load string) string {
	t.Helper()
	loadKey := ""
	if load != "" {
		loadKey = fmt.Sprintf(`"load_path": %q, `, load)
	}
	p := filepath.Join(dir, fmt.Sprintf("tp%d-pp%d-%s.json", tp, pp, filepath.Base(save)))
	js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 6, "gradient_clipping": 1.0,
		"tensor_model_parallel_size": %d, "pipeline_model_parallel_size": %d, "zero_optimization": {"stage": 1},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
		"checkpoint": {%s"save_dir": %q}}`, tp, pp, loadKey, save)
	require.NoError(t, os.WriteFile(p, []byte(js), 0o644))
	return p
}

// `deepgo train` with tensor_model_parallel_size saves its checkpoints and
// resumes from them at another TP degree (the config's): a run at TP 2
// stopped after step 6 and resumed at TP 1, 2 and 4 ends where the
// uninterrupted TP 2 run ends: exactly at TP 2, to 1e-5 relative (float32
// summation order, as TestTrainTensorParallel allows) at the others.
func TestTrainTensorParallelResumesAtOtherDegrees(t *testing.T) {
	if testing.Short() {
		t.Skip("several training runs")
	}
	dir := t.TempDir()
	args := trainerArgs{microBatch: 4, lr: 0.003}
	whole, err := train(tpCheckpointConfig(t, dir, 2, 1, filepath.Join(dir, "whole"), ""), "", "small", 1, 12, args, io.Discard, io.Discard)
	require.NoError(t, err)
	part := filepath.Join(dir, "part")
	_, err = train(tpCheckpointConfig(t, dir, 2, 1, part, ""), "", "small", 1, 6, args, io.Discard, io.Discard)
	require.NoError(t, err)
	for _, tp := range []int{2, 1, 4} {
		var out strings.Builder
		resumed, err := train(tpCheckpointConfig(t, dir, tp, 1, filepath.Join(dir, fmt.Sprint("resumed", tp)), part), "", "small", 1, 12, args, &out, io.Discard)
		require.NoError(t, err, "resuming at TP %d", tp)
		assert.Contains(t, out.String(), "resumed at step 6 from "+part, "TP %d", tp)
		assert.Equal(t, tp, resumed.Ranks, "ranks at TP %d", tp)
		rel := math.Abs(resumed.FinalLoss-whole.FinalLoss) / whole.FinalLoss
		t.Logf("TP 2 → %d: final loss %.9g, uninterrupted %.9g (rel %.3g)", tp, resumed.FinalLoss, whole.FinalLoss, rel)
		if tp == 2 {
			assert.Equal(t, whole.FinalLoss, resumed.FinalLoss, "resumed at the saving degree")
		}
		assert.LessOrEqual(t, rel, 1e-5, "final loss resumed at TP %d", tp)
		_, err = os.Stat(filepath.Join(dir, fmt.Sprint("resumed", tp), "global_step12"))
		assert.NoError(t, err, "the run resumed at TP %d saves", tp)
	}
}

// `deepgo train` with TP × PP (3-D, here with one data-parallel rank)
// saves its checkpoints as TP shards and resumes from them at other
// layouts: a run at TP 2 × PP 2 stopped after step 6 and resumed at TP 2 ×
// PP 2 ends exactly where the uninterrupted run ends, and at TP 1 × PP 2
// and TP 2 without stages (the data-parallel engine) to 1e-5 relative.
func TestTrainTensorPipelineResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("several training runs")
	}
	dir := t.TempDir()
	args := trainerArgs{microBatch: 4, lr: 0.003}
	whole, err := train(tpCheckpointConfig(t, dir, 2, 2, filepath.Join(dir, "whole"), ""), "", "small", 1, 12, args, io.Discard, io.Discard)
	require.NoError(t, err)
	part := filepath.Join(dir, "part")
	_, err = train(tpCheckpointConfig(t, dir, 2, 2, part, ""), "", "small", 1, 6, args, io.Discard, io.Discard)
	require.NoError(t, err)
	for _, l := range []struct{ tp, pp int }{{2, 2}, {1, 2}, {2, 1}} {
		var out strings.Builder
		save := filepath.Join(dir, fmt.Sprintf("resumed-tp%d-pp%d", l.tp, l.pp))
		resumed, err := train(tpCheckpointConfig(t, dir, l.tp, l.pp, save, part), "", "small", 1, 12, args, &out, io.Discard)
		require.NoError(t, err, "resuming at %+v", l)
		assert.Contains(t, out.String(), "resumed at step 6 from "+part, "%+v", l)
		assert.Equal(t, l.tp*l.pp, resumed.Ranks, "ranks at %+v", l)
		rel := math.Abs(resumed.FinalLoss-whole.FinalLoss) / whole.FinalLoss
		t.Logf("TP 2 x PP 2 → TP %d x PP %d: final loss %.9g, uninterrupted %.9g (rel %.3g)", l.tp, l.pp, resumed.FinalLoss, whole.FinalLoss, rel)
		if l.tp == 2 && l.pp == 2 {
			assert.Equal(t, whole.FinalLoss, resumed.FinalLoss, "resumed at the saving layout")
		}
		assert.LessOrEqual(t, rel, 1e-5, "final loss resumed at %+v", l)
		_, err = os.Stat(filepath.Join(save, "global_step12"))
		assert.NoError(t, err, "the run resumed at %+v saves", l)
	}
}
