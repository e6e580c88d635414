package offload

import (
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The reads a plan issues before its first wait for a write are its first
// buffer_count groups, each into the buffer it steps in.
func TestLeadingReads(t *testing.T) {
	for _, c := range []struct {
		n    int
		o    PlanOptions
		want []Action
	}{
		{9, PlanOptions{Buffers: 4, PipelineRead: true, PipelineWrite: true}, []Action{{IssueRead, 0, 0}, {IssueRead, 1, 1}, {IssueRead, 2, 2}, {IssueRead, 3, 3}}},
		{3, PlanOptions{Buffers: 4, PipelineRead: true, PipelineWrite: true}, []Action{{IssueRead, 0, 0}, {IssueRead, 1, 1}, {IssueRead, 2, 2}}},
		{5, PlanOptions{Buffers: 2, PipelineRead: true}, []Action{{IssueRead, 0, 0}, {IssueRead, 1, 1}}},
		{5, PlanOptions{Buffers: 1}, []Action{{IssueRead, 0, 0}}},
	} {
		p, err := NewPlan(c.n, c.o)
		require.NoError(t, err)
		assert.Equal(t, c.want, p.leadingReads(), "%d groups, %+v", c.n, c.o)
	}
}

// With pipeline_read and pipeline_write a planned step ends with its last
// writes in flight and the next step's first reads behind them; the next
// step uses those reads rather than issuing its own, so a step reads each
// sub-group's state once; and without pipeline_write nothing is carried.
func TestCarriedAcrossSteps(t *testing.T) {
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	var state int64 // padded bytes of all sub-groups' state
	for _, shapes := range groupShapes {
		n := 0
		for _, s := range shapes {
			k := 1
			for _, d := range s {
				k *= d
			}
			n += k
		}
		state += int64((2*n*4 + 4095) &^ 4095)
	}
	for _, p := range []PlanOptions{{Buffers: 2, PipelineRead: true, PipelineWrite: true}, {Buffers: 2, PipelineRead: true}} {
		store := newStore(t, p, testAIO())
		o, err := optim.New("AdamW", map[string]any{"lr": 1e-2}, be, optim.WithStateStore(store))
		require.NoError(t, err)
		shards := makeShards(t, 2)
		for step := 1; step <= 4; step++ {
			require.NoError(t, store.join()) // the last prefetch issued: before counts it
			before := store.IOStats()
			require.NoError(t, stepAll(t, o, shards, step))
			assert.Equal(t, p.PipelineWrite && step > 1, store.carry != nil, "%+v step %d: I/O carried past the end", p, step)
			if step > 2 {
				// this step's own reads and the next one's prefetch, in
				// steady state as many as the last step prefetched
				require.NoError(t, store.join())
				got := store.IOStats().Sub(before)
				assert.Equal(t, state, got.ReadBytes, "%+v step %d: bytes read once per group", p, step)
				assert.Equal(t, state, got.WriteBytes, "%+v step %d: bytes written", p, step)
			}
		}
		require.NoError(t, o.Close())
	}
}
