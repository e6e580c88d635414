package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readTensors reads a safetensors file as its header and each tensor's
// raw bytes.
func readTensors(t *testing.T, path string) (*safetensors.Header, map[string][]byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	hdr, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	out := map[string][]byte{}
	for _, ti := range hdr.Tensors {
		out[ti.Name] = b[hdr.DataOffset+ti.Begin : hdr.DataOffset+ti.End]
	}
	return hdr, out
}

// TestTrainSaveModel: `deepgo train --save-model DIR` at ZeRO stage 3 with
// stage3_gather_16bit_weights_on_model_save writes DIR/model.safetensors
// in bf16 whose every value is the fp32 weight `deepgo ckpt consolidate`
// reads from the final checkpoint, rounded to nearest even: the in-process
// gather and the checkpoint agree. Run again with nothing left to train,
// it exports the checkpoint it resumed from. Without the key, or with a
// DIR that cannot be a directory or is named like the file, the run is
// refused before it trains.
func TestTrainSaveModel(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ds.json")
	ck, export := filepath.Join(dir, "ck"), filepath.Join(dir, "export")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 100, "bf16": {"enabled": true},
		"checkpoint": {"save_dir": "`+ck+`"},
		"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`), 0o644))
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "4", "--ranks", "2", "--save-model", export}, &out, &errb)
	require.Zero(t, code, errb.String())
	model := filepath.Join(export, "model.safetensors")
	assert.Contains(t, out.String(), "saved model "+model)
	fp32 := filepath.Join(dir, "fp32.safetensors")
	code = run([]string{"ckpt", "consolidate", ck, fp32}, &out, &errb)
	require.Zero(t, code, errb.String())

	mh, mv := readTensors(t, model)
	fh, fv := readTensors(t, fp32)
	require.Len(t, mh.Tensors, len(fh.Tensors))
	for _, ti := range fh.Tensors {
		got, ok := mh.Find(ti.Name)
		require.True(t, ok, ti.Name)
		assert.Equal(t, tensor.BFloat16, got.DType, ti.Name)
		assert.Equal(t, ti.Shape, got.Shape, ti.Name)
		f, b := fv[ti.Name], mv[ti.Name]
		require.Len(t, b, len(f)/2, ti.Name)
		for i := range len(f) / 4 {
			want := tensor.Float32ToBFloat16(math.Float32frombits(binary.LittleEndian.Uint32(f[4*i:])))
			if g := binary.LittleEndian.Uint16(b[2*i:]); g != want {
				t.Fatalf("%s[%d]: model file %#04x, consolidated checkpoint rounded %#04x", ti.Name, i, g, want)
			}
		}
	}

	// a finished run asked again exports the checkpoint it loads: the same file
	again := filepath.Join(dir, "again")
	out.Reset()
	code = run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "4", "--ranks", "2", "--save-model", again}, &out, &errb)
	require.Zero(t, code, errb.String())
	assert.Contains(t, out.String(), "nothing to train")
	want, err := os.ReadFile(model)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(again, "model.safetensors"))
	require.NoError(t, err)
	assert.Equal(t, want, got, "the model of the loaded checkpoint")

	// a DIR that cannot be one, or named like the file, is refused before training
	blocker := filepath.Join(dir, "afile")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	for _, bad := range []string{blocker, filepath.Join(dir, "m.safetensors")} {
		out.Reset()
		errb.Reset()
		code = run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "8", "--ranks", "2", "--save-model", bad}, &out, &errb)
		assert.Equal(t, 1, code, bad)
		assert.Contains(t, errb.String(), "--save-model "+bad)
		assert.NotContains(t, out.String(), "training GPT", "refused before training")
	}

	require.NoError(t, os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`), 0o644))
	out.Reset()
	errb.Reset()
	code = run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "4", "--ranks", "2", "--save-model", filepath.Join(dir, "no")}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "--save-model")
	assert.Contains(t, errb.String(), "zero_optimization.stage3_gather_16bit_weights_on_model_save is false")
	assert.NotContains(t, out.String(), "training GPT", "refused before training")
}
