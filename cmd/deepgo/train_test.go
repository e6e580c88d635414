package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// TestTrainDeviceSim: `deepgo train --config configs/demo-zero2.json
// --device sim` (the repository's demo config, fewer steps) ends at the
// same final loss as --device cpu, to the last bit, and says where it ran.
func TestTrainDeviceSim(t *testing.T) {
	final := map[string]float64{}
	for _, dev := range []string{"cpu", "sim"} {
		var out, errb bytes.Buffer
		code := run([]string{"train", "--config", "../../configs/demo-zero2.json", "--model", "tiny", "--steps", "40", "--device", dev}, &out, &errb)
		require.Zero(t, code, errb.String())
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var res trainResult
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res), "last line %q", lines[len(lines)-1])
		assert.Equal(t, dev, res.Device, "device in the JSON result")
		assert.Contains(t, out.String(), "on "+dev, "the banner names the device")
		final[dev] = res.FinalLoss
	}
	assert.Equal(t, final["cpu"], final["sim"], "final loss: cpu vs sim")
}

// An unknown --device is refused naming the flag and what is allowed.
func TestTrainDeviceBad(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", "../../configs/demo-zero2.json", "--model", "tiny", "--steps", "1", "--device", "tpu"}, &out, &errb)
	assert.Equal(t, 2, code, "a bad flag value is a usage error, as --steps -1 is")
	assert.Contains(t, errb.String(), `--device "tpu"`)
	assert.Contains(t, errb.String(), "allowed cpu, cuda, cuda:N, sim, sim:N")
	errb.Reset()
	code = run([]string{"train", "--config", "../../configs/demo-zero2.json", "--model", "huge"}, &out, &errb)
	assert.Equal(t, 2, code)
	assert.Contains(t, errb.String(), `--model "huge": want small or tiny`)
}

// TestTrainAttentionWindow: sequence_parallel.attention_window_size reaches
// the model. A window of the tiny model's whole sequence (16) is full
// attention, to the last bit of the final loss; a window of 2 trains a
// different model (another final loss) that still gets within 10% of the
// order-1 source's entropy floor (each token needs only itself).
func TestTrainAttentionWindow(t *testing.T) {
	final := map[int]float64{}
	var floor float64
	for _, w := range []int{0, 16, 2} {
		cfg := filepath.Join(t.TempDir(), "ds.json")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 8, "steps_per_print": 100,
			"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}},
			"sequence_parallel": {"attention_window_size": %d}}`, w)), 0o644)
		var out, errb bytes.Buffer
		code := run([]string{"train", "--config", cfg, "--model", "tiny"}, &out, &errb)
		require.Zero(t, code, errb.String())
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var res trainResult
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res), "last line %q", lines[len(lines)-1])
		require.NotNil(t, res.EntropyFloor, "entropy floor")
		floor, final[w] = *res.EntropyFloor, res.FinalLoss
	}
	assert.Equal(t, final[0], final[16], "window 16 = T: full attention's final loss")
	assert.NotEqual(t, final[0], final[2], "window 2 trains another model")
	assert.LessOrEqual(t, final[2], 1.1*floor, "window 2: final loss %.4f, floor %.4f", final[2], floor)
	t.Logf("floor %.4f: full %.6f, window 16 %.6f, window 2 %.6f", floor, final[0], final[16], final[2])
}
