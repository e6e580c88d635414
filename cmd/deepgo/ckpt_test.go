package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/tensor"
)

func TestCkptInspectConsolidate(t *testing.T) {
	dir := t.TempDir()
	w, _ := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6})
	defer w.Free()
	st := &checkpoint.State{Step: 3, Tensors: []checkpoint.Entry{{Name: "flat", Data: w, Shard: &checkpoint.Shard{Numel: 5}}},
		Params: []checkpoint.ParamRef{{Name: "w", Shape: []int{2, 2}, Source: "flat", Offset: 1}}}
	if _, err := checkpoint.Save(context.Background(), checkpoint.Options{Dir: dir}, st); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"ckpt", "inspect", dir}, &out, &errb); code != 0 {
		t.Fatalf("inspect: %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "global_step3") || !strings.Contains(out.String(), "0 bad") {
		t.Fatalf("inspect output:\n%s", out.String())
	}
	dst := filepath.Join(t.TempDir(), "out.safetensors")
	if code := run([]string{"ckpt", "consolidate", dir, dst}, &out, &errb); code != 0 {
		t.Fatalf("consolidate: %d\n%s", code, errb.String())
	}
	if fi, err := os.Stat(dst); err != nil || fi.Size() == 0 {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "global_step3", "*.safetensors"))
	b, _ := os.ReadFile(files[0])
	b[len(b)-1] ^= 1
	os.WriteFile(files[0], b, 0o644)
	out.Reset()
	if code := run([]string{"ckpt", "inspect", dir}, &out, &errb); code != 1 || !strings.Contains(out.String(), "checksum mismatch") {
		t.Fatalf("inspect of a damaged checkpoint: %d\n%s", code, out.String())
	}
}
