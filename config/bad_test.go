package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBadConfigs asserts the message of each error: path, value and what is allowed.
func TestBadConfigs(t *testing.T) {
	cases := []struct {
		name, doc string
		opts      []Option
		want      []string // substrings of one FieldError each: "path|value|allowed"
	}{
		{"fp16 and bf16", `{"fp16":{"enabled":true},"bf16":{"enabled":true}}`, nil,
			[]string{"bf16.enabled|true|false when fp16.enabled is true"}},
		{"nvme without path", `{"zero_optimization":{"stage":3,"offload_param":{"device":"nvme"}}}`, nil,
			[]string{`zero_optimization.offload_param.nvme_path|<absent>|required when device is "nvme"`}},
		{"bad stage", `{"zero_optimization":{"stage":4}}`, nil,
			[]string{"zero_optimization.stage|4|an integer >= 0 and <= 3"}},
		{"batch triad no world fits", `{"train_batch_size":100,"train_micro_batch_size_per_gpu":8,"gradient_accumulation_steps":3}`, nil,
			[]string{"train_batch_size|100|a multiple of train_micro_batch_size_per_gpu × gradient_accumulation_steps = 8 × 3 = 24"}},
		{"misspelled zero key", `{"zero_optimization":{"stgae":2}}`, nil,
			[]string{`zero_optimization.stgae|2|a known key; did you mean "stage"?`}},
		{"misspelled fp16 key", `{"fp16":{"enabled":true,"loss_scale_windw":100}}`, nil,
			[]string{`fp16.loss_scale_windw|100|a known key; did you mean "loss_scale_window"?`}},
		{"stage string", `{"zero_optimization":{"stage":"two"}}`, nil,
			[]string{`zero_optimization.stage|"two"|an integer`}},
		{"bad device", `{"zero_optimization":{"offload_optimizer":{"device":"gpu"}}}`, nil,
			[]string{`zero_optimization.offload_optimizer.device|"gpu"|one of "none", "cpu", "nvme"`}},
		{"pipeline with zero3", `{"pipeline_model_parallel_size":2,"zero_optimization":{"stage":3}}`, nil,
			[]string{"zero_optimization.stage|3|0 or 1 with pipeline_model_parallel_size > 1"}},
		{"sequence parallel disabled beside its size", `{"sequence_parallel_size":2,"sequence_parallel":{"enabled":false}}`, nil,
			[]string{"sequence_parallel.enabled|false|true, or no key: sequence_parallel_size 2 shards the sequence"}},
		{"negative batch", `{"train_batch_size":-8}`, nil,
			[]string{"train_batch_size|-8|an integer >= 1"}},
		{"fractional micro batch", `{"train_micro_batch_size_per_gpu":2.5}`, nil,
			[]string{"train_micro_batch_size_per_gpu|2.5|an integer >= 1"}},
		{"bool enabled as string", `{"fp16":{"enabled":"yes"}}`, nil,
			[]string{`fp16.enabled|"yes"|true or false`}},
		{"loss scale window 0", `{"fp16":{"enabled":true,"loss_scale_window":0}}`, nil,
			[]string{"fp16.loss_scale_window|0|an integer >= 1"}},
		{"min loss scale 0", `{"fp16":{"min_loss_scale":0}}`, nil,
			[]string{"fp16.min_loss_scale|0|a number > 0"}},
		{"negative clipping", `{"gradient_clipping":-1}`, nil,
			[]string{"gradient_clipping|-1|a number >= 0"}},
		{"unknown optimizer", `{"optimizer":{"type":"Adamm","params":{"lr":0.1}}}`, nil,
			[]string{`optimizer.type|"Adamm"|a DeepSpeed optimizer`}},
		{"optimizer without type", `{"optimizer":{"params":{"lr":0.1}}}`, nil,
			[]string{"optimizer.type|<absent>|a string"}},
		{"bad betas", `{"optimizer":{"type":"Adam","params":{"betas":[0.9]}}}`, nil,
			[]string{"optimizer.params.betas|[0.9]|an array of two numbers in [0, 1)"}},
		{"negative lr", `{"optimizer":{"type":"Adam","params":{"lr":-0.1}}}`, nil,
			[]string{"optimizer.params.lr|-0.1|a number >= 0"}},
		{"max_grad_norm", `{"optimizer":{"type":"Adam","params":{"max_grad_norm":1.0}}}`, nil,
			[]string{"optimizer.params.max_grad_norm|1|gradient_clipping"}},
		{"unknown scheduler", `{"scheduler":{"type":"WarmupLinear"}}`, nil,
			[]string{`scheduler.type|"WarmupLinear"|a DeepSpeed schedule`}},
		{"decay without total", `{"scheduler":{"type":"WarmupDecayLR","params":{"warmup_num_steps":10}}}`, nil,
			[]string{"scheduler.params.total_num_steps|<absent>|required by WarmupDecayLR"}},
		{"warmup type", `{"scheduler":{"type":"WarmupLR","params":{"warmup_type":1}}}`, nil,
			[]string{`scheduler.params.warmup_type|1|a string`}},
		{"comm dtype", `{"communication_data_type":"int8"}`, nil,
			[]string{`communication_data_type|"int8"|one of "fp16", "bf16", "fp32"`}},
		{"pipeline schedule", `{"pipeline_schedule":"ZeroBubble"}`, nil,
			[]string{`pipeline_schedule.type|"ZeroBubble"|one of "1F1B", "GPipe", "Interleaved"`}},
		{"pipeline stages quoted", `{"pipeline":{"stages":"3"}}`, nil,
			[]string{`pipeline.stages|"3"|"auto" or a whole number of stages >= 1`}},
		{"pipeline stages 0", `{"pipeline":{"stages":0}}`, nil,
			[]string{`pipeline.stages|0|"auto" or a whole number of stages >= 1`}},
		{"pipeline stages negative", `{"pipeline":{"stages":-2}}`, nil,
			[]string{`pipeline.stages|-2|"auto" or a whole number of stages >= 1`}},
		{"virtual stages without interleaved", `{"pipeline_schedule":{"type":"1F1B","virtual_stages":4}}`, nil,
			[]string{`pipeline_schedule.virtual_stages|4|1 unless type is "Interleaved"`}},
		{"ratio below 1 at stage 2", `{"zero_optimization":{"stage":2,"offload_optimizer":{"device":"cpu","ratio":0.5}}}`, nil,
			[]string{"zero_optimization.offload_optimizer.ratio|0.5|1.0 unless zero_optimization.stage is 3"}},
		{"onebit with zero", `{"zero_optimization":{"stage":1},"optimizer":{"type":"OneBitAdam"}}`, nil,
			[]string{`optimizer.type|"OneBitAdam"|compatible with ZeRO`}},
		{"lamb static scale", `{"fp16":{"enabled":true,"loss_scale":128},"optimizer":{"type":"Lamb"}}`, nil,
			[]string{"fp16.loss_scale|128|0 (dynamic)"}},
		{"amp enabled", `{"amp":{"enabled":true,"opt_level":"O1"}}`, nil,
			[]string{"amp.enabled|true|apex amp is not supported"}},
		{"legacy stage1", `{"zero_optimization":{"stage":1,"legacy_stage1":true}}`, nil,
			[]string{"zero_optimization.legacy_stage1|true|false"}},
		{"both old and new", `{"zero_optimization":{"cpu_offload":true,"offload_optimizer":{"device":"cpu"}}}`, nil,
			[]string{"zero_optimization.cpu_offload|true|only one of cpu_offload and offload_optimizer"}},
		{"bf16 and bfloat16", `{"bf16":{"enabled":true},"bfloat16":{"enabled":true}}`, nil,
			[]string{"bfloat16|an object|only one of bfloat16 and bf16"}},
		{"contiguous without partition", `{"activation_checkpointing":{"contiguous_memory_optimization":true}}`, nil,
			[]string{"activation_checkpointing.contiguous_memory_optimization|true|false unless partition_activations is true"}},
		{"prescale with ZeRO-2 reduce_scatter", `{"prescale_gradients":true,"zero_optimization":{"stage":2}}`, nil,
			[]string{"prescale_gradients|true|false at ZeRO stage 2 with zero_optimization.reduce_scatter true"}},
		{"predivide with ZeRO-3", `{"gradient_predivide_factor":8,"zero_optimization":{"stage":3}}`, nil,
			[]string{"gradient_predivide_factor|8|1 at ZeRO stage 3 with zero_optimization.reduce_scatter true"}},
		{"sum with stage 3", `{"gradient_allreduce_op":"sum","zero_optimization":{"stage":3}}`, nil,
			[]string{`gradient_allreduce_op|"sum"|"mean" with ZeRO stage 3`}},
		{"checkpoint type", `{"checkpoint":{"checkpoint_type":"zip"}}`, nil,
			[]string{`checkpoint.checkpoint_type|"zip"|one of "sharded", "blob"`}},
		{"tag validation", `{"checkpoint":{"tag_validation":"Maybe"}}`, nil,
			[]string{`checkpoint.tag_validation|"Maybe"|one of "Warn", "Ignore", "Fail"`}},
		{"section not object", `{"fp16":true}`, nil,
			[]string{"fp16|true|an object"}},
		{"param dtype mismatch", `{"bf16":{"enabled":true},"data_types":{"param_dtype":"fp16"}}`, nil,
			[]string{`data_types.param_dtype|"fp16"|"bf16"`}},
		{"batch disagrees", `{"train_batch_size":32,"train_micro_batch_size_per_gpu":3,"gradient_accumulation_steps":2}`, []Option{WithWorld(4)},
			[]string{"train_batch_size|train_batch_size=32, train_micro_batch_size_per_gpu=3, gradient_accumulation_steps=2|train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel size"}},
		{"no batch keys with world", `{"gradient_accumulation_steps":2}`, []Option{WithWorld(4)},
			[]string{"train_micro_batch_size_per_gpu|gradient_accumulation_steps=2|at least one of train_batch_size and train_micro_batch_size_per_gpu"}},
		{"tp does not divide world", `{"train_micro_batch_size_per_gpu":1,"tensor_model_parallel_size":3}`, []Option{WithWorld(8)},
			[]string{"tensor_model_parallel_size|3|tp × pp × sp dividing the world size 8"}},
		{"hpz does not divide world", `{"train_micro_batch_size_per_gpu":1,"zero_optimization":{"stage":3,"zero_hpz_partition_size":3}}`, []Option{WithWorld(8)},
			[]string{"zero_optimization.zero_hpz_partition_size|3|a divisor of the world size 8"}},
		{"strict unknown", `{"zero_optimization":{"stage3_param_persitence_threshold":10}}`, []Option{WithStrict(true)},
			[]string{`zero_optimization.stage3_param_persitence_threshold|10|a known key; did you mean "stage3_param_persistence_threshold"?`}},
		{"strict unresolved auto", `{"optimizer":{"type":"AdamW","params":{"lr":"auto"}}}`, []Option{WithStrict(true)},
			[]string{`optimizer.params.lr|"auto"|a concrete value`}},
		{"elasticity", `{"elasticity":{"enabled":true}}`, nil,
			[]string{"elasticity.enabled|true|false (elastic training is recognised but not supported"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc), c.opts...)
			var es Errors
			require.ErrorAs(t, err, &es)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			for _, w := range c.want {
				parts := strings.SplitN(w, "|", 3)
				found := false
				for _, e := range es {
					if e.Path == parts[0] && strings.Contains(e.Value, parts[1]) && strings.Contains(e.Allowed, parts[2]) {
						found = true
					}
				}
				assert.True(t, found, "want error at %s with value %q allowing %q; got:\n%v", parts[0], parts[1], parts[2], err)
			}
		})
	}
}

