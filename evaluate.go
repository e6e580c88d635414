package deepgo

// Evaluation with options (Trainer.Evaluate), DeepSpeed's
// PipelineEngine.eval_batch arguments return_logits, compute_loss and
// reduce_output: what both engines share (the options, the result, the
// copy of an output to host memory).

import (
	"fmt"
	"math"
	"strings"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// EvalOptions choose what Trainer.Evaluate returns besides the mean loss.
// The zero value is EvalBatch: the mean loss only. Every rank must pass
// the same options (the ranks agree on them before any forward).
type EvalOptions struct {
	// Outputs returns each micro-batch's output of the model's last module
	// (what goes into Model.Loss: nn.GPT's logits), DeepSpeed's
	// return_logits, copied to host memory (EvalResult.Outputs).
	Outputs bool
	// NoLoss computes no loss (DeepSpeed's compute_loss=False): the
	// model's Loss is not called, EvalResult.Loss is NaN and nothing is
	// written to the monitor. It needs Outputs, and excludes
	// PerMicroBatch.
	NoLoss bool
	// PerMicroBatch returns each micro-batch's loss as well as the mean
	// (EvalResult.Losses), DeepSpeed's reduce_output=None.
	PerMicroBatch bool
}

// EvalResult is what Trainer.Evaluate returns.
type EvalResult struct {
	// Loss is EvalBatch's value: the mean loss over the micro-batches
	// and the data-parallel ranks, the same on every rank; NaN under
	// EvalOptions.NoLoss.
	Loss float64
	// Losses (EvalOptions.PerMicroBatch) holds the loss of each of this
	// rank's micro-batches, in the order given, not averaged over the
	// data-parallel ranks (each rank's are of its own data, as DeepSpeed's
	// reduce_output=None does no data-parallel all-reduce); with pipeline
	// stages the last stage's, handed to every stage of the same pipe.
	// Their mean over the micro-batches, averaged over the data-parallel
	// ranks, is Loss (to float64 rounding).
	Losses []float64
	// Outputs (EvalOptions.Outputs) holds each micro-batch's output of the
	// last module, in the order given: a contiguous host tensor of the
	// module's dtype and shape (a model.HostCopier output: its HostCopy),
	// copied before the loss is computed (a loss may overwrite its input,
	// as nn.GPT's does). The caller owns
	// them and frees them (Free). It is what the last module produced on
	// this rank: with pipeline stages only the last stage has outputs
	// (nil elsewhere, as DeepSpeed returns them on the last stage only,
	// though DeepSpeed keeps only the last micro-batch's), under tensor
	// parallelism each TP rank has its own (nn.GPT's head is
	// vocabulary-parallel: rank r holds the logits of its vocabulary
	// slice, columns [r×V/tp, (r+1)×V/tp)), and under Ulysses sequence
	// parallelism each rank holds those of its sequence shard.
	Outputs []*tensor.Tensor
}

// Free frees the Outputs (nil ones skipped) and sets them to nil; it
// returns the first error.
func (r *EvalResult) Free() error {
	var first error
	for i, t := range r.Outputs {
		if t == nil {
			continue
		}
		if err := t.Free(); err != nil && first == nil {
			first = fmt.Errorf("deepgo: EvalResult.Free: output %d: %w", i, err)
		}
		r.Outputs[i] = nil
	}
	r.Outputs = nil
	return first
}

// check refuses options that ask for nothing or for a loss they do not
// compute (who: the error's prefix).
func (o EvalOptions) check(who string) error {
	if o.NoLoss && !o.Outputs {
		return fmt.Errorf("%s: EvalOptions.NoLoss without EvalOptions.Outputs would return nothing: set Outputs, or leave NoLoss false", who)
	}
	if o.NoLoss && o.PerMicroBatch {
		return fmt.Errorf("%s: EvalOptions.NoLoss with EvalOptions.PerMicroBatch: no loss is computed to list per micro-batch; leave one of them false", who)
	}
	return nil
}

// word is the options as one number, which the ranks agree on.
func (o EvalOptions) word() int64 {
	var w int64
	for i, b := range []bool{o.Outputs, o.NoLoss, o.PerMicroBatch} {
		if b {
			w |= 1 << i
		}
	}
	return w
}

// evalRun is one evaluation's collection: the options and, per
// micro-batch, the host copy of the output and the loss.
type evalRun struct {
	opts   EvalOptions
	outs   []*tensor.Tensor
	losses []float64
}

func newEvalRun(opts EvalOptions, n int) *evalRun {
	r := &evalRun{opts: opts, losses: make([]float64, n)}
	if opts.Outputs {
		r.outs = make([]*tensor.Tensor, n)
	}
	return r
}

// record keeps micro-batch mb's output out under Outputs, a host copy
// (its own HostCopy, or be's Copy of a *tensor.Tensor), before its loss
// is computed.
func (r *evalRun) record(be backend.Backend, mb int, out model.Activation) error {
	if !r.opts.Outputs {
		return nil
	}
	if c, ok := out.(model.HostCopier); ok {
		h, err := c.HostCopy()
		if err != nil {
			return fmt.Errorf("output: %w", err)
		}
		r.outs[mb] = h
		return nil
	}
	t, ok := out.(*tensor.Tensor)
	if !ok {
		return fmt.Errorf("not supported: EvalOptions.Outputs: the last module's output is a %T, neither a *tensor.Tensor nor a model.HostCopier", out)
	}
	h, err := tensor.Empty(t.DType(), t.Shape()...)
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	if err := be.Copy(h, t); err != nil {
		h.Free()
		return fmt.Errorf("copying the output %v to the host: %w", t, err)
	}
	r.outs[mb] = h
	return nil
}

// result is the evaluation's result with loss the mean (ignored under
// NoLoss) and losses this rank's per micro-batch; the outputs pass to it.
func (r *evalRun) result(loss float64, losses []float64) EvalResult {
	res := EvalResult{Loss: loss, Outputs: r.outs}
	r.outs = nil
	if r.opts.NoLoss {
		res.Loss = math.NaN()
	}
	if r.opts.PerMicroBatch {
		res.Losses = losses
	}
	return res
}

// free frees the outputs kept so far (a failed evaluation's).
func (r *evalRun) free() {
	res := EvalResult{Outputs: r.outs}
	res.Free()
	r.outs = nil
}

// optsString names the options of word w (EvalOptions.word), "{}" for
// none.
func optsString(w int64) string {
	var s []string
	for i, name := range []string{"Outputs", "NoLoss", "PerMicroBatch"} {
		if w&(1<<i) != 0 {
			s = append(s, name)
		}
	}
	return "{" + strings.Join(s, " ") + "}"
}
