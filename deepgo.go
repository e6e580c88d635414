// Package deepgo trains neural networks the way DeepSpeed does. A Go trainer
// hands Initialize a DeepSpeed config and a Model, and calls TrainBatch (or
// Forward, Backward and Step on every micro-batch) in its loop, the same
// mental model as deepspeed.initialize:
//
//	eng, err := deepgo.Initialize(ctx, cfg, model, deepgo.WithComm(c))
//	for step := range steps {
//		loss, err := eng.TrainBatch(ctx, microBatches)
//	}
//
// The Engine wires config → backend → comm group → ZeRO (package zero) →
// optimizer → loss scaler → LR schedule. Every data-parallel rank runs its
// own Engine over its own comm.Comm (in one process: one goroutine per rank
// over comm/local).
//
// A model is an ordered list of Modules with named parameters and explicit
// Forward and Backward, so that the engine can gather a module's parameters
// just before it runs (ZeRO stage 3), release them after, and reduce a
// gradient bucket as soon as the gradients in it are ready. Any Go code
// that implements Model trains; nothing ties it to deepgo's own layers.
package deepgo
