package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// megatron_sequence_parallel is read, defaults to false, and without a TP
// group to split over it is a warning naming the key (Megatron disables it
// with a warning too), not a silent no-op.
func TestMegatronSequenceParallelKey(t *testing.T) {
	for _, tc := range []struct {
		json       string
		want, warn bool
	}{
		{`{"train_micro_batch_size_per_gpu":1}`, false, false},
		{`{"train_micro_batch_size_per_gpu":1,"tensor_model_parallel_size":2,"megatron_sequence_parallel":true}`, true, false},
		{`{"train_micro_batch_size_per_gpu":1,"megatron_sequence_parallel":true}`, true, true},
	} {
		c := mustParse(t, tc.json)
		assert.Equal(t, tc.want, c.MegatronSequenceParallel, tc.json)
		assert.Equal(t, tc.warn, warned(c, "megatron_sequence_parallel", "tensor_model_parallel_size is 1"), "%s: %v", tc.json, c.Warnings)
	}
}
