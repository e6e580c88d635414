package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The user's 5.1 config scaled down to this machine (configs/5.1-175b-cpu.json:
// 4 pipeline stages, the Interleaved schedule, 16 micro-batches, fp16;
// ZeRO-1 and no tensor parallelism, see docs) trains the GPT split into
// stages on 4 in-process ranks, and its loss falls.
func TestTrainPipeline51(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", "../../configs/5.1-175b-cpu.json", "--model", "tiny", "--steps", "20"}, &out, &errb)
	require.Zero(t, code, errb.String())
	assert.Contains(t, out.String(), "pipeline: 4 stages x 1 data-parallel ranks, schedule Interleaved, 2 virtual stages per stage, 16 micro-batches per step")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res trainResult
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res), "last line %q", lines[len(lines)-1])
	assert.Equal(t, 4, res.Ranks, "ranks: 4 stages x 1 data-parallel rank")
	// uniform over 16 tokens is ln 16 = 2.77 nats; 20 steps reach ~2.1
	assert.Less(t, res.FinalLoss, 2.4, "the loss did not fall\n%s", out.String())
}

// A config that asks for checkpoints the engine cannot write is refused
// before the first step, naming the key and the reason.
func TestTrainRefusesUnsavableCheckpoints(t *testing.T) {
	for _, c := range []struct{ extra, want string }{
		{`"pipeline_model_parallel_size": 2`, "checkpoint.save_dir with 2 pipeline stages: not supported yet"},
	} {
		cfg := filepath.Join(t.TempDir(), "ds.json")
		require.NoError(t, os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, `+c.extra+`,
			"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
			"checkpoint": {"save_dir": "`+t.TempDir()+`"}}`), 0o644))
		var out, errb bytes.Buffer
		require.NotZero(t, run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "4"}, &out, &errb))
		assert.Contains(t, errb.String(), c.want)
		assert.NotContains(t, out.String(), "step ", "refused before any step")
	}
}
