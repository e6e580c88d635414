package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `deepgo train` reads megatron_sequence_parallel: TP 2 with it says so,
// holds less per rank and ends at plain TP 2's final loss (to float32
// summation order).
func TestTrainMegatronSequenceParallel(t *testing.T) {
	dir := t.TempDir()
	plain, _ := trainParallel(t, dir, "tensor_model_parallel_size", 2)
	cfg := filepath.Join(dir, "megatron-sp.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8,
		"tensor_model_parallel_size": 2, "megatron_sequence_parallel": true, "gradient_clipping": 1.0,
		"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}`), 0o644))
	var out, errb bytes.Buffer
	require.Zero(t, run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "40"}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "megatron sequence parallel: the residual stream and LayerNorms split along the sequence")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var r trainResult
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &r), "last line %q", lines[len(lines)-1])
	t.Logf("final loss %v (plain TP 2 %v), peak memory rank 0 %v (plain TP 2 %v)", r.FinalLoss, plain.FinalLoss, r.PeakMemory[0], plain.PeakMemory[0])
	assert.Equal(t, plain.Ranks, r.Ranks)
	assert.Less(t, r.PeakMemory[0], plain.PeakMemory[0], "peak memory per rank")
	assert.LessOrEqual(t, math.Abs(r.FinalLoss-plain.FinalLoss)/plain.FinalLoss, 1e-5, "final loss")
}

// With pipeline_model_parallel_size 2 too, `deepgo train` runs TP 2 +
// Megatron SP × PP 2 × 2 data-parallel ranks (8 in-process ranks, the
// stages exchanging sequence shards), says so, holds less per rank than
// TP 2 × PP 2 and ends at its final loss (to float32 summation order); on
// the simulated device it ends at the CPU's final loss to the last bit.
func TestTrainMegatronSequenceParallelPipeline(t *testing.T) {
	dir := t.TempDir()
	pp := `"pipeline_model_parallel_size": 2,`
	plain, _ := trainParallel(t, dir, "tensor_model_parallel_size", 2, pp)
	seq, out := trainParallel(t, dir, "tensor_model_parallel_size", 2, pp, `"megatron_sequence_parallel": true,`)
	assert.Equal(t, 8, seq.Ranks)
	assert.Contains(t, out, "pipeline: 2 stages x 2 data-parallel ranks")
	assert.Contains(t, out, "megatron sequence parallel: the residual stream and LayerNorms split along the sequence")
	t.Logf("final loss %v (TP 2 x PP 2 %v), peak memory rank 0 %v (TP 2 x PP 2 %v)", seq.FinalLoss, plain.FinalLoss, seq.PeakMemory[0], plain.PeakMemory[0])
	assert.Less(t, seq.PeakMemory[0], plain.PeakMemory[0], "peak memory per rank")
	assert.LessOrEqual(t, math.Abs(seq.FinalLoss-plain.FinalLoss)/plain.FinalLoss, 1e-5, "final loss")
	sim, _ := trainParallelOn(t, "sim", dir, "tensor_model_parallel_size", 2, pp, `"megatron_sequence_parallel": true,`)
	assert.Equal(t, "sim", sim.Device)
	assert.Equal(t, seq.FinalLoss, sim.FinalLoss, "final loss cpu vs sim")
}

// `deepgo train` resumes a TP 2 + Megatron SP × PP 2 run: stopped after
// step 6 and resumed with megatron_sequence_parallel it ends exactly where
// the uninterrupted run ends, and without it (TP 2 × PP 2; the checkpoint
// holds parameters, not the residual stream's layout) to 1e-5 relative.
func TestTrainMegatronSequenceParallelPipelineResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("several training runs")
	}
	layout := `"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "megatron_sequence_parallel": %v,`
	requireResumesAt(t, fmt.Sprintf(layout, true), fmt.Sprintf(layout, false))
}
