package pipeline

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGPipeShape(t *testing.T) {
	tests := []struct {
		microBatches, stages, stageID int
		wantBuffers, wantSteps        int
	}{
		{1, 1, 0, 1, 2},
		{4, 1, 0, 4, 8},
		{1, 4, 3, 1, 8},
		{4, 2, 0, 4, 10},
		{4, 2, 1, 4, 10},
		{8, 4, 0, 8, 22},
		{8, 4, 3, 8, 22},
	}
	for _, tt := range tests {
		s, err := NewGPipeSchedule(tt.microBatches, tt.stages, tt.stageID)
		require.NoError(t, err)
		assert.Equal(t, tt.wantBuffers, s.NumPipeBuffers(), "mb=%d stages=%d stage=%d: NumPipeBuffers", tt.microBatches, tt.stages, tt.stageID)
		assert.Len(t, s.Steps(), tt.wantSteps, "mb=%d stages=%d stage=%d: steps", tt.microBatches, tt.stages, tt.stageID)
	}
}

// TestGPipeSteps pins the whole instruction stream of a small pipeline.
func TestGPipeSteps(t *testing.T) {
	want := map[int][]string{
		0: {
			"[LoadMicroBatch(buffer_id=0), ForwardPass(buffer_id=0)]",
			"[SendActivation(buffer_id=0), LoadMicroBatch(buffer_id=1), ForwardPass(buffer_id=1)]",
			"[SendActivation(buffer_id=1)]",
			"[]",
			"[RecvGrad(buffer_id=0), BackwardPass(buffer_id=0)]",
			"[RecvGrad(buffer_id=1), BackwardPass(buffer_id=1), ReduceTiedGrads(), ReduceGrads(), OptimizerStep()]",
		},
		1: {
			"[]",
			"[RecvActivation(buffer_id=0), LoadMicroBatch(buffer_id=0), ForwardPass(buffer_id=0)]",
			"[RecvActivation(buffer_id=1), LoadMicroBatch(buffer_id=1), ForwardPass(buffer_id=1)]",
			"[BackwardPass(buffer_id=0)]",
			"[SendGrad(buffer_id=0), BackwardPass(buffer_id=1)]",
			"[SendGrad(buffer_id=1), ReduceTiedGrads(), ReduceGrads(), OptimizerStep()]",
		},
	}
	for stage, w := range want {
		s, err := NewGPipeSchedule(2, 2, stage)
		require.NoError(t, err)
		got := reprSteps(s.Steps())
		assert.True(t, slices.Equal(got, w), "stage %d:\n got %s\nwant %s", stage, strings.Join(got, "\n     "), strings.Join(w, "\n     "))
	}
}

// TestGPipePhases checks GPipe's defining order on every stage: all
// forwards (ascending) before any backward (ascending), each micro-batch in
// its own buffer.
func TestGPipePhases(t *testing.T) {
	for stages := 1; stages <= 4; stages++ {
		for mb := 1; mb <= 8; mb++ {
			for id := range stages {
				s, err := NewGPipeSchedule(mb, stages, id)
				require.NoError(t, err)
				var fwd, bwd []int
				for _, step := range s.Steps() {
					for _, in := range step {
						if in.Op.HasBuffer() {
							assert.Equal(t, in.MicroBatch, in.BufferID, "mb=%d stages=%d stage=%d: %v holds micro-batch %d", mb, stages, id, in, in.MicroBatch)
						}
						switch in.Op {
						case ForwardPass:
							assert.Empty(t, bwd, "mb=%d stages=%d stage=%d: forward %d after a backward", mb, stages, id, in.MicroBatch)
							fwd = append(fwd, in.MicroBatch)
						case BackwardPass:
							bwd = append(bwd, in.MicroBatch)
						}
					}
				}
				want := make([]int, mb)
				for i := range want {
					want[i] = i
				}
				assert.True(t, slices.Equal(fwd, want) && slices.Equal(bwd, want), "mb=%d stages=%d stage=%d: forwards %v, backwards %v, want %v each", mb, stages, id, fwd, bwd, want)
			}
		}
	}
}

// TestGPipeNeedsEveryBuffer shows NumPipeBuffers is tight: with one buffer
// fewer a live activation is overwritten.
func TestGPipeNeedsEveryBuffer(t *testing.T) {
	const stages = 3
	for mb := 2; mb <= 8; mb++ {
		scheds := make([]Schedule, stages)
		for s := range stages {
			sc, err := NewGPipeSchedule(mb, stages, s)
			require.NoError(t, err)
			steps := sc.Steps()
			n := sc.NumPipeBuffers() - 1
			for _, step := range steps {
				for i := range step {
					if step[i].Op.HasBuffer() {
						step[i].BufferID = step[i].MicroBatch % n
					}
				}
			}
			scheds[s] = fixedSchedule{steps, n}
		}
		assert.ErrorContains(t, simulate(scheds, mb, true), "still holds live", "mb=%d: with %d buffers: want a live-buffer overwrite", mb, mb-1)
	}
}
