package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// deepgo train reads sequence_parallel_size: world = sp × dp in-process
// ranks, each SP rank training on its shard of its data rank's sequences;
// the final loss is SP 1's (to float32 summation order) with less memory
// per rank (with pipeline stages see train_sp_pipe_test.go, with TP
// train_tp_sp_test.go).
func TestTrainSequenceParallel(t *testing.T) {
	dir := t.TempDir()
	res := map[int]trainResult{}
	for _, sp := range []int{1, 2} {
		r, out := trainParallel(t, dir, "sequence_parallel_size", sp)
		res[sp] = r
		if sp == 2 {
			assert.Contains(t, out, "sequence parallel (Ulysses): 2 ranks x 2 data-parallel ranks, 8 tokens")
		}
	}
	t.Logf("final loss SP 1 %.6f, SP 2 %.6f; peak memory rank 0: SP 1 %d, SP 2 %d bytes", res[1].FinalLoss, res[2].FinalLoss, res[1].PeakMemory[0], res[2].PeakMemory[0])
	assert.Equal(t, 2, res[1].Ranks)
	assert.Equal(t, 4, res[2].Ranks)
	assert.Less(t, res[2].PeakMemory[0], res[1].PeakMemory[0], "memory per rank at SP 2 vs 1")
	assert.LessOrEqual(t, math.Abs(res[2].FinalLoss-res[1].FinalLoss)/res[1].FinalLoss, 1e-5, "final loss SP 2 %v vs SP 1 %v", res[2].FinalLoss, res[1].FinalLoss)

}
