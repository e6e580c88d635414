package backend

import (
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCPUMemoryStats: the CPU backend's device memory is the host memory
// package tensor allocates: Empty's N bytes raise Allocated and the peak
// by N, Free takes them off, ResetPeak brings the peak down to the count,
// and Reserved follows Allocated (nothing is cached).
func TestCPUMemoryStats(t *testing.T) {
	b := newCPU(t, 1)
	s, ok := StatsOf(b)
	require.True(t, ok)
	s.ResetPeak()
	a0 := s.Allocated()
	x, err := b.Empty(tensor.Float32, 256, 4)
	require.NoError(t, err)
	assert.Equal(t, a0+4096, s.Allocated())
	assert.Equal(t, a0+4096, s.PeakAllocated())
	assert.Equal(t, s.Allocated(), s.Reserved())
	require.NoError(t, x.Free())
	assert.Equal(t, a0, s.Allocated())
	assert.Equal(t, a0+4096, s.PeakAllocated(), "the peak stays until reset")
	assert.Equal(t, a0+4096, s.PeakReserved())
	s.ResetPeak()
	assert.Equal(t, a0, s.PeakAllocated())
}

// onDevice is a backend that reports another device and has no counters.
type onDevice struct {
	Backend
	dev tensor.Device
}

func (o onDevice) Device() tensor.Device { return o.dev }

// TestStatsOf: a backend's own counters, the host's for a backend on the
// host without them, none for a device backend without them.
func TestStatsOf(t *testing.T) {
	b := newCPU(t, 1)
	s, ok := StatsOf(b)
	require.True(t, ok)
	assert.Same(t, b, s)
	s, ok = StatsOf(onDevice{b, tensor.CPU})
	require.True(t, ok)
	assert.Equal(t, HostStats(), s)
	_, ok = StatsOf(onDevice{b, tensor.Sim(0)})
	assert.False(t, ok)
}
