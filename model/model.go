// Package model is the contract between a model and whatever trains it: a
// Model is an ordered list of Modules, each with named parameters and an
// explicit Forward and Backward over opaque Activations, plus a Loss. The
// data-parallel engine (package deepgo), a pipeline engine and the
// tensor-parallel layers all speak it, and a model author implements it
// without importing any engine: this package imports only tensor.
//
// The engine runs the modules itself, which is what lets it gather a
// module's parameters just before it runs (ZeRO stage 3), release them
// after, and reduce a gradient bucket as soon as the gradients in it are
// ready, without hooks.
//
// # Memory
//
// Host tensors are C memory with an explicit Free (package tensor). Who
// frees what:
//
//   - Activations, the gradients passed between modules and the loss
//     gradient belong to one micro-step. Allocate them from the arena in
//     the call's context (tensor.ArenaFromContext; an engine always puts
//     one there) and never free them: the engine frees everything in it
//     once that micro-step's Backward returns, see Module.
//   - A micro-batch's Input and Target are the caller's: the engine
//     neither copies nor frees them, and they must stay valid until the
//     micro-step's Backward returns.
//   - Initial parameter values are the caller's, copied by Initialize,
//     unless Param.Donate hands them to the engine.
//   - Param.Data and Param.Grad from Initialize on are the engine's.
//   - Anything else a module keeps across micro-steps (caches, scratch
//     sized once) is the module's to allocate and free.
package model

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/tensor"
)

// Activation is what flows between modules: the output of one module's
// Forward is the input of the next, and Backward maps the gradient of a
// module's output to the gradient of its input. The engine never looks
// inside; models choose the type (usually *tensor.Tensor or a struct of
// them).
type Activation any

// HostCopier is an Activation other than a *tensor.Tensor that can copy
// its values to host memory. The engine's evaluation returns a last
// module's output through it (deepgo's EvalOptions.Outputs); a
// *tensor.Tensor output is copied by the engine itself.
type HostCopier interface {
	// HostCopy returns a new contiguous host tensor holding the
	// activation's values, owned by the caller, who frees it.
	HostCopy() (*tensor.Tensor, error)
}

// TPLayout says how tensor parallelism splits a parameter. The zero value
// is Replicated: every TP rank holds the whole parameter and computes the
// same gradient for it, so the engine counts it once in the gradient norm,
// where it sums a Split parameter's shards over the TP group. ZeRO
// partitions both alike over the data-parallel group.
type TPLayout struct {
	// Split is true when each tensor-parallel rank holds a slice of the
	// full parameter along Dim (Megatron's column/row parallel weights).
	Split bool
	// Dim is the split dimension when Split is true.
	Dim int
	// Parts is the number of equal blocks the split dimension holds, each
	// split over the ranks on its own (a fused q, k, v weight has 3, its
	// rank's shard being its rows of q, then of k, then of v); 0 means 1.
	Parts int
}

// Runs calls f for every contiguous run of elements of rank's shard (of
// n) of a parameter of full shape full, row-major: where the run starts
// in the full tensor, where in the shard, and its length. The shard is
// itself row-major with full[Dim] replaced by full[Dim]/n. A replicated
// layout (or n 1) is one run covering the whole tensor.
func (l TPLayout) Runs(full []int, rank, n int, f func(fullOff, localOff, length int)) {
	total := 1
	for _, d := range full {
		total *= d
	}
	if !l.Split || n <= 1 {
		f(0, 0, total)
		return
	}
	outer, inner := 1, 1 // elements before and after dimension Dim
	for _, d := range full[:l.Dim] {
		outer *= d
	}
	for _, d := range full[l.Dim+1:] {
		inner *= d
	}
	parts := max(l.Parts, 1)
	per := full[l.Dim] / parts // one block along Dim
	mine := per / n            // this rank's share of a block
	local := 0
	for o := range outer {
		for j := range parts {
			f((o*full[l.Dim]+j*per+rank*mine)*inner, local, mine*inner)
			local += mine * inner
		}
	}
}

// Check reports an error unless a parameter of full shape full splits
// over n ranks as l says: Dim a dimension of it, full[Dim] a multiple of
// Parts×n.
func (l TPLayout) Check(full []int, n int) error {
	if !l.Split || n <= 1 {
		return nil
	}
	if l.Dim < 0 || l.Dim >= len(full) || l.Parts < 0 {
		return fmt.Errorf("tensor-parallel layout dim %d, parts %d: shape %v has no such dimension", l.Dim, l.Parts, full)
	}
	if p := max(l.Parts, 1); full[l.Dim]%(p*n) != 0 {
		return fmt.Errorf("tensor-parallel layout: dimension %d of shape %v (%d) does not split into %d part(s) over %d ranks", l.Dim, full, full[l.Dim], p, n)
	}
	return nil
}

