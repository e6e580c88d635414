package nn

import "time"

// Checkpointing is DeepSpeed's activation_checkpointing section as it
// applies to GPT's blocks: a checkpointed block keeps only its input (the
// residual stream entering it) between forward and backward and recomputes
// its internal activations during backward.
//
// Under the data-parallel engine the GPT declares its checkpointed blocks
// as segments (model.Checkpointed) and the engine does the rest, with the
// config's partition_activations, cpu_checkpointing,
// contiguous_memory_optimization, synchronize_checkpoint_boundary and
// profile (see deepgo.CheckpointStats). The GPT's own recompute, in one
// buffer shared by the checkpointed blocks, serves only GPT.Forward and
// GPT.Backward called directly and pipeline parts (CheckpointEvery), where
// those keys have no effect.
type Checkpointing struct {
	// Enabled turns checkpointing on (DeepSpeed's model code opts in by
	// calling checkpoint(); here the trainer sets this).
	Enabled bool
	// NumberCheckpoints is how many blocks are checkpointed, the first ones
	// (their activations would live longest); 0 means all blocks.
	NumberCheckpoints int
	// PartitionActivations, CPUCheckpointing and
	// SynchronizeCheckpointBoundary are the engine's (the config's keys);
	// the GPT only notes them (GPT.Notes).
	PartitionActivations bool
	// CPUCheckpointing: see PartitionActivations.
	CPUCheckpointing bool
	// ContiguousMemoryOptimization packs the saved inputs of the GPT's own
	// checkpointed blocks into one buffer instead of one per block (the
	// engine's buffer follows the config's key).
	ContiguousMemoryOptimization bool
	// SynchronizeCheckpointBoundary: see PartitionActivations.
	SynchronizeCheckpointBoundary bool
	// Profile times the GPT's own recomputation (ActivationStats.Recompute).
	Profile bool
}

// ActivationStats is GPT's measured activation memory: under an engine that
// checkpoints, only what the GPT keeps itself (tokens, the embedding
// output, the head's buffers); the blocks' activations are then the
// engine's (zero.Memory's Arena, deepgo.CheckpointStats).
type ActivationStats struct {
	// Bytes is what lives from forward to backward: the residual stream
	// (the checkpointed blocks' saved inputs included), the activations of
	// the blocks that are not checkpointed, the one recompute buffer set of
	// the checkpointed ones, the final LayerNorm and the logits.
	Bytes int64 `json:"activation_bytes"`
	// Allocs is the number of buffers behind Bytes.
	Allocs int `json:"activation_allocs"`
	// SavedInputBytes is the part of Bytes holding checkpointed blocks' inputs.
	SavedInputBytes int64 `json:"saved_input_bytes"`
	// ScratchBytes is memory used only inside one layer's forward or
	// backward (gradient scratch), shared by all blocks.
	ScratchBytes int64 `json:"scratch_bytes"`
	// Checkpointed is the number of checkpointed blocks.
	Checkpointed int `json:"checkpointed_blocks"`
	// Recompute is the time spent recomputing forwards (with Profile).
	Recompute time.Duration `json:"recompute_ns"`
}
