package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `deepgo train` runs Ulysses SP 2 inside TP 2 × 2 data-parallel ranks (8
// in-process ranks on deepgo.TensorSequenceParallelGroups' grid), says
// both, and holds less per rank than TP 2 alone. The tiny model has 2
// heads, which TP 2 × SP 2 cannot split (each rank needs one): train
// gives it 4 of half the width (its note says so), the model TP 1 × SP 4
// trains too, and it ends at that run's final loss to float32 summation
// order (1e-5 relative, as the TP and SP runs); on the simulated device it
// ends at the CPU's final loss to the last bit. The small model (4 heads)
// is the same model at every layout and ends at TP 1 × SP 1's final loss
// (1e-5). Ulysses with megatron_sequence_parallel is refused before any
// rank starts, naming both keys.
func TestTrainTensorSequenceParallel(t *testing.T) {
	dir := t.TempDir()
	tp := `"tensor_model_parallel_size": 2,`
	tpOnly, _ := trainParallel(t, dir, "sequence_parallel_size", 1, tp)
	sp4, _ := trainParallel(t, dir, "sequence_parallel_size", 4)
	r, out := trainParallel(t, dir, "sequence_parallel_size", 2, tp)
	assert.Equal(t, 8, r.Ranks)
	assert.Contains(t, out, "tensor parallel: 2 ranks x 2 data-parallel ranks")
	assert.Contains(t, out, "sequence parallel (Ulysses): 2 ranks x 2 data-parallel ranks, 8 tokens of each sequence per rank")
	rel := math.Abs(r.FinalLoss-sp4.FinalLoss) / sp4.FinalLoss
	t.Logf("tiny: final loss TP 2 x SP 2 %.17g, TP 1 x SP 4 %.17g (rel %.3g); peak memory rank 0 %d (TP 2 alone %d)", r.FinalLoss, sp4.FinalLoss, rel, r.PeakMemory[0], tpOnly.PeakMemory[0])
	assert.LessOrEqual(t, rel, 1e-5, "tiny: final loss TP 2 x SP 2 vs TP 1 x SP 4")
	assert.Less(t, r.PeakMemory[0], tpOnly.PeakMemory[0], "peak memory per rank vs TP 2 alone")
	sim, _ := trainParallelOn(t, "sim", dir, "sequence_parallel_size", 2, tp)
	assert.Equal(t, "sim", sim.Device)
	assert.Equal(t, r.FinalLoss, sim.FinalLoss, "final loss cpu vs sim")

	small, _ := trainParallelModel(t, "cpu", "small", dir, "sequence_parallel_size", 2, tp)
	plain, _ := trainParallelModel(t, "cpu", "small", dir, "sequence_parallel_size", 1)
	rel = math.Abs(small.FinalLoss-plain.FinalLoss) / plain.FinalLoss
	t.Logf("small: final loss TP 2 x SP 2 %.17g, TP 1 x SP 1 %.17g (rel %.3g)", small.FinalLoss, plain.FinalLoss, rel)
	assert.LessOrEqual(t, rel, 1e-5, "small: final loss TP 2 x SP 2 vs TP 1 x SP 1")

	cfg := filepath.Join(dir, "msp.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 8, "tensor_model_parallel_size": 2,
		"sequence_parallel_size": 2, "megatron_sequence_parallel": true, "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}`), 0o644))
	var o, errb bytes.Buffer
	assert.NotZero(t, run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "2"}, &o, &errb))
	assert.Contains(t, errb.String(), "sequence_parallel_size 2 (Ulysses) with megatron_sequence_parallel (tensor_model_parallel_size 2): not supported")
}

// `deepgo train` resumes a TP 2 × SP 2 run: stopped after step 6 and
// resumed at TP 2 × SP 2 it ends exactly where the uninterrupted run
// ends, and at TP 1 × SP 1, TP 2 alone and SP 2 alone (the checkpoint
// holds TP shards, not sequence shards) to 1e-5 relative.
func TestTrainTensorSequenceParallelResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("several training runs")
	}
	requireResumesAt(t, `"tensor_model_parallel_size": 2, "sequence_parallel_size": 2,`,
		`"tensor_model_parallel_size": 1, "sequence_parallel_size": 1,`,
		`"tensor_model_parallel_size": 2, "sequence_parallel_size": 1,`,
		`"tensor_model_parallel_size": 1, "sequence_parallel_size": 2,`)
}

// With pipeline_model_parallel_size 2 too, `deepgo train` runs TP 2 × SP
// 2 × PP 2 × 2 data-parallel ranks (16 in-process ranks on
// deepgo.PipeTensorSequenceParallelGroups' grid) and ends at SP 4 × PP 2's
// final loss (the same 4-head model without TP) to float32 summation
// order; on the simulated device it ends at the CPU's final loss to the
// last bit.
func TestTrainTensorUlyssesPipeline(t *testing.T) {
	dir := t.TempDir()
	pp := `"pipeline_model_parallel_size": 2,`
	ref, _ := trainParallel(t, dir, "sequence_parallel_size", 4, pp)
	r, out := trainParallel(t, dir, "sequence_parallel_size", 2, pp+` "tensor_model_parallel_size": 2,`)
	assert.Equal(t, 16, r.Ranks)
	assert.Contains(t, out, "pipeline: 2 stages x 2 data-parallel ranks")
	assert.Contains(t, out, "tensor parallel: 2 ranks x 2 data-parallel ranks")
	assert.Contains(t, out, "sequence parallel (Ulysses): 2 ranks x 2 data-parallel ranks, 8 tokens of each sequence per rank")
	rel := math.Abs(r.FinalLoss-ref.FinalLoss) / ref.FinalLoss
	t.Logf("final loss TP 2 x SP 2 x PP 2 %.17g, SP 4 x PP 2 %.17g (rel %.3g)", r.FinalLoss, ref.FinalLoss, rel)
	assert.LessOrEqual(t, rel, 1e-5, "final loss")
	sim, _ := trainParallelOn(t, "sim", dir, "sequence_parallel_size", 2, pp+` "tensor_model_parallel_size": 2,`)
	assert.Equal(t, r.FinalLoss, sim.FinalLoss, "final loss cpu vs sim")
}
