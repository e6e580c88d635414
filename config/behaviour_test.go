package config

import (
	"strings"
	"testing"
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
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, `{}`)
	z := c.ZeroOptimization
	if z.Stage != 0 || z.ReduceBucketSize != 500000000 || z.AllgatherBucketSize != 500000000 || !z.ContiguousGradients ||
		z.Stage3PrefetchBucketSize != 50000000 || z.Stage3ParamPersistenceThreshold != 100000 || z.SubGroupSize != 1e9 {
		t.Errorf("zero defaults: %+v", z)
	}
	if c.FP16.InitialScalePower != 16 || c.FP16.LossScaleWindow != 1000 || c.FP16.Hysteresis != 2 || c.FP16.MinLossScale != 1 {
		t.Errorf("fp16 defaults: %+v", c.FP16)
	}
	if !c.BF16.CheckGradOverflow || c.GradientClipping != 1.0 || c.StepsPerPrint != nil || c.GradientPredivideFactor != 1 {
		t.Errorf("defaults: bf16 %+v clip %v", c.BF16, c.GradientClipping)
	}
	if c.AIO.BlockSize != 1048576 || c.AIO.QueueDepth != 8 || c.AIO.IntraOpParallelism != 1 || !c.AIO.OverlapEvents {
		t.Errorf("aio defaults: %+v", c.AIO)
	}
	if c.Checkpoint.TagValidation != "Warn" || !c.Checkpoint.ZeroCheckpoint || c.Checkpoint.CheckpointType != "sharded" {
		t.Errorf("checkpoint defaults: %+v", c.Checkpoint)
	}
	if c.PipelineSchedule.Type != "1F1B" || c.TensorModelParallelSize != 1 || c.PipelineModelParallelSize != 1 {
		t.Errorf("parallel defaults")
	}
	c = mustParse(t, `{"zero_optimization":{"stage":3,"offload_param":{"device":"cpu"},"offload_optimizer":{"device":"cpu"}}}`)
	if c.ZeroOptimization.OffloadParam.BufferCount != 5 || c.ZeroOptimization.OffloadOptimizer.BufferCount != 4 ||
		!c.ZeroOptimization.OffloadParam.PinMemory || c.ZeroOptimization.OffloadOptimizer.Ratio != 1 {
		t.Errorf("offload defaults: %+v %+v", c.ZeroOptimization.OffloadParam, c.ZeroOptimization.OffloadOptimizer)
	}
	if c.IsSet("zero_optimization.offload_param.buffer_count") || !c.IsSet("zero_optimization.stage") {
		t.Error("IsSet")
	}
}

func TestHjsonNumbersAndSyntax(t *testing.T) {
	c := mustParse(t, "# comment\ntrain_batch_size: 32.0\nsteps_per_print: 1e5 // x\nzero_optimization: {reduce_bucket_size: 5e8,}\n")
	if *c.TrainBatchSize != 32 || *c.StepsPerPrint != 100000 || c.ZeroOptimization.ReduceBucketSize != 500000000 {
		t.Errorf("numbers: %v %v %v", *c.TrainBatchSize, *c.StepsPerPrint, c.ZeroOptimization.ReduceBucketSize)
	}
	if v := parseNumber("1e12"); v != 1e12 {
		t.Errorf("1e12 should stay float, got %#v", v)
	}
	if v := parseNumber("1.0"); v != int64(1) {
		t.Errorf("1.0 should be int, got %#v", v)
	}
	if v := parseNumber("2.5"); v != 2.5 {
		t.Errorf("2.5: %#v", v)
	}
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
	if z.ReduceBucketSize != 1024*1024 || z.Stage3PrefetchBucketSize != 943718 || z.Stage3ParamPersistenceThreshold != 10240 || z.SubGroupSize != 1e9 {
		t.Errorf("hidden-based autos: %+v", z)
	}
	if c.FP16.Enabled || c.BF16.Enabled || c.GradientClipping != 1.0 {
		t.Error("precision/clip autos")
	}
	if b1, b2 := c.Optimizer.Betas(); b1 != 0.9 || b2 != 0.999 || c.Optimizer.Eps() != 1e-8 {
		t.Error("optimizer autos")
	}
	want := []string{"optimizer.params.lr", "scheduler.params.total_num_steps", "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps", "steps_per_print"}
	if strings.Join(c.Unresolved, ",") != strings.Join(want, ",") {
		t.Errorf("unresolved = %v, want %v", c.Unresolved, want)
	}
	b, err := c.Resolve(8, 1, 1, 1)
	if err != nil || b.TrainBatchSize != 32 || b.GradAccum != 1 {
		t.Errorf("Resolve: %+v %v", b, err)
	}
	// Without the hidden size, DeepSpeed's defaults are used.
	c = mustParse(t, `{"zero_optimization":{"reduce_bucket_size":"auto"}}`)
	if c.ZeroOptimization.ReduceBucketSize != 500000000 || !warned(c, "zero_optimization.reduce_bucket_size", "WithModelHidden") {
		t.Errorf("default auto: %v %v", c.ZeroOptimization.ReduceBucketSize, c.Warnings)
	}
	// warmup_max_lr follows a numeric lr.
	c = mustParse(t, `{"optimizer":{"type":"Adam","params":{"lr":3e-4}},"scheduler":{"type":"WarmupLR","params":{"warmup_max_lr":"auto"}}}`)
	if v, _ := c.Scheduler.Float("warmup_max_lr"); v != 3e-4 {
		t.Errorf("warmup_max_lr = %v", v)
	}
}

