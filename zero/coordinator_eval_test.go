package zero

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// An evaluation's forwards, in whatever mode the trace is, leave it as
// they found it: the trace of a recorded step, a recording in progress
// (which the next training micro-step still turns into the trace), no
// invalidation when the evaluation runs other modules, and nothing
// gathered after EndEval but the persistent modules.
func TestCoordinatorEval(t *testing.T) {
	trace := []int{0, 1, 2, 2, 1, 0} // forward, then backward
	numel := []int64{100, 100, 100}
	cfg := CoordinatorConfig{PrefetchBucketSize: 1000, MaxLiveParameters: 1e9, MaxReuseDistance: 1e9}
	step := func(co *Coordinator) {
		co.ResetStep()
		for _, m := range trace {
			co.Fetch(m)
			co.Release(m)
		}
	}
	eval := func(co *Coordinator, forwards ...[]int) {
		co.BeginEval()
		for _, f := range forwards {
			co.ResetStep()
			for _, m := range f {
				co.Fetch(m)
				co.Release(m)
			}
		}
		co.EndEval()
	}
	for _, c := range []struct {
		name     string
		before   int     // training micro-steps before the evaluation
		forwards [][]int // the evaluation's module orders
		prefetch int     // prefetches the evaluation starts
	}{
		// module 1 is prefetched at module 0's fetch; both are then held
		// (the trace's backward uses them), so the second forward gathers
		// nothing
		{"trace complete, eval follows it", 2, [][]int{{0, 1, 2}, {0, 1, 2}}, 1},
		// module 1 prefetched, then module 2 where the trace says 1
		{"trace complete, eval leaves it", 2, [][]int{{0, 2}}, 1},
		{"recording done, not yet the trace", 1, [][]int{{0, 1, 2}}, 0},
		{"nothing recorded", 0, [][]int{{0, 1, 2}}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			co := NewCoordinator(cfg, numel, []bool{false, false, true})
			ref := NewCoordinator(cfg, numel, []bool{false, false, true})
			for range c.before {
				step(co)
				step(ref)
			}
			co.ReleaseAll() // the optimizer step's
			ref.ReleaseAll()
			pre := co.Stats()
			eval(co, c.forwards...)
			s := co.Stats()
			assert.Equal(t, c.prefetch, s.Prefetches-pre.Prefetches, "prefetches during the evaluation")
			assert.Zero(t, s.Invalidations, "invalidations")
			assert.Equal(t, ref.Mode(), co.Mode(), "mode after the evaluation")
			assert.Equal(t, ref.Trace(), co.Trace(), "trace after the evaluation")
			assert.Equal(t, s.PersistentNumel, s.LiveNumel+s.PersistentNumel, "live elements after EndEval: %+v", s)
			for m := range numel {
				assert.Equal(t, ref.Available(m), co.Available(m), "module %d available", m)
			}
			// training goes on as if there had been no evaluation
			for range 2 {
				co.ResetStep()
				ref.ResetStep()
				for i, m := range trace {
					assert.Equal(t, ref.Fetch(m), co.Fetch(m), "fetch %d", i)
					assert.Equal(t, ref.Release(m), co.Release(m), "release %d", i)
				}
			}
			assert.Equal(t, ref.Trace(), co.Trace(), "trace after training")
			assert.Zero(t, co.Stats().Invalidations, "invalidations")
		})
	}
}