// Param is one named parameter of a Module.
//
// Before Initialize, Data holds the initial value (float32, float16 or
// bfloat16 host memory; rank 0's values are broadcast to every rank).
// Initialize copies it into engine memory and points Data there. The
// initial tensor stays the caller's: it may be freed as soon as Initialize
// returns (keep a reference, since Data no longer leads to it), and must
// not be freed before. Set Donate to hand it to the engine instead.
//
// From Initialize on, Data and Grad point into engine memory and change as
// the engine sees fit: Data is the working-precision weight the module
// computes with, valid during the module's Forward and Backward (for ZeRO
// stage 3 only between the engine's gather and release, nil otherwise);
// Grad is where Backward must ADD (+=) the gradient of the loss with
// respect to Data, in the same dtype, valid during Backward. Modules must
// not keep either across calls, nor free them.
//
// Frozen marks a parameter the engine does not train (PyTorch's
// requires_grad=False, as DeepSpeed handles it): the engine never changes
// its value after Initialize (rank 0's initial value, broadcast to every
// rank as for other parameters); it keeps it in the working dtype only (no
// fp32 master, no optimizer state, no gradient buffer), replicated on
// every data-parallel rank at every ZeRO stage, outside the ZeRO
// partition (a tensor-parallel shard, Parallel.Split, stays this TP
// rank's shard; with pipeline stages each stage keeps its own). During
// Backward its Grad is nil and the module must not
// write it: a module whose parameters may be frozen skips the gradient of
// a parameter whose Grad is nil (the nn layers do, saving the GEMM). A
// module that reads another module's parameter (see Resident) asks Frozen
// instead: that Grad is bound only while its owner runs Backward. A
// frozen parameter takes no part in gradient reduction, the gradient norm
// and clipping, the overflow check, weight decay or the optimizer step.
// Set it before Initialize; changing it afterwards has no effect.
//
// Name is the parameter's full name in the model, the name PyTorch's
// model.named_parameters() and a Hugging Face state dict give it
// ("transformer.h.0.attn.c_attn.weight", "fc1.weight"): unique within the
// model, used as is by the engine in Parameters(), checkpoints and errors,
// and never prefixed with the module's name. Keep names stable across
// versions of a model; when one must change, list the old one in Aliases
// so that checkpoints written under it still load.
type Param struct {
	Name  string
	Shape []int
	Data  *tensor.Tensor
	Grad  *tensor.Tensor
	// Aliases are former names of the parameter, accepted when loading a
	// checkpoint that has no entry under Name.
	Aliases []string
	// Parallel marks the tensor-parallel layout (Replicated by default).
	Parallel TPLayout
	// Frozen: not trained (see above).
	Frozen bool
	// Donate hands the initial Data to the engine: once a successful
	// Initialize has copied it, it frees Data's storage and clears Donate
	// (a failed Initialize leaves both as they were). Freeing a view
	// frees its whole storage, so only a tensor that covers its storage
	// from the first byte to the last can be donated (as tensor.Empty,
	// tensor.FromFloat32 and tensor.WrapFloat32 return): Initialize
	// rejects a view into a larger buffer, and two parameters donating
	// one storage. A view of a shared buffer such as nn.ParamBuffers
	// stays with its owner.
	Donate bool
}

// Resident is implemented by a Module whose parameters other modules read
// outside its own Forward and Backward, such as a token embedding tied to
// the output head. Under ZeRO stage 3 the engine keeps such a module's
// parameters gathered for the whole run (as stage3_param_persistence_threshold
// does for small modules) instead of releasing them after use; its gradients
// are reduced like any other module's, after its own Backward. At stages 0-2
// every parameter is resident anyway.
type Resident interface {
	Resident() bool
}

