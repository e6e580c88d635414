package sim_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CopyAsync round-trips data through the device in either delay mode, is
// ordered after the kernels issued before it, and leaves the host free to
// go on: with a slow kernel queued, the copy is still in flight when
// CopyAsync returns, and it runs while kernels of the compute stream do.
func TestCopyAsync(t *testing.T) {
	ctx := context.Background()
	for _, d := range delays {
		t.Run(d.name, func(t *testing.T) {
			b := newSim(t, 0, d.max)
			h, err := b.HostEmpty(tensor.Float32, 256)
			require.NoError(t, err)
			defer h.Free()
			v, _ := h.Float32s()
			for i := range v {
				v[i] = float32(i)
			}
			x, err := b.Empty(tensor.Float32, 256)
			require.NoError(t, err)
			defer x.Free()
			up, err := b.CopyAsync(x, h)
			require.NoError(t, err)
			require.NoError(t, up.Wait(ctx))
			require.NoError(t, b.Scale([]*tensor.Tensor{x}, 2)) // ordered before the copy down
			out, err := b.HostEmpty(tensor.Float32, 256)
			require.NoError(t, err)
			defer out.Free()
			down, err := b.CopyAsync(out, x)
			require.NoError(t, err)
			require.NoError(t, down.Wait(ctx))
			require.True(t, down.Done())
			got, _ := out.Float32s()
			for i := range got {
				require.Equal(t, float32(2*i), got[i], "element %d", i)
			}
		})
	}
}

// The copy overlaps kernels: with delays, CopyAsync returns before the
// copy ran, and a copy queued behind one batch of kernels runs while the
// next batch does (CopyStats.Overlapped).
func TestCopyAsyncOverlaps(t *testing.T) {
	ctx := context.Background()
	b := newSim(t, 0, 2*time.Millisecond)
	x, err := b.Empty(tensor.Float32, 64)
	require.NoError(t, err)
	defer x.Free()
	var pending int
	const n = 10
	for range n {
		for range 3 {
			require.NoError(t, b.Scale([]*tensor.Tensor{x}, 1))
		}
		h, err := b.HostEmpty(tensor.Float32, 64)
		require.NoError(t, err)
		c, err := b.CopyAsync(h, x)
		require.NoError(t, err)
		if !c.Done() {
			pending++
		}
		for range 3 { // compute the copy may overlap
			require.NoError(t, b.Scale([]*tensor.Tensor{x}, 1))
		}
		require.NoError(t, c.Wait(ctx))
		h.Free()
	}
	require.NoError(t, b.Synchronize(ctx))
	assert.Equal(t, n, pending, "every copy still in flight when CopyAsync returned")
	s := b.CopyStats()
	assert.EqualValues(t, n, s.Async)
	assert.Positive(t, s.Overlapped, "copies that ran while a kernel ran")
}

// Touching a host side before Wait is caught where the host can see it: a
// destination reads NaN until the copy lands, and a source changed or a
// destination written before the copy runs fails it with a sticky error.
func TestCopyAsyncTouchedBeforeWait(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		touch func(dst, src []float32)
		want  string
	}{
		{"source changed", func(_, src []float32) { src[3] = 42 }, "host source"},
		{"destination written", func(dst, _ []float32) { dst[0] = 1 }, "host destination"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newSim(t, 0, 5*time.Millisecond)
			x, err := b.Empty(tensor.Float32, 16)
			require.NoError(t, err)
			defer x.Free()
			h, err := b.HostEmpty(tensor.Float32, 16)
			require.NoError(t, err)
			defer h.Free()
			hv, _ := h.Float32s()
			// a slow kernel first, so the copies wait behind it
			require.NoError(t, b.Scale([]*tensor.Tensor{x}, 1))
			var c backend.Copying
			if tc.want == "host source" {
				c, err = b.CopyAsync(x, h)
				require.NoError(t, err)
				tc.touch(nil, hv)
			} else {
				c, err = b.CopyAsync(h, x)
				require.NoError(t, err)
				assert.True(t, math.IsNaN(float64(hv[5])), "the destination reads NaN before Wait")
				tc.touch(hv, nil)
			}
			err = c.Wait(ctx)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "before the copy's Wait")
		})
	}
}

// CopyAsync's bad arguments are Copy's, naming dst or src.
func TestCopyAsyncBadArguments(t *testing.T) {
	b := newSim(t, 0, -1)
	x, err := b.Empty(tensor.Float32, 8)
	require.NoError(t, err)
	defer x.Free()
	h16, err := b.HostEmpty(tensor.Float16, 8)
	require.NoError(t, err)
	defer h16.Free()
	_, err = b.CopyAsync(h16, x)
	var ae *backend.ArgError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "CopyAsync", ae.Op)
	assert.Equal(t, "dst", ae.Arg)
	_, err = b.CopyAsync(nil, x)
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "dst", ae.Arg)
}

// CopyStats counts the bytes Copy and CopyAsync move between host memory
// and the device's, in each direction, and not those within the device.
func TestCopyStatsBytes(t *testing.T) {
	ctx := context.Background()
	b := newSim(t, 0, -1)
	h, err := b.HostEmpty(tensor.Float32, 256)
	require.NoError(t, err)
	defer h.Free()
	x, err := b.Empty(tensor.Float32, 256)
	require.NoError(t, err)
	defer x.Free()
	y, err := b.Empty(tensor.Float32, 256)
	require.NoError(t, err)
	defer y.Free()
	before := b.CopyStats()
	require.NoError(t, b.Copy(x, h))
	require.NoError(t, b.Copy(y, x))
	require.NoError(t, b.Copy(h, y))
	c, err := b.CopyAsync(h, x)
	require.NoError(t, err)
	require.NoError(t, c.Wait(ctx))
	after := b.CopyStats()
	assert.Equal(t, int64(2*1024), after.ToHostBytes-before.ToHostBytes, "bytes to the host")
	assert.Equal(t, int64(1024), after.FromHostBytes-before.FromHostBytes, "bytes from the host")
}
