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

// TestTrainTiny: the tiny model on 2 ranks, ZeRO 2, reaches within 10% of
// the synthetic source's entropy floor; the last line is the JSON result.
func TestTrainTiny(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "ds.json")
	os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 8, "steps_per_print": 100,
		"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}}}`), 0o644)
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny"}, &out, &errb)
	require.Zero(t, code, errb.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res trainResult
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res), "last line %q", lines[len(lines)-1])
	if assert.NotNil(t, res.EntropyFloor, "entropy floor") {
		assert.LessOrEqual(t, res.FinalLoss, 1.1**res.EntropyFloor, "final loss not within 10%% of the floor\n%s", out.String())
	}

}
