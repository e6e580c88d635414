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

// trainParallel runs deepgo train for 40 steps of the tiny model on a
// batch of 16 (8 per rank) with key set to n, and returns its result and
// standard output; extra is more config keys (each followed by a comma).
func trainParallel(t *testing.T, dir, key string, n int, extra ...string) (trainResult, string) {
	t.Helper()
	return trainParallelOn(t, "cpu", dir, key, n, extra...)
}

// trainParallelOn is trainParallel with --device dev.
func trainParallelOn(t *testing.T, dev, dir, key string, n int, extra ...string) (trainResult, string) {
	t.Helper()
	return trainParallelModel(t, dev, "tiny", dir, key, n, extra...)
}

// trainParallelModel is trainParallelOn with --model model.
func trainParallelModel(t *testing.T, dev, model, dir, key string, n int, extra ...string) (trainResult, string) {
	t.Helper()
	cfg := filepath.Join(dir, fmt.Sprintf("%s-%d-%d.json", key, n, len(extra)))
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8,
		%q: %d, "gradient_clipping": 1.0, "zero_optimization": {"stage": 1}, %s
		"optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}`, key, n, strings.Join(extra, " "))), 0o644))
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", model, "--steps", "40", "--device", dev}, &out, &errb)
	require.Zero(t, code, errb.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var r trainResult
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &r), "last line %q", lines[len(lines)-1])
	return r, out.String()
}

// `deepgo train` reads tensor_model_parallel_size: TP 2 over 2
// data-parallel ranks runs 4 in-process ranks, says so, holds less per
// rank, and ends at TP 1's final loss (to float32 summation order); with
// pipeline_model_parallel_size 2 too it runs the 3-D grid's 8 ranks,
// holding less per rank than PP 2 alone, to PP 2's final loss; with a
// checkpoint directory it is refused before the first step.
func TestTrainTensorParallel(t *testing.T) {
	dir := t.TempDir()
	res := map[int]trainResult{}
	for _, tp := range []int{1, 2} {
		r, out := trainParallel(t, dir, "tensor_model_parallel_size", tp)
		res[tp] = r
		if tp == 2 {
			assert.Contains(t, out, "tensor parallel: 2 ranks x 2 data-parallel ranks")
		}
	}
	assert.Equal(t, 2, res[1].Ranks)
	assert.Equal(t, 4, res[2].Ranks)
	assert.Less(t, res[2].PeakMemory[0], res[1].PeakMemory[0], "memory per rank at TP 2 vs 1")
	assert.LessOrEqual(t, math.Abs(res[2].FinalLoss-res[1].FinalLoss)/res[1].FinalLoss, 1e-5, "final loss TP 2 %v vs TP 1 %v", res[2].FinalLoss, res[1].FinalLoss)

	// TP 2 × PP 2 × 2 data-parallel ranks: 8 ranks on the same batches,
	// ending at PP 2's final loss (the pipeline's GPT has a block per
	// stage, one more than the tiny model's)
	pp, _ := trainParallel(t, dir, "pipeline_model_parallel_size", 2)
	r, out := trainParallel(t, dir, "tensor_model_parallel_size", 2, `"pipeline_model_parallel_size": 2,`)
	assert.Equal(t, 8, r.Ranks)
	assert.Contains(t, out, "pipeline: 2 stages x 2 data-parallel ranks")
	assert.Contains(t, out, "tensor parallel: 2 ranks x 2 data-parallel ranks")
	assert.Less(t, r.PeakMemory[0], pp.PeakMemory[0], "memory per rank at TP 2 x PP 2 vs PP 2")
	t.Logf("final loss TP 2 x PP 2 %v, PP 2 %v", r.FinalLoss, pp.FinalLoss)
	assert.LessOrEqual(t, math.Abs(r.FinalLoss-pp.FinalLoss)/pp.FinalLoss, 1e-5, "final loss TP 2 x PP 2 %v vs PP 2 %v", r.FinalLoss, pp.FinalLoss)
}

