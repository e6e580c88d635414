//go:build cuda

package cuda

import (
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryStats: Malloc's N bytes raise the device's Allocated and peak
// by N, Free takes them off, ResetPeak brings the peak to the count, and
// Reserved follows Allocated; host tensors do not count.
func TestMemoryStats(t *testing.T) {
	_, gpu := setup(t)
	var s backend.MemoryStats = gpu
	s.ResetPeak()
	a0 := s.Allocated()
	x, err := gpu.Empty(tensor.Float32, 1<<20)
	require.NoError(t, err)
	h, err := tensor.Empty(tensor.Float32, 1000)
	require.NoError(t, err)
	defer h.Free()
	assert.Equal(t, a0+4<<20, s.Allocated())
	assert.Equal(t, a0+4<<20, s.PeakAllocated())
	assert.Equal(t, s.Allocated(), s.Reserved())
	require.NoError(t, x.Free())
	assert.Equal(t, a0, s.Allocated())
	assert.Equal(t, a0+4<<20, s.PeakReserved())
	s.ResetPeak()
	assert.Equal(t, a0, s.PeakAllocated())
}
