package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryStats: the simulated device counts its own memory, apart from
// the host's: Empty's N bytes raise Allocated, Reserved and their peaks by
// N (host tensors and the staging of Copy do not count), a Free takes them
// off Allocated at once and off Reserved when its stream-ordered free has
// run, and ResetPeak brings the peaks to the counts. Every backend of the
// device (another stream's) sees the same counts.
func TestMemoryStats(t *testing.T) {
	for _, d := range delays {
		t.Run(d.name, func(t *testing.T) {
			b := newSim(t, 0, d.max)
			var s backend.MemoryStats = b
			assert.Zero(t, s.Allocated())
			x, err := b.Empty(tensor.Float32, 1000)
			require.NoError(t, err)
			y, err := b.Empty(tensor.BFloat16, 300)
			require.NoError(t, err)
			assert.Equal(t, int64(4600), s.Allocated())
			assert.Equal(t, int64(4600), s.Reserved())
			h, err := tensor.Empty(tensor.Float32, 1000)
			require.NoError(t, err)
			defer h.Free()
			require.NoError(t, b.Copy(x, h))
			assert.Equal(t, int64(4600), s.Allocated(), "host memory is not the device's")
			st, err := b.NewStream()
			require.NoError(t, err)
			defer st.Close()
			ob, err := b.On(st)
			require.NoError(t, err)
			assert.Equal(t, int64(4600), ob.Allocated(), "another stream's backend: the same device")

			require.NoError(t, b.Scale([]*tensor.Tensor{x}, 2)) // queued work the free waits for
			require.NoError(t, x.Free())
			assert.Equal(t, int64(600), s.Allocated(), "Free takes the bytes off at once")
			require.NoError(t, b.Synchronize(context.Background()))
			require.Eventually(t, func() bool { return s.Reserved() == 600 }, 5*time.Second, time.Millisecond,
				"the memory goes once the work before the Free has run")
			assert.Equal(t, int64(4600), s.PeakAllocated())
			assert.Equal(t, int64(4600), s.PeakReserved())
			s.ResetPeak()
			assert.Equal(t, int64(600), s.PeakAllocated())
			assert.Equal(t, int64(600), s.PeakReserved())
			require.NoError(t, y.Free())
			assert.Zero(t, s.Allocated())
			require.NoError(t, b.Synchronize(context.Background()))
			require.Eventually(t, func() bool { return s.Reserved() == 0 }, 5*time.Second, time.Millisecond)
		})
	}
}
