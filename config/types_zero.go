package config

// ZeroConfig is the zero_optimization section (ZeRO stages 0-3, offload, ZeRO++).
type ZeroConfig struct {
	// Stage is the ZeRO stage: 0 off, 1 optimizer states, 2 +gradients, 3 +parameters.
	Stage int `json:"stage" ds:"def=0;min=0;max=3"`
	// ContiguousGradients copies gradients into a contiguous bucket buffer.
	ContiguousGradients bool `json:"contiguous_gradients" ds:"def=true"`
	// ReduceScatter reduces each gradient to its owner instead of all-reducing; at stages 1-3 it divides each by the data-parallel size before the sum.
	ReduceScatter bool `json:"reduce_scatter" ds:"def=true"`
	// ReduceBucketSize is the gradient bucket size in elements.
	ReduceBucketSize int `json:"reduce_bucket_size" ds:"def=500000000;min=0;auto=hidden2"`
	// UseMultiRankBucketAllreduce all-reduces buckets across ranks at once.
	UseMultiRankBucketAllreduce bool `json:"use_multi_rank_bucket_allreduce" ds:"def=true"`
	// AllgatherPartitions all-gathers updated partitions (vs broadcast).
	AllgatherPartitions bool `json:"allgather_partitions" ds:"def=true"`
	// AllgatherBucketSize is the all-gather bucket size in elements (stage 1/2).
	AllgatherBucketSize int `json:"allgather_bucket_size" ds:"def=500000000;min=0"`
	// OverlapComm overlaps gradient reduction with backward; nil means "stage == 3".
	OverlapComm *bool `json:"overlap_comm,omitempty"`
	// LoadFromFP32Weights restores fp16 weights from the fp32 master copy on load.
	LoadFromFP32Weights bool `json:"load_from_fp32_weights" ds:"def=true"`
	// ElasticCheckpoint is the legacy elastic checkpoint format.
	ElasticCheckpoint bool `json:"elastic_checkpoint" ds:"def=false"`
	// OffloadParam offloads parameters (stage 3); nil when absent.
	OffloadParam *Offload `json:"offload_param,omitempty" ds:"kind=param"`
	// OffloadOptimizer offloads optimizer states (stage 1-3); nil when absent.
	OffloadOptimizer *Offload `json:"offload_optimizer,omitempty" ds:"kind=optimizer"`
	// SubGroupSize is the stage-3 optimizer tile size in elements.
	SubGroupSize int `json:"sub_group_size" ds:"def=1000000000;min=1"`
	// Stage3PrefetchBucketSize is the stage-3 parameter prefetch size in elements.
	Stage3PrefetchBucketSize int `json:"stage3_prefetch_bucket_size" ds:"def=50000000;min=0;auto=hidden09"`
	// Stage3ParamPersistenceThreshold keeps parameters smaller than this unpartitioned.
	Stage3ParamPersistenceThreshold int `json:"stage3_param_persistence_threshold" ds:"def=100000;min=0;auto=hidden10"`
	// Stage3ModelPersistenceThreshold caps the total size of persistent parameters.
	Stage3ModelPersistenceThreshold int64 `json:"stage3_model_persistence_threshold" ds:"def=9223372036854775807;min=0"`
	// Stage3MaxLiveParameters caps gathered parameters resident at once.
	Stage3MaxLiveParameters int `json:"stage3_max_live_parameters" ds:"def=1000000000;min=0"`
	// Stage3MaxReuseDistance keeps a parameter gathered if reused within this distance.
	Stage3MaxReuseDistance int `json:"stage3_max_reuse_distance" ds:"def=1000000000;min=0"`
	// Stage3Gather16bitWeightsOnModelSave consolidates 16-bit weights on save.
	Stage3Gather16bitWeightsOnModelSave bool `json:"stage3_gather_16bit_weights_on_model_save" ds:"def=false"`
	// Stage3ModuleGranularityThreshold fetches small modules as a unit.
	Stage3ModuleGranularityThreshold int `json:"stage3_module_granularity_threshold" ds:"def=0;min=0"`
	// Stage3UseAllReduceForFetchParams fetches parameters with all-reduce.
	Stage3UseAllReduceForFetchParams bool `json:"stage3_use_all_reduce_for_fetch_params" ds:"def=false"`
	// Stage3AllgatherSequential all-gathers parameters one by one without a bucket copy.
	Stage3AllgatherSequential bool `json:"stage3_allgather_sequential" ds:"def=false"`
	// IgnoreUnusedParameters tolerates parameters without gradients.
	IgnoreUnusedParameters bool `json:"ignore_unused_parameters" ds:"def=true"`
	// LegacyStage1 selects the removed legacy stage 1 (true is an error).
	LegacyStage1 bool `json:"legacy_stage1" ds:"def=false"`
	// RoundRobinGradients spreads gradient partitions round-robin.
	RoundRobinGradients bool `json:"round_robin_gradients" ds:"def=false"`
	// ZeroHPZPartitionSize is the ZeRO++ hpZ secondary partition size.
	ZeroHPZPartitionSize int `json:"zero_hpz_partition_size" ds:"def=1;min=1"`
	// ZeroQuantizedWeights enables ZeRO++ qwZ.
	ZeroQuantizedWeights bool `json:"zero_quantized_weights" ds:"def=false"`
	// ZeroQuantizedNontrainableWeights quantizes frozen weights.
	ZeroQuantizedNontrainableWeights bool `json:"zero_quantized_nontrainable_weights" ds:"def=false"`
	// ZeroQuantizedGradients enables ZeRO++ qgZ.
	ZeroQuantizedGradients bool `json:"zero_quantized_gradients" ds:"def=false"`
	// ZeroppLocoParam holds ZeRO++ LoCo parameters {err_beta, reset_T}; nil when absent.
	ZeroppLocoParam map[string]any `json:"zeropp_loco_param,omitempty"`
	// MicsShardSize enables MiCS when > 0.
	MicsShardSize int `json:"mics_shard_size" ds:"def=-1;min=-1"`
	// MicsHierarchicalParamsGather enables hierarchical MiCS all-gather.
	MicsHierarchicalParamsGather bool `json:"mics_hierarchical_params_gather" ds:"def=false"`
	// Zenflow holds ZenFlow options verbatim; nil when absent.
	Zenflow map[string]any `json:"zenflow,omitempty"`
	// LeafModule names ZeRO-3 leaf modules.
	LeafModule LeafModule `json:"leaf_module"`
}

