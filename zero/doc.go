// Package zero implements ZeRO (Rajbhandari et al., arXiv:1910.02054) with
// DeepSpeed's semantics on deepgo's Backend and Comm: flat, padded, aligned
// partitioning of parameters, gradients and optimizer state over the
// data-parallel group; gradient buckets reduced (all-reduce for stage 0,
// reduce-scatter for stages 1-3) with optional overlap with backward; and
// stage-3 parameter gathering with trace-based prefetch and release.
//
// Layout. Parameters are packed into units. A unit is a contiguous flat
// buffer holding whole parameters back to back, padded to a multiple of
// Align×N elements (N the data-parallel size) and split into N equal chunks;
// rank r owns chunk r of every unit. For stages 0-2 a unit is a gradient
// bucket: parameters are taken in backward order (last module first) and a
// unit closes before it would exceed reduce_bucket_size elements (a
// parameter larger than the bucket gets a unit of its own, as DeepSpeed
// reduces it alone). For stage 3 a unit is one module's parameters, so that
// a module is gathered with one partitioned all-gather into one flat buffer.
// This is Megatron's distributed-optimizer layout (each bucket sharded N
// ways) rather than DeepSpeed stage 1/2's single contiguous partition; with
// the default bucket size of 5e8 elements a model under that size is one
// unit and the two layouts coincide. The optimizer state follows the owned
// chunks, so every byte of fp32 master weights and moments lives on exactly
// one rank.
//
// The planning parts (PlanBuckets, PlanModules, ReduceScaling, the stage-3
// Coordinator) are pure functions and state machines, tested as tables; the
// Optimizer executes them.
package zero
