package deepgo_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cpu_checkpointing's host copies are asynchronous: every kept boundary
// goes down while the next segment runs forward, and in backward each
// segment's input but the first restored comes back while the segment
// after it recomputes. Training stays bit-identical to no checkpointing
// with or without the simulated device's random delays, contiguous buffer
// included, and under the delays copies are found still in flight when
// the engine comes to wait: the segment's work overlapped them.
func TestCPUCheckpointingAsyncCopies(t *testing.T) {
	const steps = 3
	cpu := `"partition_activations": true, "cpu_checkpointing": true`
	for _, dev := range []string{"sim", "sim+delay"} {
		base := ckTrain(t, ckVariant{name: "none", dev: dev, steps: steps})
		for _, section := range []string{cpu, cpu + `, "contiguous_memory_optimization": true, "number_checkpoints": 3`} {
			t.Run(fmt.Sprintf("%s/%s", dev, section), func(t *testing.T) {
				got := ckTrain(t, ckVariant{name: "cpu", segments: true, section: section, dev: dev, steps: steps})
				assert.Equal(t, base.losses, got.losses, "losses")
				assert.Equal(t, base.params, got.params, "parameters")
				st := got.stats
				require.Equal(t, 3, st.Segments)
				assert.Zero(t, st.SavedBytes)
				assert.Positive(t, st.SavedHostBytes)
				// segments 1 and 2 keep their inputs (segment 0's is the
				// batch): per micro-step 2 copies down and 1 prefetch up
				// (segment 2's, restored first, is copied when needed);
				// 2 x 3 micro-steps trained, then one more forward
				assert.EqualValues(t, 2*steps*3+2, st.AsyncCopies)
				if dev == "sim+delay" {
					assert.Positive(t, st.CopiesInFlight, "copies overlapped by the segment's work")
				}
				assert.LessOrEqual(t, st.CopiesInFlight, st.AsyncCopies)
			})
		}
	}
}

// On the CPU backend cpu_checkpointing is a note: nothing is copied.
func TestCPUCheckpointingOnCPUCopiesNothing(t *testing.T) {
	got := ckTrain(t, ckVariant{name: "cpu", segments: true, section: `"partition_activations": true, "cpu_checkpointing": true`, steps: 1})
	assert.Zero(t, got.stats.AsyncCopies)
	assert.Zero(t, got.stats.SavedHostBytes)
}
