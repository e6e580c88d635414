package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

func TestCkptInspectConsolidate(t *testing.T) {
	dir := t.TempDir()
	w, _ := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6})
	defer w.Free()
	st := &checkpoint.State{Step: 3, Tensors: []checkpoint.Entry{{Name: "flat", Data: w, Shard: &checkpoint.Shard{Numel: 5}}},
		Params: []checkpoint.ParamRef{{Name: "w", Shape: []int{2, 2}, Source: "flat", Offset: 1}}}
	_, err := checkpoint.Save(context.Background(), checkpoint.Options{Dir: dir}, st)
	require.NoError(t, err)
	var out, errb bytes.Buffer
	code := run([]string{"ckpt", "inspect", dir}, &out, &errb)
	require.Zero(t, code, "inspect\n%s%s", out.String(), errb.String())
	require.Contains(t, out.String(), "global_step3", "inspect output")
	require.Contains(t, out.String(), "0 bad", "inspect output")
	dst := filepath.Join(t.TempDir(), "out.safetensors")
	code = run([]string{"ckpt", "consolidate", dir, dst}, &out, &errb)
	require.Zero(t, code, "consolidate\n%s", errb.String())
	fi, err := os.Stat(dst)
	require.NoError(t, err)
	require.NotZero(t, fi.Size(), "consolidated file is empty")
	files, _ := filepath.Glob(filepath.Join(dir, "global_step3", "*.safetensors"))
	b, _ := os.ReadFile(files[0])
	b[len(b)-1] ^= 1
	os.WriteFile(files[0], b, 0o644)
	out.Reset()
	code = run([]string{"ckpt", "inspect", dir}, &out, &errb)
	require.Equal(t, 1, code, "inspect of a damaged checkpoint\n%s", out.String())
	require.Contains(t, out.String(), "checksum mismatch", "inspect of a damaged checkpoint")

}
