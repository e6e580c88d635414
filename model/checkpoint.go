package model

import "context"

// Checkpointed is implemented by a Model that marks runs of its modules
// for activation checkpointing, as DeepSpeed's model code calls
// checkpoint(function, *args) on them. The engine then keeps only each
// segment's input from forward to backward (the boundary activation),
// frees everything the segment's modules allocated in between, and
// recomputes the segment's forward just before its backward. The
// activation_checkpointing config section says how the boundaries are
// kept (number_checkpoints, partition_activations, cpu_checkpointing,
// contiguous_memory_optimization).
//
// What a module inside a segment must allow:
//
//   - Forward runs twice per micro-step (once more just before Backward)
//     and must compute the same bits from the same input and parameters:
//     no random draws that differ between the two calls.
//   - Buffers it allocates from tensor.ArenaFromContext live only until
//     the segment ends (forward) or until the previous module's Backward
//     returns (recompute and backward): keep pointers to them for
//     Backward, as usual, since the recompute replaces them.
//   - A segment's output, when the module allocated it from the context's
//     arena, must be a *tensor.Tensor (contiguous): the engine copies it
//     out before freeing the segment's buffers. Outputs in memory the
//     model owns are passed on as they are.
//   - Its input may be anything; when it is a *tensor.Tensor the engine
//     allocated (the previous segment's output), the engine may hold it
//     partitioned or in host memory between forward and backward, and
//     hands the segment an equal tensor for the recompute.
type Checkpointed interface {
	// CheckpointSegments lists the segments in forward order. The engine
	// reads it at every Forward; segments must not overlap, and each must
	// name modules that run consecutively in Modules' order.
	CheckpointSegments() []Segment
}

// Segment is a run of consecutive modules checkpointed as one unit, named
// by its first and last module (equal for a segment of one module).
type Segment struct {
	First, Last string
}

type checkpointKey struct{}

// WithCheckpointing returns a copy of ctx telling the modules that the
// engine running them checkpoints the model's segments (Checkpointed):
// an engine passes it to every module and loss call of a micro-step with
// at least one checkpointed segment. A
// model that keeps activation memory of its own (nn.GPT) then allocates
// what its segments keep from the context's arena instead, so that the
// engine can free it.
func WithCheckpointing(ctx context.Context) context.Context {
	return context.WithValue(ctx, checkpointKey{}, true)
}

// CheckpointingFrom reports whether ctx comes from WithCheckpointing.
func CheckpointingFrom(ctx context.Context) bool {
	v, _ := ctx.Value(checkpointKey{}).(bool)
	return v
}
