package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func warned(c *Config, path, substr string) bool {
	for _, w := range c.Warnings {
		if w.Path == path && strings.Contains(w.Msg, substr) {
			return true
		}
	}
	return false
}

func mustParse(t *testing.T, doc string, opts ...Option) *Config {
	t.Helper()
	c, err := Parse([]byte(doc), opts...)
	require.NoError(t, err, "Parse")
	return c
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, `{}`)
	z := c.ZeroOptimization
	assert.Equal(t, 0, z.Stage, "zero defaults")
	assert.Equal(t, 500000000, z.ReduceBucketSize, "zero defaults")
	assert.Equal(t, 500000000, z.AllgatherBucketSize, "zero defaults")
	assert.True(t, z.ContiguousGradients, "zero defaults")
	assert.Equal(t, 50000000, z.Stage3PrefetchBucketSize, "zero defaults")
	assert.Equal(t, 100000, z.Stage3ParamPersistenceThreshold, "zero defaults")
	assert.Equal(t, int(1e9), z.SubGroupSize, "zero defaults")
	assert.Equal(t, 16, c.FP16.InitialScalePower, "fp16 defaults")
	assert.Equal(t, 1000, c.FP16.LossScaleWindow, "fp16 defaults")
	assert.Equal(t, 2, c.FP16.Hysteresis, "fp16 defaults")
	assert.Equal(t, 1.0, c.FP16.MinLossScale, "fp16 defaults")
	assert.True(t, c.BF16.CheckGradOverflow, "bf16 defaults")
	assert.Equal(t, 1.0, c.GradientClipping, "gradient_clipping default")
	assert.Nil(t, c.StepsPerPrint, "steps_per_print default")
	assert.Equal(t, 1.0, c.GradientPredivideFactor, "gradient_predivide_factor default")
	assert.Equal(t, 1048576, c.AIO.BlockSize, "aio defaults")
	assert.Equal(t, 8, c.AIO.QueueDepth, "aio defaults")
	assert.Equal(t, 1, c.AIO.IntraOpParallelism, "aio defaults")
	assert.True(t, c.AIO.OverlapEvents, "aio defaults")
	assert.Equal(t, "Warn", c.Checkpoint.TagValidation, "checkpoint defaults")
	assert.True(t, c.Checkpoint.ZeroCheckpoint, "checkpoint defaults")
	assert.Equal(t, "sharded", c.Checkpoint.CheckpointType, "checkpoint defaults")
	assert.Equal(t, "1F1B", c.PipelineSchedule.Type, "parallel defaults")
	assert.Equal(t, 1, c.TensorModelParallelSize, "parallel defaults")
	assert.Equal(t, 1, c.PipelineModelParallelSize, "parallel defaults")
	c = mustParse(t, `{"zero_optimization":{"stage":3,"offload_param":{"device":"cpu"},"offload_optimizer":{"device":"cpu"}}}`)
	assert.Equal(t, 5, c.ZeroOptimization.OffloadParam.BufferCount, "offload_param defaults")
	assert.True(t, c.ZeroOptimization.OffloadParam.PinMemory, "offload_param defaults")
	assert.Equal(t, 4, c.ZeroOptimization.OffloadOptimizer.BufferCount, "offload_optimizer defaults")
	assert.Equal(t, 1.0, c.ZeroOptimization.OffloadOptimizer.Ratio, "offload_optimizer defaults")
	assert.False(t, c.IsSet("zero_optimization.offload_param.buffer_count"), "IsSet")
	assert.True(t, c.IsSet("zero_optimization.stage"), "IsSet")
}

func TestHjsonNumbersAndSyntax(t *testing.T) {
	c := mustParse(t, "# comment\ntrain_batch_size: 32.0\nsteps_per_print: 1e5 // x\nzero_optimization: {reduce_bucket_size: 5e8,}\n")
	assert.Equal(t, 32, *c.TrainBatchSize, "numbers")
	assert.Equal(t, 100000, *c.StepsPerPrint, "numbers")
	assert.Equal(t, 500000000, c.ZeroOptimization.ReduceBucketSize, "numbers")
	assert.Equal(t, 1e12, parseNumber("1e12"), "1e12 should stay float")
	assert.Equal(t, int64(1), parseNumber("1.0"), "1.0 should be int")
	assert.Equal(t, 2.5, parseNumber("2.5"))
}

