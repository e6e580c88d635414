// Package deepgo trains neural networks the way DeepSpeed does. A Go trainer
// hands Initialize a DeepSpeed config and a model.Model, and calls TrainBatch
// (or Forward, Backward and Step on every micro-batch) on the Trainer it gets
// back, the same mental model as deepspeed.initialize:
//
//	trainer, err := deepgo.Initialize(ctx, cfg, net, deepgo.WithComm(c))
//	for step := range steps {
//		loss, err := trainer.TrainBatch(ctx, microBatches)
//	}
//
// Initialize chooses the engine from the config: the data-parallel ZeRO
// Engine (stages 0-3, CPU and NVMe offload), or the pipeline engine
// (PipeEngine) when the config asks for pipeline stages. Both implement
// Trainer. The Engine wires config → backend → comm group → ZeRO (package
// zero) → optimizer → loss scaler → LR schedule. Every data-parallel rank
// runs its own Trainer over its own comm.Comm (in one process: one
// goroutine per rank over comm/local; across processes the comm of
// deepgo launch, over Gloo or MPI).
//
// Where the math runs is an option: the CPU backend by default, a device
// with WithDevice or WithBackend (the simulated device of package sim, or
// CUDA under the cuda build tag), or the device a DeviceComm is bound to.
// Tensor and sequence parallelism take their groups as options
// (WithTensorParallel with TensorParallelGroups or PipeTensorParallelGroup;
// WithSequenceParallel with SequenceParallelGroups or
// PipeSequenceParallelGroup). Save and Load write
// and read crash-safe sharded checkpoints in DeepSpeed's layout; the
// config's monitor sections (csv_monitor, tensorboard, wall_clock_breakdown,
// flops_profiler, comms_logger) write what DeepSpeed's do.
//
// A model (package model) is an ordered list of Modules with named
// parameters and explicit Forward and Backward, so that the engine can
// gather a module's parameters just before it runs (ZeRO stage 3), release
// them after, and reduce a gradient bucket as soon as the gradients in it
// are ready. Any Go code that implements model.Model trains; nothing ties it
// to deepgo's own layers (package nn). Modules find the engine's backend
// (backend.FromContext) and a per-micro-step arena for activations
// (tensor.ArenaFromContext) in their context; examples/mlp is a whole
// user-written model in one file.
package deepgo
