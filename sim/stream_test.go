package sim_test

import (
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The delay mode catches a missing event: stream B reading what stream A
// writes without waiting for A's event sees stale data in some runs; with
// B waiting on the event it never does.
func TestDelaysCatchMissingEvent(t *testing.T) {
	const trials, n = 20, 64
	a := newSim(t, 0, 2*time.Millisecond)
	sb, err := a.NewStream()
	require.NoError(t, err)
	defer sb.Close()
	b, err := a.On(sb)
	require.NoError(t, err)
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	h, err := tensor.WrapFloat32(ones)
	require.NoError(t, err)
	defer h.Free()
	for _, withEvent := range []bool{false, true} {
		stale := 0
		for range trials {
			x, err := a.Empty(tensor.Float32, n)
			require.NoError(t, err)
			y, err := a.Empty(tensor.Float32, n)
			require.NoError(t, err)
			require.NoError(t, a.Copy(x, h)) // on A: x = 1, then 2
			require.NoError(t, a.Scale([]*tensor.Tensor{x}, 2))
			if withEvent {
				ev := a.NewEvent()
				require.NoError(t, ev.Record(a.Stream()))
				require.NoError(t, sb.Wait(ev))
			}
			require.NoError(t, b.Copy(y, x)) // on B
			got := floats(t, b, y)
			if got[0] != 2 || got[n-1] != 2 {
				stale++
			}
			require.NoError(t, x.Free())
			require.NoError(t, y.Free())
		}
		if withEvent {
			assert.Zero(t, stale, "with the event B must see A's writes")
		} else {
			assert.Positive(t, stale, "without the event some of %d trials must see stale data", trials)
		}
	}
}

// Event.Synchronize and Backend.Synchronize make the host wait, and give
// up when ctx ends.
func TestSynchronizeWaitsAndHonoursContext(t *testing.T) {
	b := newSim(t, 0, 20*time.Millisecond)
	x, err := b.Empty(tensor.Float32, 8)
	require.NoError(t, err)
	defer x.Free()
	ev := b.NewEvent()
	require.NoError(t, ev.Synchronize(ctx(t)), "an event never recorded is done")
	for range 10 {
		require.NoError(t, b.Scale([]*tensor.Tensor{x}, 2))
	}
	require.NoError(t, ev.Record(b.Stream()))
	short, cancel := contextWithTimeout(t, time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, b.Synchronize(short), errDeadline)
	assert.ErrorIs(t, ev.Synchronize(short), errDeadline)
	require.NoError(t, ev.Synchronize(ctx(t)))
	require.NoError(t, b.Synchronize(ctx(t)))
}
