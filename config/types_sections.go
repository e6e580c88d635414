package config

// ActivationCheckpointing is the activation_checkpointing section.
type ActivationCheckpointing struct {
	// PartitionActivations shards saved activations across the tensor-parallel group.
	PartitionActivations bool `json:"partition_activations" ds:"def=false"`
	// CPUCheckpointing moves saved activations to CPU (only with partitioning).
	CPUCheckpointing bool `json:"cpu_checkpointing" ds:"def=false"`
	// ContiguousMemoryOptimization copies checkpoints into one buffer (needs partitioning and NumberCheckpoints).
	ContiguousMemoryOptimization bool `json:"contiguous_memory_optimization" ds:"def=false"`
	// NumberCheckpoints is the number of checkpoints per forward; nil when unknown.
	NumberCheckpoints *int `json:"number_checkpoints,omitempty" ds:"min=1"`
	// SynchronizeCheckpointBoundary synchronises the device around each checkpoint.
	SynchronizeCheckpointBoundary bool `json:"synchronize_checkpoint_boundary" ds:"def=false"`
	// Profile times checkpointed forwards.
	Profile bool `json:"profile" ds:"def=false"`
}

// PipelineConfig is DeepSpeed's pipeline section (PipelineEngine options).
type PipelineConfig struct {
	// Stages is "auto" or a stage count; ignored by DeepSpeed's engine (the module decides).
	Stages any `json:"stages" ds:"def=auto;keepauto"`
	// Partition is the partition method name ("best" by default); ignored by the engine.
	Partition string `json:"partition" ds:"def=best"`
	// SeedLayers seeds each layer differently; ignored by the engine.
	SeedLayers bool `json:"seed_layers" ds:"def=false"`
	// ActivationCheckpointInterval checkpoints every N layers (0 = off).
	ActivationCheckpointInterval int `json:"activation_checkpoint_interval" ds:"def=0;min=0"`
	// PipePartitioned partitions activations sent between stages.
	PipePartitioned bool `json:"pipe_partitioned" ds:"def=true"`
	// GradPartitioned partitions gradients sent between stages.
	GradPartitioned bool `json:"grad_partitioned" ds:"def=true"`
	// UseReentrant selects reentrant activation checkpointing.
	UseReentrant bool `json:"use_reentrant" ds:"def=true"`
}

// PipelineSchedule is deepgo's pipeline_schedule key. In a document it is
// either a string ("1F1B", "GPipe", "Interleaved") or an object
// {"type": "Interleaved", "virtual_stages": 2}.
type PipelineSchedule struct {
	// Type is "1F1B" (DeepSpeed's TrainSchedule), "GPipe" or "Interleaved".
	Type string `json:"type" ds:"def=1F1B;enum=1F1B|GPipe|Interleaved;fold"`
	// VirtualStages is the number of model chunks per stage for "Interleaved" (1 otherwise).
	VirtualStages int `json:"virtual_stages" ds:"def=1;min=1"`
}

// SequenceParallel is deepgo's sequence_parallel section.
type SequenceParallel struct {
	// Enabled turns sequence parallelism on (its degree is
	// sequence_parallel_size). JSON leaves out a false: an explicit false
	// beside sequence_parallel_size > 1 is an error, which a round trip of
	// the default must not become.
	Enabled bool `json:"enabled,omitempty" ds:"def=false"`
	// AttentionWindowSize limits attention to a sliding window of this many tokens (0 = full).
	AttentionWindowSize int `json:"attention_window_size" ds:"def=0;min=0"`
	// GradientCheckpointingKwargs are passed to activation checkpointing of the attention blocks.
	GradientCheckpointingKwargs GradientCheckpointingKwargs `json:"gradient_checkpointing_kwargs"`
}

// GradientCheckpointingKwargs mirrors HF's gradient_checkpointing_kwargs.
type GradientCheckpointingKwargs struct {
	// UseReentrant selects reentrant checkpointing (true, the torch default) or not.
	UseReentrant bool `json:"use_reentrant" ds:"def=true"`
}

// Optimizer is the optimizer section.
type Optimizer struct {
	// Type is the optimizer name: Adam, AdamW, Lamb, Lion (DeepSpeed's, any case) or SGD (torch.optim); see ParseOptimizer.
	Type string `json:"type" ds:"required"`
	// Params are the optimizer's keyword arguments.
	Params map[string]any `json:"params,omitempty"`
	// LegacyFusion selects the legacy fused fp16 optimizer.
	LegacyFusion bool `json:"legacy_fusion" ds:"def=false"`
}

// Scheduler is the scheduler section.
type Scheduler struct {
	// Type is the schedule name: WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle or LRRangeTest; see ParseScheduler.
	Type string `json:"type" ds:"required"`
	// Params are the schedule's keyword arguments.
	Params map[string]any `json:"params,omitempty"`
}

