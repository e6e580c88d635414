package config

import (
	"errors"
	"fmt"
	"math"
)

// crossCheck applies the rules that involve more than one key.
func (l *loader) crossCheck(c *Config) {
	z := &c.ZeroOptimization
	if c.FP16.Enabled && c.BF16.Enabled {
		l.fail("bf16.enabled", true, "false when fp16.enabled is true", "fp16 and bf16 cannot both be enabled")
	}
	if c.AMP != nil {
		if c.AMP.Enabled() {
			l.fail("amp.enabled", true, "false (apex amp is not supported by deepgo; use fp16 or bf16)", "")
		} else {
			l.warn("amp", "recognised but unsupported by deepgo (apex amp); ignored because it is not enabled")
		}
	}
	if z.LegacyStage1 {
		l.fail("zero_optimization.legacy_stage1", true, "false", "legacy stage 1 was removed; DeepSpeed raises an exception")
	}
	if h := z.ZeroHPZPartitionSize; h > 1 && z.Stage != 3 {
		// DeepSpeed reads it in its stage-3 optimizer only
		l.warn("zero_optimization.zero_hpz_partition_size", "no effect at ZeRO stage %d: hpZ keeps secondary partitions of stage-3 parameters only (as in DeepSpeed); ignored", z.Stage)
	}
	for _, o := range []struct {
		name string
		off  *Offload
	}{{"offload_param", z.OffloadParam}, {"offload_optimizer", z.OffloadOptimizer}} {
		if o.off == nil {
			continue
		}
		p := "zero_optimization." + o.name
		if o.off.Device == "nvme" && (o.off.NvmePath == nil || *o.off.NvmePath == "") {
			l.fail(p+".nvme_path", absent{}, `a directory on an NVMe drive (required when device is "nvme")`,
				"ZeRO-Infinity swaps to files under this path")
		}
		if o.off.Device == "none" {
			continue
		}
		switch {
		case o.name == "offload_param" && z.Stage != 3:
			l.warn(p, "parameter offload only works with ZeRO stage 3; ignored at stage %d", z.Stage)
		case o.name == "offload_optimizer" && z.Stage == 0:
			l.warn(p, "optimizer offload needs ZeRO stage 1, 2 or 3; ignored at stage 0")
		}
	}
	if z.ZeroQuantizedGradients {
		// DeepSpeed 0.19.8 quantizes only between nodes
		// (stage3.py: all_to_all_quant_reduce when num_nodes > 1) and
		// otherwise reduce-scatters the gradients as without the key
		l.warn("zero_optimization.zero_quantized_gradients", "no effect: deepgo reduces gradients unquantized, so they stay exact (ZeRO++ qgZ's int4 all-to-all is not implemented; DeepSpeed uses it only between nodes at stage 3, and on one node reduce-scatters as without the key)")
	}
	if z.ZeroppLocoParam != nil {
		l.warn("zero_optimization.zeropp_loco_param", "removed from DeepSpeed (0.19.8 refuses a config holding it: LoCo-Zero++ has been removed); deepgo loads it and ignores it: gradients are reduced unquantized, without LoCo's error feedback")
	}
	if z.ZeroQuantizedNontrainableWeights && z.Stage != 3 {
		l.warn("zero_optimization.zero_quantized_nontrainable_weights", "no effect at ZeRO stage %d: ZeRO++ quantizes stage-3 partitions only (as in DeepSpeed); ignored", z.Stage)
	}
	if z.ZeroQuantizedWeights && z.Stage != 3 {
		l.warn("zero_optimization.zero_quantized_weights", "ZeRO++ qwZ quantizes stage-3 parameter gathers only; ignored at stage %d (DeepSpeed passes it to its stage-3 optimizer only)", z.Stage)
	}
	if oo := z.OffloadOptimizer; oo != nil && oo.Ratio < 1 && z.Stage != 3 {
		l.fail("zero_optimization.offload_optimizer.ratio", oo.Ratio, "1.0 unless zero_optimization.stage is 3", "partial offload (Twin-Flow) is stage 3 only")
	}
	if (z.Stage == 1 || z.Stage == 2) && z.AllgatherBucketSize%2 != 0 {
		l.fail("zero_optimization.allgather_bucket_size", z.AllgatherBucketSize, "a multiple of 2 at stage 1/2", "")
	}
	if z.ElasticCheckpoint && z.Stage == 3 {
		l.warn("zero_optimization.elastic_checkpoint", "not supported with stage 3; use universal checkpointing")
	}
	l.reduceScaling(c)
	l.fp16Unused(c)
	if c.GradientAllreduceOp == "sum" && z.Stage == 3 {
		l.fail("gradient_allreduce_op", "sum", `"mean" with ZeRO stage 3`, "")
	}
	if c.PipelineModelParallelSize > 1 && z.Stage >= 2 {
		l.fail("zero_optimization.stage", z.Stage, "0 or 1 with pipeline_model_parallel_size > 1",
			"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism (DeepSpeed's PipelineEngine refuses them)")
	}
	l.pipelineStages(c)
	l.pipelineSchedule(c)
	if c.Optimizer != nil {
		switch c.Optimizer.Name() {
		case "onebitadam", "zerooneadam", "onebitlamb":
			if z.Stage > 0 {
				l.fail("optimizer.type", c.Optimizer.Type, "an optimizer compatible with ZeRO (1-bit Adam, 0/1 Adam and 1-bit Lamb are not)", "")
			}
		}
		switch c.Optimizer.Name() {
		case "lamb", "onebitlamb":
			if c.FP16.Enabled && c.FP16.LossScale != 0 {
				l.fail("fp16.loss_scale", c.FP16.LossScale, "0 (dynamic) with the "+c.Optimizer.Type+" optimizer", "")
			}
		}
	}
	ac := c.ActivationCheckpointing
	if ac.ContiguousMemoryOptimization && !ac.PartitionActivations {
		l.fail("activation_checkpointing.contiguous_memory_optimization", true, "false unless partition_activations is true",
			"contiguous checkpointing needs partitioned activations")
	}
	if ac.ContiguousMemoryOptimization && ac.NumberCheckpoints == nil {
		l.warn("activation_checkpointing.number_checkpoints", "not set; contiguous_memory_optimization needs it, so the model must pass num_checkpoints when configuring checkpointing")
	}
	if ac.CPUCheckpointing && !ac.PartitionActivations {
		l.warn("activation_checkpointing.cpu_checkpointing", "only takes effect with partition_activations")
	}
	if c.FlopsProfiler.Enabled && !c.WallClockBreakdown {
		c.WallClockBreakdown = true
		l.warn("wall_clock_breakdown", "forced to true because flops_profiler is enabled")
	}
	if c.Elasticity.Enabled {
		l.fail("elasticity.enabled", true, "false (elastic training is recognised but not supported by deepgo)", "")
	}
	if c.MegatronSequenceParallel && c.TensorModelParallelSize <= 1 {
		// Megatron disables it the same way, with a warning
		l.warn("megatron_sequence_parallel", "tensor_model_parallel_size is 1, so there is no TP group to split the sequence over; set tensor_model_parallel_size > 1")
	}
	if c.SequenceParallel.Enabled && c.SequenceParallelSize <= 1 {
		l.warn("sequence_parallel.enabled", "sequence_parallel_size is 1, so no sequence sharding happens; set sequence_parallel_size > 1")
	}
	if l.explicit["sequence_parallel.enabled"] && !c.SequenceParallel.Enabled && c.SequenceParallelSize > 1 {
		// sequence_parallel_size alone turns Ulysses on, as in DeepSpeed:
		// an explicit false beside it asks for the opposite
		l.fail("sequence_parallel.enabled", false, fmt.Sprintf("true, or no key: sequence_parallel_size %d shards the sequence (set it to 1 to train without sequence parallelism)", c.SequenceParallelSize), "")
	}
	ck := c.Checkpoint
	if ck.KeepNMostRecent != nil && ck.NumCheckpointsToKeep != nil && *ck.KeepNMostRecent != *ck.NumCheckpointsToKeep {
		l.warn("checkpoint", "keep_n_most_recent (%d) and num_checkpoints_to_keep (%d) disagree; the larger wins, so deepgo keeps the %d most recent checkpoints",
			*ck.KeepNMostRecent, *ck.NumCheckpointsToKeep, ck.Keep())
	}
	dt := c.DataTypes
	mode := "fp32"
	if c.FP16.Enabled {
		mode = "fp16"
	} else if c.BF16.Enabled {
		mode = "bf16"
	}
	for _, d := range []struct {
		name string
		v    *string
	}{{"param_dtype", dt.ParamDtype}, {"buffer_dtype", dt.BufferDtype}} {
		if d.v != nil && *d.v != mode {
			l.fail("data_types."+d.name, *d.v, fmt.Sprintf("%q (must match the precision mode)", mode), "")
		}
	}
	l.bf16Master(c)
	l.batchTriad(c)
	if l.o.world > 0 {
		l.worldChecks(c)
	}
}