func TestAuto(t *testing.T) {
	doc := `{"train_batch_size":"auto","train_micro_batch_size_per_gpu":4,"gradient_accumulation_steps":"auto",
	"gradient_clipping":"auto","fp16":{"enabled":"auto"},"bf16":{"enabled":"auto"},
	"zero_optimization":{"stage":3,"reduce_bucket_size":"auto","stage3_prefetch_bucket_size":"auto",
	"stage3_param_persistence_threshold":"auto","sub_group_size":"auto"},
	"optimizer":{"type":"AdamW","params":{"lr":"auto","betas":"auto","eps":"auto","weight_decay":"auto"}},
	"scheduler":{"type":"WarmupDecayLR","params":{"warmup_min_lr":"auto","warmup_max_lr":"auto","warmup_num_steps":"auto","total_num_steps":"auto"}},
	"steps_per_print":"auto"}`
	c := mustParse(t, doc, WithModelHidden(1024))
	z := c.ZeroOptimization
	assert.Equal(t, 1024*1024, z.ReduceBucketSize, "hidden-based autos")
	assert.Equal(t, 943718, z.Stage3PrefetchBucketSize, "hidden-based autos")
	assert.Equal(t, 10240, z.Stage3ParamPersistenceThreshold, "hidden-based autos")
	assert.Equal(t, int(1e9), z.SubGroupSize, "hidden-based autos")
	assert.False(t, c.FP16.Enabled, "precision autos")
	assert.False(t, c.BF16.Enabled, "precision autos")
	assert.Equal(t, 1.0, c.GradientClipping, "clip auto")
	b1, b2 := c.Optimizer.Betas()
	assert.Equal(t, [2]float64{0.9, 0.999}, [2]float64{b1, b2}, "optimizer autos: betas")
	assert.Equal(t, 1e-8, c.Optimizer.Eps(), "optimizer autos: eps")
	want := []string{"optimizer.params.lr", "scheduler.params.total_num_steps", "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps", "steps_per_print"}
	assert.Equal(t, strings.Join(want, ","), strings.Join(c.Unresolved, ","), "unresolved")
	b, err := c.Resolve(8, 1, 1, 1)
	if assert.NoError(t, err, "Resolve") {
		assert.Equal(t, 32, b.TrainBatchSize, "Resolve: %+v", b)
		assert.Equal(t, 1, b.GradAccum, "Resolve: %+v", b)
	}
	// Without the hidden size, DeepSpeed's defaults are used.
	c = mustParse(t, `{"zero_optimization":{"reduce_bucket_size":"auto"}}`)
	assert.Equal(t, 500000000, c.ZeroOptimization.ReduceBucketSize, "default auto")
	assert.True(t, warned(c, "zero_optimization.reduce_bucket_size", "WithModelHidden"), "default auto: warnings %v", c.Warnings)
	// warmup_max_lr follows a numeric lr.
	c = mustParse(t, `{"optimizer":{"type":"Adam","params":{"lr":3e-4}},"scheduler":{"type":"WarmupLR","params":{"warmup_max_lr":"auto"}}}`)
	v, _ := c.Scheduler.Float("warmup_max_lr")
	assert.Equal(t, 3e-4, v, "warmup_max_lr")
}

func TestDeprecated(t *testing.T) {
	c := mustParse(t, `{"zero_optimization":{"stage":2,"cpu_offload":true,"stage3_gather_fp16_weights_on_model_save":true},
	"bfloat16":{"enabled":true},"aio":{"thread_count":4},"communication_data_type":"bfp16"}`)
	if assert.NotNil(t, c.ZeroOptimization.OffloadOptimizer, "cpu_offload mapping") {
		assert.Equal(t, "cpu", c.ZeroOptimization.OffloadOptimizer.Device, "cpu_offload mapping")
	}
	assert.True(t, c.ZeroOptimization.Stage3Gather16bitWeightsOnModelSave, "stage3_gather_fp16_weights_on_model_save mapping")
	assert.True(t, c.BF16.Enabled, "bfloat16 mapping")
	assert.Equal(t, 4, c.AIO.IntraOpParallelism, "aio.thread_count mapping")
	assert.Equal(t, "bf16", *c.CommunicationDataType, "communication_data_type mapping")
	for _, p := range []string{"zero_optimization.cpu_offload", "zero_optimization.stage3_gather_fp16_weights_on_model_save", "bfloat16", "aio.thread_count", "communication_data_type"} {
		assert.True(t, warned(c, p, ""), "no warning at %s: %v", p, c.Warnings)
	}
	c = mustParse(t, `{"zero_optimization": true, "allgather_size": 200000000, "zero_optimization_x": 1}`)
	assert.Equal(t, 1, c.ZeroOptimization.Stage, "bool zero")
	assert.Equal(t, 200000000, c.ZeroOptimization.AllgatherBucketSize, "allgather_size")
}

