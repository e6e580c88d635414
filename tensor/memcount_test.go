package tensor

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemCounter: the count, its peak since the last reset, from many
// goroutines at once (-race).
func TestMemCounter(t *testing.T) {
	var c MemCounter
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Add(64)
				c.Add(-64)
			}
		})
	}
	wg.Wait()
	assert.Zero(t, c.Bytes())
	assert.LessOrEqual(t, c.Peak(), int64(8*64))
	assert.GreaterOrEqual(t, c.Peak(), int64(64))
	c.Add(100)
	c.Add(-40)
	c.ResetPeak()
	assert.Equal(t, int64(60), c.Peak(), "a reset peak is the count now")
	c.Add(10)
	c.Add(-30)
	assert.Equal(t, int64(70), c.Peak())
	assert.Equal(t, int64(40), c.Bytes())
}

// TestHostMemory: host storage counts in HostMemory from NewHostStorage
// to Free (once); Go memory wrapped without a copy does not.
func TestHostMemory(t *testing.T) {
	h := HostMemory()
	h.ResetPeak()
	before := h.Bytes()
	x, err := Empty(Float32, 1000)
	require.NoError(t, err)
	assert.Equal(t, before+4000, h.Bytes())
	assert.Equal(t, before+4000, h.Peak())
	w, err := WrapFloat32(make([]float32, 500))
	require.NoError(t, err)
	assert.Equal(t, before+4000, h.Bytes(), "a wrapped Go slice is not counted")
	require.NoError(t, w.Free())
	require.NoError(t, x.Free())
	require.ErrorIs(t, x.Free(), ErrFreed)
	assert.Equal(t, before, h.Bytes(), "a second Free takes nothing off")
	assert.Equal(t, before+4000, h.Peak())
	h.ResetPeak()
	assert.Equal(t, before, h.Peak())
}