// Checkpoint is the checkpoint section: DeepSpeed's keys plus deepgo's
// (zero_checkpoint, checkpoint_type, save_dir, load_path, keep_n_most_recent,
// num_checkpoints_to_keep). See doc.go for their meaning.
type Checkpoint struct {
	// TagValidation is "Warn", "Ignore" or "Fail" (checks tags agree across ranks).
	TagValidation string `json:"tag_validation" ds:"def=Warn;enum=Warn|Ignore|Fail;fold"`
	// LoadUniversal loads a universal checkpoint.
	LoadUniversal bool `json:"load_universal" ds:"def=false"`
	// UseNodeLocalStorage writes through node-local storage.
	UseNodeLocalStorage bool `json:"use_node_local_storage" ds:"def=false"`
	// ParallelWrite holds parallel write options.
	ParallelWrite ParallelWrite `json:"parallel_write"`
	// CheckpointSerialization uses torch serialization.
	CheckpointSerialization bool `json:"checkpoint_serialization" ds:"def=true"`
	// Writer configures the checkpoint writer; nil when absent.
	Writer *CheckpointWriter `json:"writer,omitempty"`

	// ZeroCheckpoint saves each rank's ZeRO shard separately (deepgo; false consolidates on rank 0).
	ZeroCheckpoint bool `json:"zero_checkpoint" ds:"def=true;deepgo"`
	// CheckpointType is "sharded" (several files per rank) or "blob" (one file per rank) (deepgo).
	CheckpointType string `json:"checkpoint_type" ds:"def=sharded;enum=sharded|blob;fold;deepgo"`
	// SaveDir is the directory checkpoints are written to (deepgo; "" = the caller decides).
	SaveDir string `json:"save_dir" ds:"def=;deepgo"`
	// LoadPath is a checkpoint to resume from (deepgo; nil = start fresh).
	LoadPath *string `json:"load_path,omitempty" ds:"deepgo"`
	// KeepNMostRecent keeps only the N newest checkpoints (deepgo; nil or 0 = keep all).
	KeepNMostRecent *int `json:"keep_n_most_recent,omitempty" ds:"min=0;deepgo"`
	// NumCheckpointsToKeep is a synonym of KeepNMostRecent (deepgo); with
	// both set the larger wins.
	NumCheckpointsToKeep *int `json:"num_checkpoints_to_keep,omitempty" ds:"min=0;deepgo"`
}

// Keep returns the number of most recent checkpoints to keep (0 = keep all).
// When both keep_n_most_recent and num_checkpoints_to_keep are set, the larger
// wins: deepgo never deletes a checkpoint that either key asks to keep.
func (c Checkpoint) Keep() int {
	n := 0
	if c.KeepNMostRecent != nil {
		n = *c.KeepNMostRecent
	}
	if c.NumCheckpointsToKeep != nil && *c.NumCheckpointsToKeep > n {
		n = *c.NumCheckpointsToKeep
	}
	return n
}

// ParallelWrite is checkpoint.parallel_write.
type ParallelWrite struct {
	// PipelineStage spreads pipeline layer files across data-parallel ranks.
	PipelineStage bool `json:"pipeline_stage" ds:"def=false"`
}

// CheckpointWriter is checkpoint.writer.
type CheckpointWriter struct {
	// Type is "MOCK", "PYTHON" or "FAST".
	Type string `json:"type" ds:"def=FAST;enum=MOCK|PYTHON|FAST;fold"`
	// Decoupled saves in the background while training goes on (DeepSpeed: a
	// separate writer process; deepgo train: Trainer.SaveAsync).
	Decoupled bool `json:"decoupled" ds:"def=false"`
	// IOBufferSize is the I/O buffer size in bytes.
	IOBufferSize int `json:"io_buffer_size" ds:"def=67108864;min=1"`
	// IOBufferDouble double-buffers I/O.
	IOBufferDouble bool `json:"io_buffer_double" ds:"def=true"`
	// ShowStatistics prints write statistics.
	ShowStatistics bool `json:"show_statistics" ds:"def=false"`
	// DataParallel is "replica", "socket" or "machine".
	DataParallel string `json:"data_parallel" ds:"def=replica;enum=replica|socket|machine;fold"`
	// IOMultiplier multiplies I/O parallelism.
	IOMultiplier int `json:"io_multiplier" ds:"def=1;min=1"`
}

// Monitor is a tensorboard or csv_monitor section.
type Monitor struct {
	// Enabled turns the monitor on.
	Enabled bool `json:"enabled" ds:"def=false"`
	// OutputPath is the output directory.
	OutputPath string `json:"output_path" ds:"def="`
	// JobName names the run.
	JobName string `json:"job_name" ds:"def=DeepSpeedJobName"`
}

