package main

import (
	"bytes"
	"encoding/json"
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
