package model

import (
	"context"

	"github.com/deepgo-ml/deepgo/tensor"
)

// Pipelined is a Model a pipeline engine can cut into stages, like
// DeepSpeed's PipelineModule: the engine partitions Modules() into
// contiguous parts, one per (virtual) stage, and runs each part on the rank
// that holds it, passing activations and their gradients between stages.
//
// A stage keeps several micro-batches in flight (up to the pipeline depth
// under 1F1B, every micro-batch under GPipe), so it asks for one Part per
// in-flight micro-batch: Parts of one model share its parameters and each
// has activation memory of its own.
type Pipelined interface {
	Model
	// NewPart returns modules [start, stop) of Modules() as a Part with
	// activation memory of its own. Every call returns a new Part; all of
	// them read and write the model's parameters. The caller calls Free.
	NewPart(start, stop int) (Part, error)
}

// Part is a contiguous run of a Pipelined model's modules holding one
// micro-batch in flight.
type Part interface {
	// Modules are the part's modules in order, named as in the model's
	// Modules(). Their Params are the model's own, plus, on a module that
	// reads a weight another part declares (GPT's head reads the
	// embedding's wte), that weight under its own name: the engine keeps
	// a copy of it on this stage and sums its gradients over the stages
	// holding it (DeepSpeed's tied modules). Backward adds this part's
	// share of such a weight's gradient into its Grad.
	Modules() []Module
	// Input prepares the part for micro-batch mb (the whole micro-batch,
	// which every stage is given) and returns the tensor the activation
	// entering the part is to be received into: the engine fills it, then
	// passes it to the first module's Forward. It returns nil for the part
	// that starts the model, whose first module takes mb.Input.
	Input(ctx context.Context, mb MicroBatch) (*tensor.Tensor, error)
	// Loss is the model's Loss; it is called only on the part ending the
	// model, after its Forward.
	Loss(ctx context.Context, out, target Activation, gradScale float64) (float64, Activation, error)
	// Free releases the part's activation memory.
	Free()
}

// ActivationCheckpointer is implemented by a Pipelined model that can
// recompute activations in backward instead of keeping them, for
// DeepSpeed's pipeline.activation_checkpoint_interval: the engine calls
// CheckpointEvery(n) before it makes any Part, asking the model to keep
// only the input of every run of n layers. A model that cannot do n
// returns an error saying which intervals it can.
type ActivationCheckpointer interface {
	CheckpointEvery(n int) error
}