// batchTriad checks, without a world size, what no world size can fix:
// with all three batch keys given, train_batch_size = micro × accumulation
// × data-parallel size needs train_batch_size to be a multiple of micro ×
// accumulation (DeepSpeed asserts it once it knows the world).
// fp16Unused warns of the fp16 keys a document sets that its loss scaler
// does not read: with a static loss_scale none of the dynamic ones, and at
// ZeRO stage 0 the hysteresis pair, which DeepSpeed's FP16_Optimizer
// scaler (used without ZeRO) never takes: it halves the scale at every
// overflow.
func (l *loader) fp16Unused(c *Config) {
	if !c.FP16.Enabled {
		return
	}
	for _, k := range []string{"initial_scale_power", "loss_scale_window", "min_loss_scale", "hysteresis", "consecutive_hysteresis"} {
		p := "fp16." + k
		switch {
		case !c.IsSet(p):
		case c.FP16.LossScale != 0:
			l.warn(p, "no effect: fp16.loss_scale %v is a static scale", c.FP16.LossScale)
		case (k == "hysteresis" || k == "consecutive_hysteresis") && c.ZeroOptimization.Stage == 0:
			l.warn(p, "no effect at ZeRO stage 0: its loss scaler (DeepSpeed's FP16_Optimizer) halves the scale at every overflow; hysteresis applies at stages 1-3")
		}
	}
}

