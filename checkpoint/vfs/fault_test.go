package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestDiskFullShortWrite(t *testing.T) {
	df := &DiskFull{Limit: 10}
	fs := WithFaults(OS, df)
	f, err := fs.Create(filepath.Join(t.TempDir(), "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := f.Write(make([]byte, 6)); n != 6 || err != nil {
		t.Fatalf("first write: %d, %v", n, err)
	}
	n, err := f.Write(make([]byte, 6))
	if n != 4 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("second write: %d, %v; want 4, ENOSPC", n, err)
	}
	if df.Written() != 10 {
		t.Fatalf("written %d", df.Written())
	}
}

func TestOnOp(t *testing.T) {
	dir := t.TempDir()
	inj := &OnOp{Op: OpRename, Match: "*.tmp", Err: syscall.EIO, After: 1, Once: true}
	fs := WithFaults(OS, inj)
	for i, want := range []bool{false, true, false} {
		src := filepath.Join(dir, "a.tmp")
		os.WriteFile(src, nil, 0o644)
		err := fs.Rename(src, filepath.Join(dir, "b"))
		if (err != nil) != want || (err != nil && !errors.Is(err, syscall.EIO)) {
			t.Fatalf("rename %d: %v (fault expected: %v) [%v]", i, err, want, inj)
		}
	}
	if err := fs.Rename(filepath.Join(dir, "b"), filepath.Join(dir, "c")); err != nil {
		t.Fatalf("non-matching path: %v", err)
	}
}