// Module is one unit the engine schedules: ZeRO-3 gathers its parameters
// as one flat buffer before Forward and before Backward, and its gradients
// are ready for reduction when Backward returns.
type Module interface {
	// Name identifies the module; names are unique within a model and
	// appear in errors.
	Name() string
	// Params lists the module's parameters; the list and the Param
	// pointers must stay the same for the life of the engine.
	Params() []*Param
	// Forward computes the output from in. It may keep what Backward needs
	// (activations), but not Param.Data.
	//
	// Buffers Forward allocates from tensor.ArenaFromContext(ctx) live
	// until the engine's Backward for this micro-step returns (for a
	// Forward never followed by Backward, until the next Forward or
	// Close; for an evaluation's, EvalBatch, until its loss is computed),
	// and are then freed by the engine: return them, save them
	// for Backward, but do not free them or use them later. The arena is
	// closed between micro-steps: allocating from it then (a goroutine
	// that outlived the call, say) fails with tensor.ErrArenaClosed.
	Forward(ctx context.Context, in Activation) (Activation, error)
	// Backward takes the gradient of the loss with respect to the output
	// of the last Forward and returns the gradient with respect to its
	// input, adding parameter gradients into Param.Grad. A module whose
	// parameters may be frozen (Param.Frozen) skips the gradient of a
	// parameter whose Grad is nil. Its arena
	// buffers (the returned gradient included) are freed when the
	// engine's Backward returns, with the Forward's: by then the
	// previous module's Backward has consumed them.
	Backward(ctx context.Context, gradOut Activation) (gradIn Activation, err error)
}

// Model is what the engine trains: modules run in order, then a loss.
type Model interface {
	// Modules returns the modules in execution order. Initialize takes the
	// set of modules from the first call; the engine calls it again at
	// every forward, so a model may vary the sequence (layer drop), as long
	// as every data-parallel rank runs the same sequence: with ZeRO stages
	// 2-3 the engine checks that and reports the first differing module
	// instead of hanging.
	Modules() []Module
	// Loss returns the loss of the last module's output out against
	// target, and the gradient of gradScale×loss with respect to out (the
	// engine passes the loss scale divided by the accumulation steps).
	// Allocate gradOut from tensor.ArenaFromContext(ctx): it lives, like
	// the modules' activations, until the micro-step's Backward returns.
	Loss(ctx context.Context, out, target Activation, gradScale float64) (loss float64, gradOut Activation, err error)
}

// MicroBatch is one micro-batch of one rank: Input goes to the first
// module, Target to Loss. A model whose input carries its own targets (a
// TokenBatch) leaves Target nil. Both stay the caller's: valid until the
// micro-step's Backward returns, never freed by the engine.
type MicroBatch struct {
	Input  Activation
	Target Activation
}

// Sized is implemented by an Input that knows its batch size (samples,
// rows or sequences). The engine checks it against
// train_micro_batch_size_per_gpu, so a data pipeline that hands the wrong
// number of samples fails at once instead of training on a different batch
// than the config says. An Input that does not implement Sized, such as a
// plain *tensor.Tensor, is not checked: nothing says which of its
// dimensions holds the samples ([B, F] rows, or B·T tokens of a flat
// tensor), so wrap it in a type with a BatchSize method to have it checked.
type Sized interface {
	BatchSize() int
}

// TokenBatch is a language model's micro-batch: B windows of T token ids,
// row-major [B, T], and their next-token targets in the same layout.
type TokenBatch struct {
	Inputs, Targets []int32
	B, T            int
}

// BatchSize is B, the number of sequences.
func (b TokenBatch) BatchSize() int { return b.B }

// SequenceShard is sequence-parallel rank's share of b on n ranks: tokens
// [rank·T/n, (rank+1)·T/n) of every sequence, inputs and targets alike
// (DeepSpeed-Ulysses' data path: every rank of an SP group is handed the
// same micro-batch and keeps its shard). T must divide by n.
func (b TokenBatch) SequenceShard(rank, n int) (TokenBatch, error) {
	if n < 1 || rank < 0 || rank >= n {
		return TokenBatch{}, fmt.Errorf("model.TokenBatch.SequenceShard: rank %d of %d: want 0 <= rank < n", rank, n)
	}
	if b.T%n != 0 {
		return TokenBatch{}, fmt.Errorf("model.TokenBatch.SequenceShard: sequence length %d is not divisible by sequence_parallel_size %d", b.T, n)
	}
	if len(b.Inputs) != b.B*b.T || len(b.Targets) != b.B*b.T {
		return TokenBatch{}, fmt.Errorf("model.TokenBatch.SequenceShard: %d inputs and %d targets for %d x %d tokens", len(b.Inputs), len(b.Targets), b.B, b.T)
	}
	tl := b.T / n
	out := TokenBatch{Inputs: make([]int32, 0, b.B*tl), Targets: make([]int32, 0, b.B*tl), B: b.B, T: tl}
	for i := 0; i < b.B; i++ {
		lo := i*b.T + rank*tl
		out.Inputs = append(out.Inputs, b.Inputs[lo:lo+tl]...)
		out.Targets = append(out.Targets, b.Targets[lo:lo+tl]...)
	}
	return out, nil
}

// MicroBatch wraps b for an engine: the targets travel with the input.
func (b TokenBatch) MicroBatch() MicroBatch { return MicroBatch{Input: b} }
