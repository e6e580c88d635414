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
// Engine today (a pipeline engine will implement Trainer too). The Engine
// wires config → backend → comm group → ZeRO (package zero) → optimizer →
// loss scaler → LR schedule. Every data-parallel rank runs its own Trainer
// over its own comm.Comm (in one process: one goroutine per rank over
// comm/local).
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