// Wandb is the wandb monitor section.
type Wandb struct {
	// Enabled turns the monitor on.
	Enabled bool `json:"enabled" ds:"def=false"`
	// Group is the W&B group.
	Group *string `json:"group,omitempty"`
	// Team is the W&B team.
	Team *string `json:"team,omitempty"`
	// Project is the W&B project.
	Project string `json:"project" ds:"def=deepspeed"`
}

// Comet is the comet monitor section.
type Comet struct {
	// Enabled turns the monitor on.
	Enabled bool `json:"enabled" ds:"def=false"`
	// SamplesLogInterval logs every N samples.
	SamplesLogInterval int `json:"samples_log_interval" ds:"def=100;min=1"`
	// Project is the Comet project.
	Project *string `json:"project,omitempty"`
	// Workspace is the Comet workspace.
	Workspace *string `json:"workspace,omitempty"`
	// APIKey is the Comet API key.
	APIKey *string `json:"api_key,omitempty"`
	// ExperimentName names the experiment.
	ExperimentName *string `json:"experiment_name,omitempty"`
	// ExperimentKey is the experiment key.
	ExperimentKey *string `json:"experiment_key,omitempty"`
	// Online logs online.
	Online *bool `json:"online,omitempty"`
	// Mode is the Comet mode.
	Mode *string `json:"mode,omitempty"`
}

// FlopsProfiler is the flops_profiler section.
type FlopsProfiler struct {
	// Enabled turns the profiler on (and forces wall_clock_breakdown).
	Enabled bool `json:"enabled" ds:"def=false"`
	// RecomputeFwdFactor accounts for recomputed forwards.
	RecomputeFwdFactor float64 `json:"recompute_fwd_factor" ds:"def=0.0;min=0"`
	// ProfileStep is the number of optimizer steps done before the one
	// profiled (global_steps when it starts): 1 profiles the second step,
	// whose report says "at step 2", as DeepSpeed's does.
	ProfileStep int `json:"profile_step" ds:"def=1"`
	// ModuleDepth is the depth of the module tree printed (-1 = all).
	ModuleDepth int `json:"module_depth" ds:"def=-1;min=-1"`
	// TopModules is the number of top modules printed.
	TopModules int `json:"top_modules" ds:"def=1;min=1"`
	// Detailed prints the per-module profile.
	Detailed bool `json:"detailed" ds:"def=true"`
	// OutputFile is where the profile goes (nil = stdout).
	OutputFile *string `json:"output_file,omitempty"`
}

// CommsLogger is the comms_logger section.
type CommsLogger struct {
	// Enabled turns the logger on.
	Enabled bool `json:"enabled" ds:"def=false"`
	// Verbose logs every operation.
	Verbose bool `json:"verbose" ds:"def=false"`
	// ProfAll profiles every operation.
	ProfAll bool `json:"prof_all" ds:"def=true"`
	// ProfOps lists the operations profiled when ProfAll is false.
	ProfOps []string `json:"prof_ops,omitempty"`
	// Debug adds caller names.
	Debug bool `json:"debug" ds:"def=false"`
}

// Elasticity is the elasticity section. deepgo recognises it; enabled=true is
// reported as unsupported.
type Elasticity struct {
	// Enabled turns elastic batch computation on.
	Enabled bool `json:"enabled" ds:"def=false"`
	// MaxTrainBatchSize is the largest acceptable global batch.
	MaxTrainBatchSize int `json:"max_train_batch_size" ds:"def=2000;min=1"`
	// MicroBatchSizes are the candidate micro batches.
	MicroBatchSizes []int `json:"micro_batch_sizes" ds:"def=[2,4,6]"`
	// MinGPUs is the smallest GPU count.
	MinGPUs int `json:"min_gpus" ds:"def=1;min=1"`
	// MaxGPUs is the largest GPU count.
	MaxGPUs int `json:"max_gpus" ds:"def=10000;min=1"`
	// MinTime is the minimum running time in minutes.
	MinTime int `json:"min_time" ds:"def=0;min=0"`
	// PreferLargerBatch prefers larger batches among candidates.
	PreferLargerBatch bool `json:"prefer_larger_batch" ds:"def=true"`
	// IgnoreNonElasticBatchInfo ignores the batch triad when elastic.
	IgnoreNonElasticBatchInfo bool `json:"ignore_non_elastic_batch_info" ds:"def=false"`
	// NumGPUsPerNode is the GPU count per node.
	NumGPUsPerNode int `json:"num_gpus_per_node" ds:"def=1;min=1"`
	// ModelParallelSize is the model-parallel size.
	ModelParallelSize int `json:"model_parallel_size" ds:"def=1;min=1"`
	// Version is the elasticity algorithm version.
	Version float64 `json:"version" ds:"def=0.2"`
}
