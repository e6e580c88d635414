package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The user's 5.1 config scaled down to this machine (configs/5.1-175b-cpu.json:
// 4 pipeline stages, the Interleaved schedule, 16 micro-batches, fp16;
// ZeRO-1 and tensor parallelism 2 rather than 8, see docs) trains the GPT
// split into stages, each sharded over 2 TP ranks, on 8 in-process ranks,
// and its loss falls.
func TestTrainPipeline51(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", "../../configs/5.1-175b-cpu.json", "--model", "tiny", "--steps", "20"}, &out, &errb)
	require.Zero(t, code, errb.String())
	assert.Contains(t, out.String(), "pipeline: 4 stages x 1 data-parallel rank, schedule Interleaved, 2 virtual stages per stage, 16 micro-batches per step")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res trainResult
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res), "last line %q", lines[len(lines)-1])
	assert.Contains(t, out.String(), "tensor parallel: 2 ranks x 1 data-parallel ranks")
	assert.Equal(t, 8, res.Ranks, "ranks: 4 stages x 2 TP ranks x 1 data-parallel rank")
	// uniform over 16 tokens is ln 16 = 2.77 nats; 20 steps reach ~2.1
	assert.Less(t, res.FinalLoss, 2.4, "the loss did not fall\n%s", out.String())
}

// With pipeline stages (2 stages × 2 data-parallel ranks, ZeRO-1) a run
// stopped at step 10 and started again resumes from the latest checkpoint
// and ends exactly where an uninterrupted run ends.
func TestTrainPipelineResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("several training runs")
	}
	dir := t.TempDir()
	cfg := func(save string) string {
		p := save + ".json"
		require.NoError(t, os.WriteFile(p, []byte(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
			"pipeline_model_parallel_size": 2, "steps_per_print": 5, "zero_optimization": {"stage": 1},
			"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
			"checkpoint": {"save_dir": "`+save+`", "keep_n_most_recent": 2}}`), 0o644))
		return p
	}
	args := trainerArgs{microBatch: 2, lr: 0.01}
	whole, err := train(cfg(filepath.Join(dir, "a")), "", "tiny", 2, 20, args, io.Discard, io.Discard)
	require.NoError(t, err)
	b := cfg(filepath.Join(dir, "b"))
	_, err = train(b, "", "tiny", 2, 10, args, io.Discard, io.Discard)
	require.NoError(t, err)
	var out strings.Builder
	resumed, err := train(b, "", "tiny", 2, 20, args, &out, io.Discard)
	require.NoError(t, err)
	assert.Contains(t, out.String(), "resumed at step 10 from", "the second run resumes")
	assert.Equal(t, whole.FinalLoss, resumed.FinalLoss, "final loss after resuming vs uninterrupted")
	ents, _ := os.ReadDir(filepath.Join(dir, "b"))
	assert.Len(t, ents, 3, "save_dir: want two checkpoints and latest")
}