// TestErrorsCollected checks that one document reports every problem, not only the first.
func TestErrorsCollected(t *testing.T) {
	_, err := Parse([]byte(`{"train_batch_size": "x", "fp16": {"enabled": true, "hysteresis": 0},
		"bf16": {"enabled": true}, "zero_optimization": {"stage": 9}}`))
	var es Errors
	require.ErrorAs(t, err, &es)
	require.Len(t, es, 4, "want 4 errors, got %v", err)
}

func TestSyntaxAndDuplicates(t *testing.T) {
	_, err := Parse([]byte(`{"a": {"b": 1, "b": 2}}`))
	var dk *DuplicateKeyError
	require.ErrorAs(t, err, &dk, "duplicate")
	require.Equal(t, "b", dk.Key, "duplicate")
	require.ErrorContains(t, err, "Duplicate keys in DeepSpeed config: ['b']", "duplicate")
	_, err = Parse([]byte(`{"a": [1, 2}`))
	var se *SyntaxError
	require.ErrorAs(t, err, &se, "syntax")
	_, err = Parse([]byte(`[1, 2]`))
	require.ErrorAs(t, err, &se, "array root")
	require.ErrorContains(t, err, "must be an object", "array root")
	// a UTF-8 byte-order mark is skipped, as hjson-py (DeepSpeed's reader) skips it
	c, err := Parse([]byte("\xef\xbb\xbf{\"train_batch_size\": 8}"))
	require.NoError(t, err, "byte-order mark")
	require.Equal(t, 8, *c.TrainBatchSize)
}
