package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainTiny: the tiny model on 2 ranks, ZeRO 2, reaches within 10% of
// the synthetic source's entropy floor; the last line is the JSON result.
func TestTrainTiny(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "ds.json")
	os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 8, "steps_per_print": 100,
		"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}}}`), 0o644)
	var out, errb bytes.Buffer
	if code := run([]string{"train", "--config", cfg, "--model", "tiny"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res trainResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	if res.EntropyFloor == nil || res.FinalLoss > 1.1**res.EntropyFloor {
		t.Errorf("final loss %v, floor %v: not within 10%%\n%s", res.FinalLoss, res.EntropyFloor, out.String())
	}
}
