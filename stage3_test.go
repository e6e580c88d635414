package deepgo_test

import (
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStage3Knobs: prefetch, persistence, max-live and reuse distance are
// honoured and observable through Stage3Stats.
func TestStage3Knobs(t *testing.T) {
	// fc1 144, fc2 272, fc3 68 elements
	cases := []struct {
		name  string
		extra string
		check func(t *testing.T, s zero.CoordinatorStats)
	}{
		{"no prefetch", `, "stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0`, func(t *testing.T, s zero.CoordinatorStats) {
			assert.Zero(t, s.Prefetches, "prefetches")
		}},
		{"prefetch", `, "stage3_prefetch_bucket_size": 1000, "stage3_param_persistence_threshold": 0`, func(t *testing.T, s zero.CoordinatorStats) {
			assert.NotZero(t, s.Prefetches, "no prefetches")
		}},
		{"max live", `, "stage3_prefetch_bucket_size": 1000, "stage3_max_live_parameters": 300, "stage3_param_persistence_threshold": 0`, func(t *testing.T, s zero.CoordinatorStats) {
			assert.LessOrEqual(t, s.PeakLiveNumel, int64(300+272), "peak live elements with max_live 300")
		}},
		{"persistence", `, "stage3_param_persistence_threshold": 150`, func(t *testing.T, s zero.CoordinatorStats) {
			assert.Equal(t, 2, s.PersistentModules, "persistent modules")
			assert.Equal(t, int64(144+68), s.PersistentNumel, "persistent elements")
		}},
		{"reuse distance", `, "stage3_prefetch_bucket_size": 0, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 1000000`, func(t *testing.T, s zero.CoordinatorStats) {
			assert.NotZero(t, s.ReuseHolds, "no releases held by the reuse distance")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stats zero.CoordinatorStats
			r := run{stage: 3, world: 2, gas: 2, zeroExtra: c.extra, steps: 3}
			r.hook = func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) {
				if rank == 0 {
					stats = e.Stage3Stats()
				}
			}
			_, err := train(t, r)
			require.NoError(t, err)

			t.Logf("%+v", stats)
			c.check(t, stats)
		})
	}
}
