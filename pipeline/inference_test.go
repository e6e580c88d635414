package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewInference: a pipeline trained under 1F1B or GPipe evaluates with
// DeepSpeed's InferenceSchedule, step for step; one trained under the
// interleaved schedule evaluates with its forward half, which the lockstep
// simulator runs as an inference schedule (every transfer meets its
// partner, each micro-batch and chunk forwarded once, no buffer
// overwritten while live, none left held) in the training schedule's
// forward order. Arguments NewTraining refuses are refused.
func TestNewInference(t *testing.T) {
	for _, typ := range []string{"", "1F1B", "gpipe"} {
		for stages := 1; stages <= 4; stages++ {
			for mb := 1; mb <= 5; mb++ {
				for s := range stages {
					got, err := NewInference(typ, 1, mb, stages, s)
					require.NoError(t, err)
					want, err := NewInferenceSchedule(mb, stages, s)
					require.NoError(t, err)
					assert.Equal(t, want.Steps(), got.Steps(), "%q stages=%d mb=%d stage %d", typ, stages, mb, s)
					assert.Equal(t, 2, got.NumPipeBuffers())
				}
			}
		}
	}
	for stages := 1; stages <= 4; stages++ {
		for virtual := 2; virtual <= 3; virtual++ {
			for mb := stages; mb <= 8; mb += stages {
				name := fmt.Sprintf("stages=%d virtual=%d micro_batches=%d", stages, virtual, mb)
				scheds := make([]Schedule, stages)
				for s := range stages {
					var err error
					scheds[s], err = NewInference("interleaved", virtual, mb, stages, s)
					require.NoError(t, err, name)
				}
				_, err := simulateChunks(scheds, mb, virtual, false)
				require.NoError(t, err, name)
				for s, sc := range scheds {
					train, err := NewInterleavedSchedule(virtual, mb, stages, s)
					require.NoError(t, err)
					var want []string
					for _, o := range computeOrder(t, train) {
						if strings.HasPrefix(o, "F ") {
							want = append(want, o)
						}
					}
					got := computeOrder(t, sc)
					assert.True(t, slices.Equal(want, got), "%s stage %d: forward order\n got %v\nwant %v", name, s, got, want)
					assert.Len(t, sc.Steps(), len(train.Steps()), "%s stage %d: steps", name, s)
					assert.Equal(t, train.NumPipeBuffers(), sc.NumPipeBuffers(), "%s stage %d: buffers", name, s)
				}
			}
		}
	}
	for _, c := range []struct {
		typ             string
		virtual, mb, st int
		want            string
	}{
		{"Interleaved", 2, 3, 2, "multiple of stages"},
		{"Interleaved", 1, 2, 2, "at least 2"},
		{"1F1B", 2, 2, 2, "must be 1"},
		{"GPipe", 1, 0, 2, "microBatches"},
		{"Zigzag", 1, 2, 2, "not one of"},
	} {
		_, err := NewInference(c.typ, c.virtual, c.mb, c.st, 0)
		assert.ErrorIs(t, err, ErrInvalidArgument, "%+v", c)
		assert.ErrorContains(t, err, c.want, "%+v", c)
	}
}