// The built-in models grow their heads (and width) to what the config's
// tensor or sequence parallel degree splits.
func TestParallelHeads(t *testing.T) {
	for _, c := range []struct{ heads, width, n, wantH, wantW int }{
		{2, 32, 1, 2, 32},
		{2, 32, 2, 2, 32},
		{2, 32, 4, 4, 32},
		{2, 32, 8, 8, 32},
		{4, 64, 8, 8, 64},
		{4, 64, 3, 6, 66},
	} {
		h, w := parallelHeads(c.heads, c.width, c.n)
		assert.Equal(t, []int{c.wantH, c.wantW}, []int{h, w}, "heads %d width %d n %d", c.heads, c.width, c.n)
	}
}

// `deepgo train --device sim` runs TP 2 (with Megatron's sequence
// parallelism) and Ulysses SP 2 on the simulated device and ends at the
// CPU's final loss, to the last bit.
func TestTrainModelParallelDeviceSim(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		key   string
		extra []string
	}{
		{"tensor_model_parallel_size", []string{`"megatron_sequence_parallel": true,`}},
		{"sequence_parallel_size", nil},
	} {
		cpu, _ := trainParallelOn(t, "cpu", dir, tc.key, 2, tc.extra...)
		sim, _ := trainParallelOn(t, "sim", dir, tc.key, 2, tc.extra...)
		assert.Equal(t, "sim", sim.Device, "%s: device in the JSON result", tc.key)
		assert.Equal(t, cpu.FinalLoss, sim.FinalLoss, "%s: final loss cpu vs sim", tc.key)
	}
}

// The built-in models pad their vocabulary to what TP splits (as
// Megatron does) and shorten their context to what the ranks splitting
// each sequence share.
func TestParallelVocabSeqLen(t *testing.T) {
	for _, c := range []struct{ vocab, tp, want int }{{16, 1, 16}, {16, 2, 16}, {16, 3, 18}, {50257, 2, 50258}, {50257, 8, 50264}} {
		assert.Equal(t, c.want, parallelVocab(c.vocab, c.tp), "vocab %d tp %d", c.vocab, c.tp)
	}
	for _, c := range []struct{ t, n, want int }{{16, 1, 16}, {16, 2, 16}, {16, 3, 15}, {16, 5, 15}, {16, 6, 12}, {2, 3, 3}} {
		assert.Equal(t, c.want, parallelSeqLen(c.t, c.n), "T %d n %d", c.t, c.n)
	}
}

// `deepgo train --model tiny` with a degree of 3, which divides neither
// the tiny model's vocabulary (16) nor its context (16), trains: TP 3
// pads the vocabulary to 18, Ulysses SP 3 and Megatron SP over TP 3 cut
// the context to 15, and each says so on stderr. The loss falls from the
// uniform guess's ln(vocab).
func TestTrainParallelDegreeThree(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, keys string
		notes      []string
		banner     string
	}{
		{"tp3", `"tensor_model_parallel_size": 3,`, []string{"vocab 16 padded to 18"}, "vocab 18, T 16, 6 ranks"},
		{"tp3-megatron-sp", `"tensor_model_parallel_size": 3, "megatron_sequence_parallel": true,`, []string{"vocab 16 padded to 18", "context T 15 instead of 16"}, "vocab 18, T 15, 6 ranks"},
		{"sp3", `"sequence_parallel_size": 3,`, []string{"context T 15 instead of 16"}, "vocab 16, T 15, 6 ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(dir, tc.name+".json")
			require.NoError(t, os.WriteFile(cfg, []byte(`{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8, `+tc.keys+`
				"optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}`), 0o644))
			var out, errb bytes.Buffer
			code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "30"}, &out, &errb)
			require.Zero(t, code, errb.String())
			for _, n := range tc.notes {
				assert.Contains(t, errb.String(), n)
			}
			assert.Contains(t, out.String(), tc.banner)
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			var r trainResult
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &r))
			assert.Less(t, r.FinalLoss, math.Log(16)-0.3, "final loss after 30 steps")
		})
	}
}
