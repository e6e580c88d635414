package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// flipBit inverts one bit of the file at path, off bytes from its end.
func flipBit(t testing.TB, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-off] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// VerifyAll finds the newest checkpoint that verifies past a damaged data
// file and a damaged manifest, and SetLatest points latest at it.
func TestVerifyAllAndSetLatest(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int64{2, 4, 6} {
		saveWorld(t, dir, 2, step, Options{})
	}
	if err := os.Mkdir(filepath.Join(dir, stagePrefix+"global_step8"), 0o755); err != nil {
		t.Fatal(err)
	}
	flipBit(t, filepath.Join(dir, "global_step6", fileName(1, "optim")), 3)
	flipBit(t, filepath.Join(dir, "global_step4", manifestName), 10)

	vs, err := VerifyAll(context.Background(), nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		tag  string
		step int64
		ok   bool
	}{{"global_step6", 6, false}, {"global_step2", 2, true}, {"global_step4", -1, false}}
	if len(vs) != len(want) {
		t.Fatalf("verdicts %+v, want %d", vs, len(want))
	}
	for i, w := range want {
		if v := vs[i]; v.Tag != w.tag || v.Step != w.step || (v.Err == nil) != w.ok {
			t.Errorf("verdict %d: %+v, want %s step %d verifying %v", i, v, w.tag, w.step, w.ok)
		}
	}
	if !errors.Is(vs[0].Err, ErrCorrupt) {
		t.Errorf("damaged data file: %v does not wrap ErrCorrupt", vs[0].Err)
	}

	if err := SetLatest(nil, dir, "global_step4"); err == nil {
		t.Error("SetLatest accepted a checkpoint whose manifest is damaged")
	}
	if err := SetLatest(nil, dir, "global_step2"); err != nil {
		t.Fatal(err)
	}
	if tag, err := ReadLatest(nil, dir); err != nil || tag != "global_step2" {
		t.Fatalf("latest names %q, %v; want global_step2", tag, err)
	}
	if err := loadAll(dir); err != nil {
		t.Fatalf("resuming from what latest now names: %v", err)
	}
}
