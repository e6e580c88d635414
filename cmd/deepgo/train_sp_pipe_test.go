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

// With pipeline_model_parallel_size 2, `deepgo train` runs Ulysses SP 2 ×
// PP 2 × 2 data-parallel ranks (8 in-process ranks: each stage's SP ranks
// on their shards of their data rank's sequences, the stages exchanging
// the shards), says so, holds less per rank than PP 2 alone and ends at
// its final loss (to float32 summation order); on the simulated device it
// ends at the CPU's final loss to the last bit.
func TestTrainUlyssesPipeline(t *testing.T) {
	dir := t.TempDir()
	pp := `"pipeline_model_parallel_size": 2,`
	plain, _ := trainParallel(t, dir, "pipeline_model_parallel_size", 2)
	sp, out := trainParallel(t, dir, "sequence_parallel_size", 2, pp)
	assert.Equal(t, 8, sp.Ranks)
	assert.Contains(t, out, "pipeline: 2 stages x 2 data-parallel ranks")
	assert.Contains(t, out, "sequence parallel (Ulysses): 2 ranks x 2 data-parallel ranks, 8 tokens of each sequence per rank")
	t.Logf("final loss %v (PP 2 %v), peak memory rank 0 %v (PP 2 %v)", sp.FinalLoss, plain.FinalLoss, sp.PeakMemory[0], plain.PeakMemory[0])
	assert.Less(t, sp.PeakMemory[0], plain.PeakMemory[0], "peak memory per rank")
	assert.LessOrEqual(t, math.Abs(sp.FinalLoss-plain.FinalLoss)/plain.FinalLoss, 1e-5, "final loss")
	sim, _ := trainParallelOn(t, "sim", dir, "sequence_parallel_size", 2, pp)
	assert.Equal(t, "sim", sim.Device)
	assert.Equal(t, sp.FinalLoss, sim.FinalLoss, "final loss cpu vs sim")
}

// `deepgo train` resumes a Ulysses SP 2 × PP 2 run: stopped after step 6
// and resumed with sequence_parallel_size 2 it ends exactly where the
// uninterrupted run ends, and without it (PP 2 alone on 2 ranks: the
// checkpoint holds parameters, not the sequence shards) to 1e-5 relative.
func TestTrainUlyssesPipelineResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("several training runs")
	}
	requireResumesAt(t, `"pipeline_model_parallel_size": 2, "sequence_parallel_size": 2,`, `"pipeline_model_parallel_size": 2, "sequence_parallel_size": 1,`)
}

// requireResumesAt trains the small model 12 steps at layouts[0] (config
// keys, each with its trailing comma) and, from the same start, 6 steps
// saving a checkpoint; resumed from it at each layout for the 6 steps
// left, a run must end where the uninterrupted one ends: exactly at
// layouts[0], to 1e-5 relative at the others (float32 summation order).
func requireResumesAt(t *testing.T, layouts ...string) {
	t.Helper()
	dir := t.TempDir()
	conf := func(i int, save, load string) string {
		loadKey := ""
		if load != "" {
			loadKey = fmt.Sprintf(`"load_path": %q, `, load)
		}
		p := filepath.Join(dir, fmt.Sprintf("layout%d-%s.json", i, filepath.Base(save)))
		js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 6, "gradient_clipping": 1.0, %s
			"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
			"checkpoint": {%s"save_dir": %q}}`, layouts[i], loadKey, save)
		require.NoError(t, os.WriteFile(p, []byte(js), 0o644))
		return p
	}
	args := trainerArgs{microBatch: 4, lr: 0.003}
	whole, err := train(conf(0, filepath.Join(dir, "whole"), ""), "", "small", 1, 12, args, io.Discard, io.Discard)
	require.NoError(t, err)
	part := filepath.Join(dir, "part")
	_, err = train(conf(0, part, ""), "", "small", 1, 6, args, io.Discard, io.Discard)
	require.NoError(t, err)
	for i, l := range layouts {
		var out strings.Builder
		resumed, err := train(conf(i, filepath.Join(dir, fmt.Sprint("resumed-", i)), part), "", "small", 1, 12, args, &out, io.Discard)
		require.NoError(t, err, "resuming with %s", l)
		assert.Contains(t, out.String(), "resumed at step 6 from "+part)
		rel := math.Abs(resumed.FinalLoss-whole.FinalLoss) / whole.FinalLoss
		t.Logf("resumed with %s final loss %.17g, uninterrupted %.17g (rel %.3g)", l, resumed.FinalLoss, whole.FinalLoss, rel)
		if i == 0 {
			assert.Equal(t, whole.FinalLoss, resumed.FinalLoss, "resumed at the saving layout")
		}
		assert.LessOrEqual(t, rel, 1e-5, "final loss resumed with %s", l)
	}
}