// LeafModule lists modules ZeRO-3 treats as leaves.
type LeafModule struct {
	// Classes are class names.
	Classes []string `json:"classes,omitempty"`
	// Names are module names.
	Names []string `json:"names,omitempty"`
	// NameSuffixes are module-name suffixes.
	NameSuffixes []string `json:"name_suffixes,omitempty"`
}

// Offload is an offload_param or offload_optimizer block. Fields that belong
// to only one of the two are documented as such; Explain has the details.
type Offload struct {
	// Device is "none", "cpu" or "nvme".
	Device string `json:"device" ds:"def=none;enum=none|cpu|nvme;fold"`
	// NvmePath is the directory used when Device is "nvme" (required then).
	NvmePath *string `json:"nvme_path,omitempty"`
	// BufferCount is the number of swap buffers (param: 5, optimizer: 4).
	BufferCount int `json:"buffer_count" ds:"def=5;min=1;optdef=4"`
	// BufferSize is the swap buffer size in elements (offload_param only).
	BufferSize int `json:"buffer_size" ds:"def=100000000;min=1;only=param"`
	// MaxInCPU is the number of parameter elements kept in CPU memory (offload_param only).
	MaxInCPU int `json:"max_in_cpu" ds:"def=1000000000;min=0;only=param"`
	// PinMemory pins the CPU buffers.
	PinMemory bool `json:"pin_memory" ds:"def=true"`
	// PipelineRead overlaps NVMe reads with compute (offload_optimizer only).
	PipelineRead bool `json:"pipeline_read" ds:"def=false;only=optimizer"`
	// PipelineWrite overlaps NVMe writes with compute (offload_optimizer only).
	PipelineWrite bool `json:"pipeline_write" ds:"def=false;only=optimizer"`
	// FastInit speeds up NVMe optimizer initialisation (offload_optimizer only).
	FastInit bool `json:"fast_init" ds:"def=false;only=optimizer"`
	// Ratio is the fraction of optimizer states offloaded (offload_optimizer, stage 3).
	Ratio float64 `json:"ratio" ds:"def=1.0;min=0;max=1;only=optimizer"`
	// SuperOffload enables SuperOffload (offload_optimizer only).
	SuperOffload bool `json:"super_offload" ds:"def=false;only=optimizer"`
	// CpuadamCoresPerc is the share of cores used by CPU Adam (offload_optimizer only).
	CpuadamCoresPerc float64 `json:"cpuadam_cores_perc" ds:"def=0.8;gt=0;max=1;only=optimizer"`
}

// AIO is the aio section: the NVMe asynchronous I/O engine.
type AIO struct {
	// BlockSize is the I/O block size in bytes.
	BlockSize int `json:"block_size" ds:"def=1048576;min=1"`
	// QueueDepth is the number of in-flight requests.
	QueueDepth int `json:"queue_depth" ds:"def=8;min=1"`
	// IntraOpParallelism is the number of I/O threads per request (was thread_count).
	IntraOpParallelism int `json:"intra_op_parallelism" ds:"def=1;min=1"`
	// SingleSubmit submits requests one by one.
	SingleSubmit bool `json:"single_submit" ds:"def=false"`
	// OverlapEvents overlaps submission and completion.
	OverlapEvents bool `json:"overlap_events" ds:"def=true"`
	// UseGDS uses GPUDirect Storage.
	UseGDS bool `json:"use_gds" ds:"def=false"`
}
