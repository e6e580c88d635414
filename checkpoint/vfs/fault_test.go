package vfs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDiskFullShortWrite(t *testing.T) {
	df := &DiskFull{Limit: 10}
	fs := WithFaults(OS, df)
	f, err := fs.Create(filepath.Join(t.TempDir(), "x"))
	require.NoError(t, err)
	defer f.Close()
	n, err := f.Write(make([]byte, 6))
	require.NoError(t, err, "first write")
	require.Equal(t, 6, n, "first write")
	n, err = f.Write(make([]byte, 6))
	require.ErrorIs(t, err, syscall.ENOSPC, "second write: %d bytes", n)
	require.Equal(t, 4, n, "second write")
	require.Equal(t, int64(10), df.Written(), "written")
}

func TestOnOp(t *testing.T) {
	dir := t.TempDir()
	inj := &OnOp{Op: OpRename, Match: "*.tmp", Err: syscall.EIO, After: 1, Once: true}
	fs := WithFaults(OS, inj)
	for i, want := range []bool{false, true, false} {
		src := filepath.Join(dir, "a.tmp")
		os.WriteFile(src, nil, 0o644)
		err := fs.Rename(src, filepath.Join(dir, "b"))
		if want {
			require.ErrorIs(t, err, syscall.EIO, "rename %d: fault expected [%v]", i, inj)
		} else {
			require.NoError(t, err, "rename %d: no fault expected [%v]", i, inj)
		}
	}
	require.NoError(t, fs.Rename(filepath.Join(dir, "b"), filepath.Join(dir, "c")), "non-matching path")
}
