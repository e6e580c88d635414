package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flipBit inverts one bit of the file at path, off bytes from its end.
func flipBit(t testing.TB, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[len(b)-off] ^= 0x10
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// VerifyAll finds the newest checkpoint that verifies past a damaged data
// file and a damaged manifest, and SetLatest points latest at it.
func TestVerifyAllAndSetLatest(t *testing.T) {
	dir := t.TempDir()
	for _, step := range []int64{2, 4, 6} {
		saveWorld(t, dir, 2, step, Options{})
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, stagePrefix+"global_step8"), 0o755))
	flipBit(t, filepath.Join(dir, "global_step6", fileName(1, "optim")), 3)
	flipBit(t, filepath.Join(dir, "global_step4", manifestName), 10)

	vs, err := VerifyAll(context.Background(), nil, dir)
	require.NoError(t, err)
	want := []struct {
		tag  string
		step int64
		ok   bool
	}{{"global_step6", 6, false}, {"global_step2", 2, true}, {"global_step4", -1, false}}
	require.Len(t, vs, len(want), "verdicts %+v", vs)
	for i, w := range want {
		v := vs[i]
		assert.Equal(t, w.tag, v.Tag, "verdict %d: %+v", i, v)
		assert.Equal(t, w.step, v.Step, "verdict %d: %+v", i, v)
		assert.Equal(t, w.ok, v.Err == nil, "verdict %d: %+v: verifying", i, v)
	}
	assert.ErrorIs(t, vs[0].Err, ErrCorrupt, "damaged data file")

	assert.Error(t, SetLatest(nil, dir, "global_step4"), "SetLatest accepted a checkpoint whose manifest is damaged")
	require.NoError(t, SetLatest(nil, dir, "global_step2"))
	tag, err := ReadLatest(nil, dir)
	require.NoError(t, err, "latest")
	require.Equal(t, "global_step2", tag, "latest")
	require.NoError(t, loadAll(dir), "resuming from what latest now names")
}