// reduceScaling checks prescale_gradients and gradient_predivide_factor
// against the ZeRO stage: with reduce_scatter (the default) ZeRO divides
// each gradient by the data-parallel size before the sum and uses neither;
// DeepSpeed's ZeRO-2 and ZeRO-3 refuse them there, its ZeRO-1 passes them
// over.
func (l *loader) reduceScaling(c *Config) {
	z := &c.ZeroOptimization
	if z.Stage == 0 || !z.ReduceScatter || c.GradientAllreduceOp == "sum" {
		return
	}
	for _, k := range []struct {
		key  string
		v    any
		used bool
	}{{"prescale_gradients", true, c.PrescaleGradients}, {"gradient_predivide_factor", c.GradientPredivideFactor, c.GradientPredivideFactor != 1}} {
		switch {
		case !k.used:
		case z.Stage == 1:
			l.warn(k.key, "no effect at ZeRO stage 1 with zero_optimization.reduce_scatter true: each gradient is divided by the data-parallel size before the sum (DeepSpeed's average_tensor does the same); reduce_scatter false applies it")
		default:
			l.fail(k.key, k.v, fmt.Sprintf("%s at ZeRO stage %d with zero_optimization.reduce_scatter true (or set reduce_scatter false)", map[bool]string{true: "false", false: "1"}[k.key == "prescale_gradients"], z.Stage),
				fmt.Sprintf("DeepSpeed's ZeRO-%d refuses it with reduce_scatter: each gradient is divided by the data-parallel size before the sum", z.Stage))
		}
	}
}

func (l *loader) batchTriad(c *Config) {
	tb, mb, gas := c.TrainBatchSize, c.TrainMicroBatchSizePerGPU, c.GradientAccumulationSteps
	if tb == nil || mb == nil || gas == nil || *tb < 1 || *mb < 1 || *gas < 1 || l.o.world > 0 {
		return // a missing or "auto" key is inferred; a bad one has its own error; a world is checked by Resolve
	}
	if per := *mb * *gas; *tb%per != 0 {
		l.fail("train_batch_size", *tb,
			fmt.Sprintf("a multiple of train_micro_batch_size_per_gpu × gradient_accumulation_steps = %d × %d = %d", *mb, *gas, per),
			"train_batch_size = micro × accumulation × data-parallel size for a whole number of data-parallel ranks")
	}
}

// pipelineStages checks pipeline.stages: "auto" or a whole number of
// stages, at least 1 (a quoted number or 0 used to pass and then mean no
// pipeline without a word).
func (l *loader) pipelineStages(c *Config) {
	const p = "pipeline.stages"
	const allowed = `"auto" or a whole number of stages >= 1`
	switch v := c.Pipeline.Stages.(type) {
	case nil:
	case string:
		if v != "auto" {
			l.fail(p, v, allowed, "")
		}
	case float64:
		if v < 1 || v != math.Trunc(v) {
			l.fail(p, v, allowed, "")
		}
	default:
		l.fail(p, v, allowed, "")
	}
}

func (l *loader) pipelineSchedule(c *Config) {
	ps := &c.PipelineSchedule
	const p = "pipeline_schedule"
	if ps.Type != "Interleaved" && ps.VirtualStages > 1 {
		l.fail(p+".virtual_stages", ps.VirtualStages, `1 unless type is "Interleaved"`, "")
	}
	if ps.Type == "Interleaved" {
		if !l.explicit[p+".virtual_stages"] {
			ps.VirtualStages = 2
			l.warn(p, `"Interleaved" without a virtual-stage count; using virtual_stages = 2 (write {"type": "Interleaved", "virtual_stages": N} to choose)`)
		} else if ps.VirtualStages < 2 {
			l.fail(p+".virtual_stages", ps.VirtualStages, `an integer >= 2 with "Interleaved"`, "")
		}
		if c.PipelineModelParallelSize <= 1 {
			l.warn(p, `"Interleaved" has no effect without pipeline_model_parallel_size > 1`)
		}
	}
}

// worldChecks applies the rules that need the world size.
func (l *loader) worldChecks(c *Config) {
	w := l.o.world
	z := c.ZeroOptimization
	if h := z.ZeroHPZPartitionSize; h > 1 && w%h != 0 {
		l.fail("zero_optimization.zero_hpz_partition_size", h, fmt.Sprintf("a divisor of the world size %d", w), "")
	}
	if m := z.MicsShardSize; m > 0 && w%m != 0 {
		l.fail("zero_optimization.mics_shard_size", m, fmt.Sprintf("a divisor of the world size %d, or -1", w), "")
	}
	if _, err := c.Resolve(w, 0, 0, 0); err != nil {
		var es Errors
		if errors.As(err, &es) {
			l.errs = append(l.errs, es...)
		}
	}
}
