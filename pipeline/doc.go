// Package pipeline holds the engine-independent half of pipeline
// parallelism: which stage runs which layers, and in what order each stage
// loads, computes, sends and receives micro-batches.
//
// Everything here is a pure function of its arguments. A schedule is a
// deterministic state machine in the style of etcd's raft package: it emits
// [Instruction]s and the engine, which owns the tensors, the communicator and
// the clock, executes them. Nothing in this package touches a device.
//
// # Schedules
//
// [NewTrainSchedule] and [NewInferenceSchedule] reproduce DeepSpeed's
// TrainSchedule (1F1B) and InferenceSchedule step for step, including the
// empty idle steps, so that a deepgo stage and a DeepSpeed stage executing
// the same configuration issue the same point-to-point operations in the
// same order. [NewGPipeSchedule] is deepgo's own (pipeline_schedule "GPipe"):
// every micro-batch's forward, then every backward.
// [NewInterleavedSchedule] is Megatron-LM's interleaved 1F1B
// (pipeline_schedule "Interleaved" with virtual_stages V >= 2): each stage
// holds V model chunks, chunk c of stage s being virtual stage c*S+s, and
// the pipeline's activations wrap from the last stage back to the first
// between chunks; it keeps Megatron's per-stage compute order and warmup
// depth. [NewTraining] picks one of them from the pipeline_schedule config
// value, and [NewInference] the forward-only schedule an evaluation runs
// beside it: the InferenceSchedule, or under the interleaved schedule its
// forward half ([ForwardOnly]).
//
// The engine's obligations when executing a schedule:
//
//   - All stages run the same number of steps; step i of every stage runs
//     concurrently. A Send on one stage is paired with the matching Recv on
//     the neighbouring stage in the same step, and within a step the
//     instructions must be executed in the order given (the order is what
//     keeps blocking send/recv pairs free of deadlock).
//   - A buffer id names one of NumPipeBuffers() activation slots on the
//     stage; an instruction's MicroBatch says which micro-batch occupies it
//     and its Chunk which model chunk runs the op (always 0 except under
//     the interleaved schedule).
//   - Under the interleaved schedule a Send on chunk c of the last stage
//     pairs with the Recv on chunk c+1 of the first (and gradients the
//     reverse way). With a single stage that pair is on the stage itself:
//     the Send is immediately followed by its Recv, and the engine copies
//     locally instead of calling the communicator.
//   - ReduceTiedGrads, ReduceGrads and OptimizerStep close a training batch
//     and appear only in the last step.
//
// # Partitioning
//
// [PartitionUniform] and [PartitionBalanced] are DeepSpeed's
// partition_uniform and partition_balanced; [PartitionLayers] is
// PipelineModule._partition_layers (methods "uniform", "parameters" and
// "type:<regex>"). A partition is a list of num_parts+1 boundaries: stage s
// owns items [parts[s], parts[s+1]).
package pipeline