// Unknown keys: in a section DeepSpeed validates, a misspelling of a known
// key (at most two edits) is an error, as DeepSpeed's is; a farther one (a
// newer DeepSpeed's key) and any unknown key of a lenient section warn.
func TestUnknownKeys(t *testing.T) {
	c := mustParse(t, `{"zero_optimization":{"stage3_prefetch_bucket":10, "paro_strategy": "NIG"},"trian_batch_size":8,"train_micro_batch_size_per_gpu":1,
	"compression_training":{"x":1}}`)
	assert.True(t, warned(c, "zero_optimization.stage3_prefetch_bucket", `did you mean "stage3_prefetch_bucket_size"`), "zero unknown: %v", c.Warnings)
	assert.True(t, warned(c, "zero_optimization.stage3_prefetch_bucket", "DeepSpeed rejects it"), "zero unknown: %v", c.Warnings)
	assert.True(t, warned(c, "zero_optimization.paro_strategy", "DeepSpeed rejects it"), "zero unknown: %v", c.Warnings)
	assert.True(t, warned(c, "trian_batch_size", `did you mean "train_batch_size"`), "top unknown: %v", c.Warnings)
	assert.True(t, warned(c, "trian_batch_size", "DeepSpeed ignores it"), "top unknown: %v", c.Warnings)
	assert.NotNil(t, c.Other["compression_training"], "recognised section not kept in Other")
}

func TestUserKeys(t *testing.T) {
	c := mustParse(t, `{"checkpoint":{"zero_checkpoint":true,"checkpoint_type":"blob","save_dir":"/checkpoints","load_path":null,
	"keep_n_most_recent":2,"num_checkpoints_to_keep":10},
	"sequence_parallel":{"enabled":true,"attention_window_size":1024,"gradient_checkpointing_kwargs":{"use_reentrant":false}},
	"sequence_parallel_size":2,"tensor_model_parallel_size":4,"pipeline_model_parallel_size":2,
	"pipeline_schedule":{"type":"interleaved","virtual_stages":3},"train_micro_batch_size_per_gpu":4,"gradient_accumulation_steps":8}`)
	ck := c.Checkpoint
	assert.Equal(t, 10, ck.Keep(), "checkpoint keep")
	assert.Equal(t, "blob", ck.CheckpointType, "checkpoint")
	assert.Equal(t, "/checkpoints", ck.SaveDir, "checkpoint")
	assert.Nil(t, ck.LoadPath, "checkpoint")
	assert.True(t, warned(c, "checkpoint", "keep_n_most_recent (2) and num_checkpoints_to_keep (10)"), "conflict warning: %v", c.Warnings)
	sp := c.SequenceParallel
	assert.True(t, sp.Enabled, "sequence_parallel")
	assert.Equal(t, 1024, sp.AttentionWindowSize, "sequence_parallel")
	assert.False(t, sp.GradientCheckpointingKwargs.UseReentrant, "sequence_parallel")
	assert.Equal(t, "Interleaved", c.PipelineSchedule.Type, "schedule")
	assert.Equal(t, 3, c.PipelineSchedule.VirtualStages, "schedule")
	b, err := c.Resolve(64, 0, 0, 0)
	if assert.NoError(t, err, "Resolve") {
		assert.Equal(t, 4, b.DataParallel, "Resolve: %+v", b)
		assert.Equal(t, 128, b.TrainBatchSize, "Resolve: %+v", b)
	}
	c = mustParse(t, `{"pipeline_schedule":"Interleaved","pipeline_model_parallel_size":4,"train_batch_size":2040,"gradient_accumulation_steps":6}`)
	assert.Equal(t, 2, c.PipelineSchedule.VirtualStages, "default virtual stages")
	_, err = c.Resolve(64, 8, 0, 0)
	assert.ErrorContains(t, err, "multiple of the pipeline size 4", "interleaved divisibility")
}

// DeepSpeed's zero_optimization field names without the stage3_ prefix are
// the same settings as their stage3_ aliases (pydantic populate_by_name),
// read with no warning; giving both is an error.
func TestZeroStage3FieldNames(t *testing.T) {
	c := mustParse(t, `{"zero_optimization": {"stage": 3, "prefetch_bucket_size": 1234, "max_live_parameters": 99, "allgather_sequential": true}}`)
	assert.Equal(t, int64(1234), int64(c.ZeroOptimization.Stage3PrefetchBucketSize))
	assert.Equal(t, int64(99), int64(c.ZeroOptimization.Stage3MaxLiveParameters))
	assert.True(t, c.ZeroOptimization.Stage3AllgatherSequential)
	assert.True(t, c.IsSet("zero_optimization.stage3_prefetch_bucket_size"))
	assert.Empty(t, c.Warnings)
	_, err := Parse([]byte(`{"zero_optimization": {"prefetch_bucket_size": 1, "stage3_prefetch_bucket_size": 2}}`))
	assert.ErrorContains(t, err, "zero_optimization.prefetch_bucket_size: got 1; allowed: only one of prefetch_bucket_size and stage3_prefetch_bucket_size")
	c = mustParse(t, `{"fp16": {"enabled": true, "master_weights_and_grads": false}}`)
	assert.True(t, c.IsSet("fp16.fp16_master_weights_and_grads"))
	assert.Empty(t, c.Warnings)
}

