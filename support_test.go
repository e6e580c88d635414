package deepgo_test

import (
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Unsupported names every key deepgo cannot train yet, and nothing for a
// config it trains (Ulysses with pipeline stages and with TP among them).
func TestUnsupported(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want []string
	}{
		{`{"train_micro_batch_size_per_gpu": 1, "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "megatron_sequence_parallel": true}`, nil},
		{`{"train_micro_batch_size_per_gpu": 1, "sequence_parallel_size": 2}`, nil},
		// qgZ loads with a config warning (no effect)
		{`{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "zero_quantized_gradients": true, "zero_hpz_partition_size": 2}}`, nil},
		{`{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "zero_quantized_nontrainable_weights": true}}`,
			[]string{"zero_optimization.zero_quantized_nontrainable_weights (ZeRO++): not supported yet"}},
		// below stage 3 it is ignored with a config warning, as DeepSpeed does
		{`{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "zero_quantized_nontrainable_weights": true}}`, nil},
		// qwZ and hpZ train at stage 3, together too, but hpZ not with its
		// parameters offloaded
		{`{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "zero_quantized_weights": true}}`, nil},
		{`{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2}}`, nil},
		{`{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2, "zero_quantized_weights": true}}`, nil},
		{`{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2, "offload_param": {"device": "cpu"}}}`,
			[]string{`zero_optimization.zero_hpz_partition_size 2 (ZeRO++ hpZ) with zero_optimization.offload_param.device "cpu": not supported yet`}},
		{`{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "mics_shard_size": 2}}`, []string{"mics_shard_size (MiCS)"}},
		{`{"train_micro_batch_size_per_gpu": 1, "sequence_parallel_size": 2, "pipeline_model_parallel_size": 2}`, nil},
		{`{"train_micro_batch_size_per_gpu": 1, "sequence_parallel_size": 2, "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2}`, nil},
		{`{"train_micro_batch_size_per_gpu": 1, "sequence_parallel_size": 2, "tensor_model_parallel_size": 2}`, nil},
		// Megatron-DeepSpeed refuses Ulysses with Megatron's SP too
		{`{"train_micro_batch_size_per_gpu": 1, "sequence_parallel_size": 2, "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "megatron_sequence_parallel": true}`,
			[]string{"sequence_parallel_size 2 (Ulysses) with megatron_sequence_parallel (tensor_model_parallel_size 2): not supported"}},
	} {
		cfg, err := config.Parse([]byte(c.doc))
		require.NoError(t, err, c.doc)
		err = deepgo.Unsupported(cfg)
		if c.want == nil {
			assert.NoError(t, err, c.doc)
			continue
		}
		for _, w := range c.want {
			assert.ErrorContains(t, err, w, c.doc)
		}
		// Ulysses with pipeline stages trains: only Megatron SP is named
		assert.NotContains(t, err.Error(), "pipeline", c.doc)
	}
}
