package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTrainFreeze: `deepgo train --freeze` trains the tiny GPT at ZeRO
// stage 3 in bf16 with the tied wte and block 0's attention frozen: it
// says how many parameters and elements are frozen and trainable, and
// the saved model holds the frozen ones at their initial values (bf16)
// while the others have moved. A regexp matching none, or all, or not
// compiling, is refused naming --freeze.
func TestTrainFreeze(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ds.json")
	export := filepath.Join(dir, "export")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 100, "bf16": {"enabled": true},
		"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}}}`), 0o644))
	freeze := `wte|h\.0\.attn`
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "3", "--ranks", "2", "--freeze", freeze, "--save-model", export}, &out, &errb)
	require.Zero(t, code, errb.String())
	assert.Contains(t, errb.String(), `--freeze "wte|h\\.0\\.attn": 5 parameters frozen`)

	mc := trainModels["tiny"]
	g := mc.gpt
	g.Vocab = mc.vocab
	init, err := nn.NewReadyGPT(g, nil, 1)
	require.NoError(t, err)
	defer init.Free()
	_, vals := readTensors(t, filepath.Join(export, "model.safetensors"))
	re := regexp.MustCompile(freeze)
	frozen := requireFrozenKept(t, init, vals, re, func(b []byte, i int, x float32) bool {
		return binary.LittleEndian.Uint16(b[2*i:]) == tensor.Float32ToBFloat16(x)
	})
	require.Equal(t, 5, frozen)

	for _, tc := range []struct{ re, want string }{
		{"nomatch", `--freeze "nomatch" matches none`},
		{".", `--freeze "." matches all`},
	} {
		errb.Reset()
		code = run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "1", "--ranks", "1", "--freeze", tc.re}, &out, &errb)
		assert.NotZero(t, code)
		assert.Contains(t, errb.String(), tc.want)
	}
	errb.Reset()
	code = run([]string{"train", "--config", cfg, "--freeze", "("}, &out, &errb)
	assert.Equal(t, 2, code)
	assert.Contains(t, errb.String(), `--freeze "(": not a Go regexp`)
}

// requireFrozenKept checks a saved model's values vals against init's
// parameters, element i of a parameter's bytes b matching initial value x
// when same says so: those re matches (frozen) must all match, the others
// (trainable) must have moved. It returns how many were frozen.
func requireFrozenKept(t *testing.T, init *nn.GPT, vals map[string][]byte, re *regexp.Regexp, same func(b []byte, i int, x float32) bool) int {
	t.Helper()
	frozen := 0
	for _, p := range init.Params() {
		v, err := p.Data.Float32s()
		require.NoError(t, err)
		b, ok := vals[p.Name]
		require.True(t, ok, p.Name)
		kept := true
		for i, x := range v {
			if !same(b, i, x) {
				kept = false
				break
			}
		}
		if re.MatchString(p.Name) {
			frozen++
			assert.True(t, kept, "frozen %s moved", p.Name)
		} else {
			assert.False(t, kept, "trainable %s did not move", p.Name)
		}
	}
	return frozen
}