func TestDeprecated(t *testing.T) {
	c := mustParse(t, `{"zero_optimization":{"stage":2,"cpu_offload":true,"stage3_gather_fp16_weights_on_model_save":true},
	"bfloat16":{"enabled":true},"aio":{"thread_count":4},"communication_data_type":"bfp16"}`)
	if c.ZeroOptimization.OffloadOptimizer == nil || c.ZeroOptimization.OffloadOptimizer.Device != "cpu" ||
		!c.ZeroOptimization.Stage3Gather16bitWeightsOnModelSave || !c.BF16.Enabled || c.AIO.IntraOpParallelism != 4 ||
		*c.CommunicationDataType != "bf16" {
		t.Errorf("mapping failed: %+v", c)
	}
	for _, p := range []string{"zero_optimization.cpu_offload", "zero_optimization.stage3_gather_fp16_weights_on_model_save", "bfloat16", "aio.thread_count", "communication_data_type"} {
		if !warned(c, p, "") {
			t.Errorf("no warning at %s: %v", p, c.Warnings)
		}
	}
	c = mustParse(t, `{"zero_optimization": true, "allgather_size": 200000000, "zero_optimization_x": 1}`)
	if c.ZeroOptimization.Stage != 1 || c.ZeroOptimization.AllgatherBucketSize != 200000000 {
		t.Errorf("bool zero: %+v", c.ZeroOptimization)
	}
}

func TestUnknownKeys(t *testing.T) {
	c := mustParse(t, `{"zero_optimization":{"stage3_param_persitence_threshold":10},"trian_batch_size":8,"train_micro_batch_size_per_gpu":1,
	"compression_training":{"x":1}}`)
	if !warned(c, "zero_optimization.stage3_param_persitence_threshold", `did you mean "stage3_param_persistence_threshold"`) ||
		!warned(c, "zero_optimization.stage3_param_persitence_threshold", "DeepSpeed rejects it") {
		t.Errorf("zero unknown: %v", c.Warnings)
	}
	if !warned(c, "trian_batch_size", `did you mean "train_batch_size"`) || !warned(c, "trian_batch_size", "DeepSpeed ignores it") {
		t.Errorf("top unknown: %v", c.Warnings)
	}
	if c.Other["compression_training"] == nil {
		t.Error("recognised section not kept in Other")
	}
}

func TestUserKeys(t *testing.T) {
	c := mustParse(t, `{"checkpoint":{"zero_checkpoint":true,"checkpoint_type":"blob","save_dir":"/checkpoints","load_path":null,
	"keep_n_most_recent":2,"num_checkpoints_to_keep":10},
	"sequence_parallel":{"enabled":true,"attention_window_size":1024,"gradient_checkpointing_kwargs":{"use_reentrant":false}},
	"sequence_parallel_size":2,"tensor_model_parallel_size":4,"pipeline_model_parallel_size":2,
	"pipeline_schedule":{"type":"interleaved","virtual_stages":3},"train_micro_batch_size_per_gpu":4,"gradient_accumulation_steps":8}`)
	ck := c.Checkpoint
	if ck.Keep() != 10 || ck.CheckpointType != "blob" || ck.SaveDir != "/checkpoints" || ck.LoadPath != nil {
		t.Errorf("checkpoint: %+v", ck)
	}
	if !warned(c, "checkpoint", "keep_n_most_recent (2) and num_checkpoints_to_keep (10)") {
		t.Errorf("conflict warning: %v", c.Warnings)
	}
	sp := c.SequenceParallel
	if !sp.Enabled || sp.AttentionWindowSize != 1024 || sp.GradientCheckpointingKwargs.UseReentrant {
		t.Errorf("sequence_parallel: %+v", sp)
	}
	if c.PipelineSchedule.Type != "Interleaved" || c.PipelineSchedule.VirtualStages != 3 {
		t.Errorf("schedule: %+v", c.PipelineSchedule)
	}
	b, err := c.Resolve(64, 0, 0, 0)
	if err != nil || b.DataParallel != 4 || b.TrainBatchSize != 128 {
		t.Errorf("Resolve: %+v %v", b, err)
	}
	c = mustParse(t, `{"pipeline_schedule":"Interleaved","pipeline_model_parallel_size":4,"train_batch_size":2040,"gradient_accumulation_steps":6}`)
	if c.PipelineSchedule.VirtualStages != 2 {
		t.Errorf("default virtual stages: %+v", c.PipelineSchedule)
	}
	if _, err := c.Resolve(64, 8, 0, 0); err == nil || !strings.Contains(err.Error(), "multiple of the pipeline size 4") {
		t.Errorf("interleaved divisibility: %v", err)
	}
}
