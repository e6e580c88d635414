package checkpoint

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/stretchr/testify/require"
)

// A data file edited in place fails verification until Reseal records it;
// then it verifies and reads back the edited value. An edit that breaks
// the file's header is refused and leaves the manifest as it was.
func TestReseal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	saveWorld(t, dir, 2, 3, Options{})
	tag := DefaultTag(3)
	name := filepath.Join(dir, tag, fileName(1, "optim"))
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	f, err := os.Open(name)
	require.NoError(t, err)
	h, err := safetensors.ReadHeader(f, int64(len(b)))
	f.Close()
	require.NoError(t, err)
	info, ok := h.Find("fp32/master")
	require.True(t, ok)
	at := h.DataOffset + info.Begin // rank 1's first element
	binary.LittleEndian.PutUint32(b[at:], math.Float32bits(1234.5))
	require.NoError(t, os.WriteFile(name, b, 0o644))
	require.ErrorIs(t, loadAll(dir), ErrCorrupt, "an edit without reseal")

	require.NoError(t, Reseal(nil, dir, tag))
	require.NoError(t, loadAll(dir), "resealed")
	ck, err := Open(nil, dir, tag)
	require.NoError(t, err)
	defer ck.Close()
	g, ok := ck.Lookup("fp32/master")
	require.True(t, ok)
	x, err := ck.ReadTensor(ctx, "fp32/master")
	require.NoError(t, err)
	defer x.Free()
	v, _ := x.Float32s()
	require.Equal(t, float32(1234.5), v[g.Pieces[1].Offset], "the edited element")

	before, err := os.ReadFile(filepath.Join(dir, tag, manifestName))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(name, b[:len(b)-4], 0o644)) // header now promises more data than the file has
	require.ErrorIs(t, Reseal(nil, dir, tag), ErrCorrupt)
	after, err := os.ReadFile(filepath.Join(dir, tag, manifestName))
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused reseal leaves the manifest")
}
