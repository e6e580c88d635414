package zero

import (
	"context"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Upcoming names the next modules of the trace that are not gathered, in
// trace order, once each, skipping persistent and gathered ones (every
// module is released after use here), and nothing
// while the first order is being recorded.
func TestCoordinatorUpcoming(t *testing.T) {
	c := NewCoordinator(CoordinatorConfig{MaxReuseDistance: -1}, []int64{10, 10, 10, 10}, []bool{false, true, false, false})
	order := []int{0, 1, 2, 3, 3, 2, 1, 0}
	for _, m := range order {
		c.Fetch(m)
		assert.Empty(t, c.Upcoming(4), "recording")
		c.Release(m)
	}
	c.ResetStep()
	for i, want := range [][]int{{2, 3}, {2, 3, 0}, {3, 0}, {2, 0}, {2, 0}, {0}, {0}, {}} {
		c.Fetch(order[i])
		got := c.Upcoming(4)
		if len(want) == 0 {
			assert.Empty(t, got, "after fetching %d (position %d)", order[i], i)
		} else {
			assert.Equal(t, want, got, "after fetching %d (position %d)", order[i], i)
		}
		c.Release(order[i])
	}
	c.ResetStep()
	c.Fetch(0)
	assert.Equal(t, []int{2}, c.Upcoming(1), "at most k")
}

// HostParams and PinnedHostParams keep every partition in host memory:
// what is written is what is acquired, and its usage is the partitions'
// bytes, which the pinned store reports as pinned.
func TestHostParams(t *testing.T) {
	cpu, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer cpu.Close()
	for _, tc := range []struct {
		name   string
		store  NewParamStore
		pinned int64
	}{{"HostParams", HostParams, 0}, {"PinnedHostParams", PinnedHostParams(cpu), 16}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.store(tensor.BFloat16, []string{"a", "b"}, []int{3, 5})
			require.NoError(t, err)
			defer s.Close()
			ctx := context.Background()
			require.NoError(t, s.Write(ctx, 1, func(dst *tensor.Tensor) error {
				v, err := dst.Uint16s()
				for i := range v {
					v[i] = uint16(7 + i)
				}
				return err
			}))
			got, err := s.Acquire(ctx, 1)
			require.NoError(t, err)
			v, err := got.Uint16s()
			require.NoError(t, err)
			assert.Equal(t, []uint16{7, 8, 9, 10, 11}, v)
			s.Release(1)
			resident, peak, disk := s.SwapUsage()
			assert.Equal(t, [3]int64{16, 16, 0}, [3]int64{resident, peak, disk})
			assert.Equal(t, 2, s.Buffers())
			assert.Equal(t, tc.pinned, s.(interface{ PinnedBytes() int64 }).PinnedBytes())
		})
	}
}
