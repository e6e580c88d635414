package staged_test

import (
	"context"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/comm/staged"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBuffersBackendAndSplit: repeated calls of one size reuse one host
// buffer, host tensors take none, Close frees them; Backend names the
// device's backend, on split groups too.
func TestBuffersBackendAndSplit(t *testing.T) {
	w, err := local.NewWorld(1, local.Options{Timeout: testTimeout})
	require.NoError(t, err)
	defer w.Close()
	be := newSim(t, 0)
	c := staged.New(w.Comm(0), be)
	ctx := context.Background()

	var moved interface{ Backend() backend.Backend } = c
	assert.Same(t, be, moved.Backend())

	h, err := tensor.Empty(tensor.Float32, m)
	require.NoError(t, err)
	defer h.Free()
	require.NoError(t, c.AllReduce(ctx, h, comm.Sum))
	assert.Equal(t, 0, staged.CachedBuffers(c), "host tensors need no buffer")

	x, err := be.Empty(tensor.Float32, m)
	require.NoError(t, err)
	defer x.Free()
	y, err := be.Empty(tensor.Int32, m) // same bytes, other dtype: same buffer
	require.NoError(t, err)
	defer y.Free()
	for range 3 {
		require.NoError(t, c.AllReduce(ctx, x, comm.Sum))
		require.NoError(t, c.Broadcast(ctx, y, 0))
	}
	assert.Equal(t, 1, staged.CachedBuffers(c))

	sub, err := c.Split(ctx, 0, 0, "sub")
	require.NoError(t, err)
	sc, ok := sub.(*staged.Comm)
	require.True(t, ok, "Split returns %T", sub)
	assert.Same(t, be, sc.Backend())
	assert.Equal(t, "sub", sc.Name())
	require.NoError(t, sc.AllReduce(ctx, x, comm.Sum))
	assert.Equal(t, 1, staged.CachedBuffers(sc), "a split group keeps its own buffers")
	require.NoError(t, sc.Close())
	assert.Equal(t, 0, staged.CachedBuffers(sc))

	none, err := c.Split(ctx, comm.NoColor, 0, "")
	require.NoError(t, err)
	assert.Nil(t, none)

	require.NoError(t, c.Close())
	assert.Equal(t, 0, staged.CachedBuffers(c))
	assert.ErrorIs(t, c.AllReduce(ctx, x, comm.Sum), comm.ErrClosed)
}

// TestRelease: Release frees the kept buffers and leaves the inner comm
// open; the wrapper still works, keeping no buffer between calls.
func TestRelease(t *testing.T) {
	w, err := local.NewWorld(1, local.Options{Timeout: testTimeout})
	require.NoError(t, err)
	defer w.Close()
	be := newSim(t, 0)
	c := staged.New(w.Comm(0), be)
	ctx := context.Background()
	x, err := be.Empty(tensor.Float32, m)
	require.NoError(t, err)
	defer x.Free()
	require.NoError(t, c.AllReduce(ctx, x, comm.Sum))
	assert.Equal(t, 1, staged.CachedBuffers(c))
	require.NoError(t, c.Release())
	assert.Equal(t, 0, staged.CachedBuffers(c))
	require.NoError(t, c.AllReduce(ctx, x, comm.Sum), "after Release")
	assert.Equal(t, 0, staged.CachedBuffers(c), "nothing kept after Release")
	require.NoError(t, w.Comm(0).Barrier(ctx), "the inner comm stays open")
}
