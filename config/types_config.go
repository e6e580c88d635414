package config

// Config is a DeepSpeed configuration document after deepgo has read it:
// deprecated keys mapped, "auto" values resolved where possible, defaults
// filled in (newest DeepSpeed's), and every value checked.
//
// Field names follow the DeepSpeed keys; the json tags are the DeepSpeed keys
// themselves, so Config.JSON writes a document DeepSpeed and deepgo both read.
// The `ds` tags drive defaults and validation (see schema.go).
type Config struct {
	// TrainBatchSize is the global batch (train_batch_size); nil when not given
	// or "auto". Use Resolve to get the inferred value.
	TrainBatchSize *int `json:"train_batch_size,omitempty" ds:"min=1;auto=batch"`
	// TrainMicroBatchSizePerGPU is train_micro_batch_size_per_gpu; nil when not given or "auto".
	TrainMicroBatchSizePerGPU *int `json:"train_micro_batch_size_per_gpu,omitempty" ds:"min=1;auto=batch"`
	// GradientAccumulationSteps is gradient_accumulation_steps; nil when not given or "auto".
	GradientAccumulationSteps *int `json:"gradient_accumulation_steps,omitempty" ds:"min=1;auto=batch"`

	// FP16 is the fp16 section.
	FP16 FP16 `json:"fp16"`
	// BF16 is the bf16 section (legacy name "bfloat16" is mapped here).
	BF16 BF16 `json:"bf16"`
	// AMP is the apex amp section; recognised but not supported by deepgo.
	AMP AMP `json:"amp,omitempty"`
	// TorchAutocast is the torch_autocast section.
	TorchAutocast TorchAutocast `json:"torch_autocast"`
	// DataTypes is the data_types section.
	DataTypes DataTypes `json:"data_types"`

	// ZeroOptimization is the zero_optimization section.
	ZeroOptimization ZeroConfig `json:"zero_optimization"`
	// AIO is the aio section (NVMe swapping engine).
	AIO AIO `json:"aio"`
	// ActivationCheckpointing is the activation_checkpointing section.
	ActivationCheckpointing ActivationCheckpointing `json:"activation_checkpointing"`
	// Pipeline is the pipeline section (PipelineEngine options).
	Pipeline PipelineConfig `json:"pipeline"`

	// Optimizer is the optimizer section; nil when absent (client optimizer).
	Optimizer *Optimizer `json:"optimizer,omitempty"`
	// Scheduler is the scheduler section; nil when absent.
	Scheduler *Scheduler `json:"scheduler,omitempty"`
	// GradientClipping is the global gradient-norm clip (0 disables).
	GradientClipping float64 `json:"gradient_clipping" ds:"def=1.0;min=0;auto=gradclip"`

	// Checkpoint is the checkpoint section (DeepSpeed keys plus deepgo's).
	Checkpoint Checkpoint `json:"checkpoint"`

	// Tensorboard is the tensorboard monitor.
	Tensorboard Monitor `json:"tensorboard"`
	// CSVMonitor is the csv_monitor monitor.
	CSVMonitor Monitor `json:"csv_monitor"`
	// Wandb is the wandb monitor.
	Wandb Wandb `json:"wandb"`
	// Comet is the comet monitor.
	Comet Comet `json:"comet"`
	// FlopsProfiler is the flops_profiler section.
	FlopsProfiler FlopsProfiler `json:"flops_profiler"`
	// CommsLogger is the comms_logger section.
	CommsLogger CommsLogger `json:"comms_logger"`
	// Elasticity is the elasticity section (recognised; deepgo does not run elastic training).
	Elasticity Elasticity `json:"elasticity"`

	// WallClockBreakdown enables per-phase timing (forced on by the flops profiler).
	WallClockBreakdown bool `json:"wall_clock_breakdown" ds:"def=false"`
	// MemoryBreakdown prints DeepSpeed's see_memory_usage report on rank 0 at Initialize and before and after every forward, backward and step: device memory allocated and reserved with their peaks (on the CPU backend the host memory deepgo's tensors hold, for all in-process ranks together) and the host's used memory.
	MemoryBreakdown bool `json:"memory_breakdown" ds:"def=false"`
	// DumpState prints the resolved engine state at start.
	DumpState bool `json:"dump_state" ds:"def=false"`
	// StepsPerPrint is the logging interval in optimizer steps; nil = every 50 steps in deepgo train (its step lines and checkpoints) and the monitor (DeepSpeed's default since 2024 is never).
	StepsPerPrint *int `json:"steps_per_print,omitempty" ds:"min=1"`
	// CommunicationDataType is the gradient all-reduce dtype; nil = the model dtype.
	CommunicationDataType *string `json:"communication_data_type,omitempty" ds:"enum=fp16|bf16|fp32;fold"`
	// SeqParallelCommunicationDataType is the dtype of sequence-parallel all-to-alls.
	SeqParallelCommunicationDataType string `json:"seq_parallel_communication_data_type" ds:"def=fp32;enum=fp16|bf16|fp32;fold"`
	// PrescaleGradients divides gradients by the data-parallel size before the all-reduce (stage 0, or reduce_scatter false; ZeRO with reduce_scatter always does).
	PrescaleGradients bool `json:"prescale_gradients" ds:"def=false"`
	// GradientPredivideFactor divides gradients by this before the all-reduce and the rest after (stage 0, or reduce_scatter false).
	GradientPredivideFactor float64 `json:"gradient_predivide_factor" ds:"def=1.0;gt=0"`
	// SparseGradients enables CSR all-reduce for embedding gradients.
	SparseGradients bool `json:"sparse_gradients" ds:"def=false"`
	// GradientAllreduceOp is "mean" (average) or "sum".
	GradientAllreduceOp string `json:"gradient_allreduce_op" ds:"def=mean;enum=mean|sum;fold"`
	// ZeroAllowUntestedOptimizer lets ZeRO wrap optimizers it was not tested with.
	ZeroAllowUntestedOptimizer bool `json:"zero_allow_untested_optimizer" ds:"def=false"`
	// ZeroForceDSCPUOptimizer requires DeepSpeed's CPU optimizers with ZeRO offload.
	ZeroForceDSCPUOptimizer bool `json:"zero_force_ds_cpu_optimizer" ds:"def=true"`
	// DataloaderDropLast drops the last incomplete batch.
	DataloaderDropLast bool `json:"dataloader_drop_last" ds:"def=false"`
	// SequenceParallelSize is the Ulysses sequence-parallel degree (DeepSpeed key).
	SequenceParallelSize int `json:"sequence_parallel_size" ds:"def=1;min=1"`
	// TensorModelParallelSize is the tensor-parallel degree (deepgo key; Megatron's name).
	TensorModelParallelSize int `json:"tensor_model_parallel_size" ds:"def=1;min=1;deepgo"`
	// MegatronSequenceParallel splits the LayerNorm regions along the sequence inside TP (deepgo key; Megatron's --sequence-parallel).
	MegatronSequenceParallel bool `json:"megatron_sequence_parallel" ds:"def=false;deepgo"`
	// PipelineModelParallelSize is the number of pipeline stages (deepgo key; Megatron's name).
	PipelineModelParallelSize int `json:"pipeline_model_parallel_size" ds:"def=1;min=1;deepgo"`
	// PipelineSchedule selects the pipeline schedule (deepgo key).
	PipelineSchedule PipelineSchedule `json:"pipeline_schedule" ds:"deepgo"`
	// SequenceParallel holds deepgo's sequence-parallel options (deepgo key).
	SequenceParallel SequenceParallel `json:"sequence_parallel" ds:"deepgo"`

	// Other holds recognised DeepSpeed sections deepgo keeps but does not model
	// (compression_training, data_efficiency, hybrid_engine, ...), verbatim.
	Other map[string]any `json:"-"`

	// Warnings lists every non-fatal remark found while loading.
	Warnings []Warning `json:"-"`
	// Unresolved lists the JSON paths of "auto" values deepgo could not resolve.
	Unresolved []string `json:"-"`
	// Explicit records the JSON paths the document set (as opposed to defaults).
	Explicit map[string]bool `json:"-"`
	// AutoPaths lists the JSON paths that held "auto" in the document.
	AutoPaths []string `json:"-"`

	// parseErrs keeps the Errors Parse returned with this *Config: its bad
	// values were replaced by defaults, so Validate refuses it.
	parseErrs Errors
	// parseOpts are the options Parse read the document with (world size,
	// model hidden size, strict), for Validate to check the same way.
	parseOpts options
}

// IsSet reports whether the document set the key at path (a dotted JSON path)
// rather than deepgo filling in the default.
func (c *Config) IsSet(path string) bool { return c.Explicit[path] }
