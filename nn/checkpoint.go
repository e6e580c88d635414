package nn

import "time"

// Checkpointing is DeepSpeed's activation_checkpointing section as it
// applies to GPT's blocks: a checkpointed block keeps only its input (the
// residual stream entering it) between forward and backward and recomputes
// its internal activations during backward, in one buffer shared by all
// checkpointed blocks.
type Checkpointing struct {
	// Enabled turns checkpointing on (DeepSpeed's model code opts in by
	// calling checkpoint(); here the trainer sets this).
	Enabled bool
	// NumberCheckpoints is how many blocks are checkpointed, the first ones
	// (their activations would live longest); 0 means all blocks.
	NumberCheckpoints int
	// PartitionActivations shards the saved inputs over the tensor-parallel
	// group; without tensor parallelism it has no effect (see GPT.Notes).
	PartitionActivations bool
	// CPUCheckpointing keeps saved inputs in host memory: on the CPU
	// backend they are there already, so it changes nothing.
	CPUCheckpointing bool
	// ContiguousMemoryOptimization packs the saved inputs of all
	// checkpointed blocks into one buffer instead of one per block.
	ContiguousMemoryOptimization bool
	// SynchronizeCheckpointBoundary synchronises the device around each
	// checkpoint; CPU kernels are synchronous, so it is a no-op here.
	SynchronizeCheckpointBoundary bool
	// Profile times the recomputation (ActivationStats.Recompute).
	Profile bool
}

// ActivationStats is GPT's measured activation memory.
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