// With reduce_scatter (the default) ZeRO divides by the world before the
// sum: at stage 1, where DeepSpeed passes prescale_gradients and
// gradient_predivide_factor over, each is a warning; with reduce_scatter
// false, or at stage 0, they apply and nothing is said.
func TestReduceScalingKeys(t *testing.T) {
	c := mustParse(t, `{"prescale_gradients":true,"gradient_predivide_factor":4,"zero_optimization":{"stage":1}}`)
	assert.True(t, warned(c, "prescale_gradients", "no effect at ZeRO stage 1"), "warnings %v", c.Warnings)
	assert.True(t, warned(c, "gradient_predivide_factor", "no effect at ZeRO stage 1"), "warnings %v", c.Warnings)
	for _, j := range []string{`{"prescale_gradients":true,"zero_optimization":{"stage":1,"reduce_scatter":false}}`,
		`{"prescale_gradients":true,"zero_optimization":{"stage":2,"reduce_scatter":false}}`,
		`{"gradient_predivide_factor":4,"zero_optimization":{"stage":0}}`} {
		c := mustParse(t, j)
		assert.False(t, warned(c, "prescale_gradients", ""), "%s: warnings %v", j, c.Warnings)
		assert.False(t, warned(c, "gradient_predivide_factor", ""), "%s: warnings %v", j, c.Warnings)
	}
}

// fp16 keys the loss scaler does not read are warnings: the dynamic ones
// beside a static loss_scale, the hysteresis pair at ZeRO stage 0; set at
// stage 1, or left to their defaults, nothing is said.
func TestFP16UnusedKeys(t *testing.T) {
	c := mustParse(t, `{"fp16":{"enabled":true,"hysteresis":4,"consecutive_hysteresis":true,"loss_scale_window":100},"zero_optimization":{"stage":0}}`)
	assert.True(t, warned(c, "fp16.hysteresis", "no effect at ZeRO stage 0"), "warnings %v", c.Warnings)
	assert.True(t, warned(c, "fp16.consecutive_hysteresis", "no effect at ZeRO stage 0"), "warnings %v", c.Warnings)
	assert.False(t, warned(c, "fp16.loss_scale_window", ""), "warnings %v", c.Warnings)
	c = mustParse(t, `{"fp16":{"enabled":true,"hysteresis":4},"zero_optimization":{"stage":1}}`)
	assert.False(t, warned(c, "fp16.hysteresis", ""), "stage 1: warnings %v", c.Warnings)
	c = mustParse(t, `{"fp16":{"enabled":true,"loss_scale":128,"initial_scale_power":12,"min_loss_scale":2},"zero_optimization":{"stage":2}}`)
	assert.True(t, warned(c, "fp16.initial_scale_power", "static scale"), "warnings %v", c.Warnings)
	assert.True(t, warned(c, "fp16.min_loss_scale", "static scale"), "warnings %v", c.Warnings)
	c = mustParse(t, `{"fp16":{"enabled":true},"zero_optimization":{"stage":0}}`)
	assert.Empty(t, c.Warnings, "defaults only")
}

// zero_hpz_partition_size > 1 is a warning below stage 3, which alone
// keeps secondary partitions (as in DeepSpeed); at stage 3 nothing is said.
func TestHPZBelowStage3Warns(t *testing.T) {
	for _, stage := range []int{0, 1, 2} {
		c := mustParse(t, fmt.Sprintf(`{"zero_optimization":{"stage":%d,"zero_hpz_partition_size":2}}`, stage))
		assert.True(t, warned(c, "zero_optimization.zero_hpz_partition_size", fmt.Sprintf("no effect at ZeRO stage %d", stage)), "warnings %v", c.Warnings)
	}
	c := mustParse(t, `{"zero_optimization":{"stage":3,"zero_hpz_partition_size":2}}`)
	assert.False(t, warned(c, "zero_optimization.zero_hpz_partition_size", ""), "stage 3: warnings %v", c.Warnings)
}
