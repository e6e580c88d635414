package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/deepgo-ml/deepgo/checkpoint/vfs"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigState is a one-rank state of about n bytes.
func bigState(t *testing.T, step int64, n int) *State {
	st := synthState(t, 0, 1, step)
	big := mustEmpty(t, tensor.Uint8, n)
	b, _ := big.RawBytes()
	for i := range b {
		b[i] = byte(i * 7)
	}
	st.Tensors = append(st.Tensors, Entry{Name: "big", Data: big})
	return st
}

// checkDiskFull saves a small checkpoint, then one too large for the
// space left, and checks the error and that the first is intact.
func checkDiskFull(t *testing.T, fsys vfs.FS, dir string, big int) {
	_, err := Save(context.Background(), Options{FS: fsys, Dir: dir}, synthState(t, 0, 1, 1))
	require.NoError(t, err)
	_, err = Save(context.Background(), Options{FS: fsys, Dir: dir, Keep: 1}, bigState(t, 2, big))
	require.ErrorIs(t, err, syscall.ENOSPC, "save on a full disk")
	require.ErrorContains(t, err, ".safetensors", "save on a full disk: want ENOSPC naming the file")
	t.Log(err)
	ck, err := Open(fsys, dir, "")
	require.NoError(t, err)
	defer ck.Close()
	require.Equal(t, "global_step1", ck.Tag, "latest after a failed save")
	require.NoError(t, ck.Verify(context.Background()))
	checkMaster(t, ck, 1)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		assert.False(t, strings.HasPrefix(e.Name(), stagePrefix), "failed save left %s", e.Name())
	}
}

func TestDiskFullInjected(t *testing.T) {
	dir := t.TempDir()
	df := &vfs.DiskFull{Limit: 64 << 10}
	checkDiskFull(t, vfs.WithFaults(vfs.OS, df), dir, 1<<20)
}

// TestDiskFullTmpfs runs the same check on a real 1 MiB tmpfs when this
// process may mount one (root outside a restricted container).
func TestDiskFullTmpfs(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v); TestDiskFullInjected covers this", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	checkDiskFull(t, vfs.OS, filepath.Join(dir, "ckpt"), 2<<20)
}

// TestFailedOperationsKeepPreviousCheckpoint fails each kind of file
// operation of a save in turn.
func TestFailedOperationsKeepPreviousCheckpoint(t *testing.T) {
	for _, inj := range []*vfs.OnOp{
		{Op: vfs.OpCreate, Match: "*.safetensors", Err: syscall.EIO},
		{Op: vfs.OpWrite, Match: "*.safetensors", Err: syscall.EIO, After: 1},
		{Op: vfs.OpSync, Match: "*.safetensors", Err: syscall.EIO},
		{Op: vfs.OpCreate, Match: manifestName, Err: syscall.EIO},
		{Op: vfs.OpSync, Match: stagePrefix + "*", Err: syscall.EIO},
		{Op: vfs.OpRename, Match: stagePrefix + "*", Err: syscall.EIO},
		{Op: vfs.OpCreate, Match: "." + latestName + ".tmp", Err: syscall.EIO},
		{Op: vfs.OpRename, Match: "." + latestName + ".tmp", Err: syscall.EIO},
	} {
		t.Run(inj.String(), func(t *testing.T) {
			dir := t.TempDir()
			_, err := Save(context.Background(), Options{Dir: dir}, synthState(t, 0, 1, 1))
			require.NoError(t, err)
			fsys := vfs.WithFaults(vfs.OS, inj)
			_, err = Save(context.Background(), Options{FS: fsys, Dir: dir, Keep: 1}, synthState(t, 0, 1, 2))
			require.ErrorIs(t, err, syscall.EIO, "save")
			ck, err := Open(nil, dir, "")
			require.NoError(t, err)
			defer ck.Close()
			require.NoError(t, ck.Verify(context.Background()))
			// The new checkpoint was renamed into place before latest
			// failed: still the old one must be intact.
			require.Equal(t, "global_step1", ck.Tag, "latest")
			old, err := Open(nil, dir, "global_step1")
			require.NoError(t, err)
			checkMaster(t, old, 1)
			old.Close()
		})
	}
}
