package optim

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/tensor"
)

// StepArgs is one fused step as a Kernels implementation receives it: the
// group's lists already checked by checkGroup, the state lists from the
// StateStore, and the hyperparameters with the scheduled LR in place.
type StepArgs struct {
	Kind      Kind
	Step      int64 // 1-based index of this update
	Hyper     Hyper
	GradScale float64
	Group     ParamGroup
	ExpAvg    []*tensor.Tensor // float32; nil for SGD without momentum
	ExpAvgSq  []*tensor.Tensor // float32; Adam and Lamb only
	Trust     []float64        // Lamb: receives each tensor's trust ratio
	// BF16Master: Adam on bfloat16 params and grads with DeepSpeedCPUAdam's
	// arithmetic (WithBF16Master); ExpAvg and ExpAvgSq are float32 or
	// bfloat16, one dtype for both.
	BF16Master bool
}

// Kernels runs fused optimizer steps on the device where the tensors live.
// The CPU implementation (NewCPUKernels) calls the C core; cuda.OptimKernels
// (package cuda, build tag cuda) runs the same element math
// (dg_optim_math.h) on a stream, with the same result bits.
type Kernels interface {
	// Step applies one update of a.Kind to every tensor of the lists.
	Step(a *StepArgs) error
	// UnscaleCheck multiplies each xs[i] in place by 1/scale and reports
	// whether any result is Inf or NaN, in one read of the data.
	UnscaleCheck(xs []*tensor.Tensor, scale float64) (bool, error)
}

// checkGroup validates the lists of g, naming the offending argument.
func checkGroup(op string, g *ParamGroup) error {
	n := len(g.Params)
	if len(g.Grads) != n {
		return fmt.Errorf("%s: grads has %d entries, params has %d", op, len(g.Grads), n)
	}
	if g.Copies != nil && len(g.Copies) != n {
		return fmt.Errorf("%s: copies has %d entries, params has %d", op, len(g.Copies), n)
	}
	for i := range n {
		for _, a := range []struct {
			name string
			t    *tensor.Tensor
		}{{"params", g.Params[i]}, {"grads", g.Grads[i]}} {
			if a.t == nil {
				return fmt.Errorf("%s: %s[%d] is nil", op, a.name, i)
			}
		}
		if g.Grads[i].Numel() != g.Params[i].Numel() {
			return fmt.Errorf("%s: grads[%d] %v has %d elements, params[%d] %v has %d", op, i, g.Grads[i],
				g.Grads[i].Numel(), i, g.Params[i], g.Params[i].Numel())
		}
		if g.Copies != nil {
			if g.Copies[i] == nil {
				return fmt.Errorf("%s: copies[%d] is nil", op, i)
			}
			if g.Copies[i].Numel() != g.Params[i].Numel() {
				return fmt.Errorf("%s: copies[%d] %v has %d elements, params[%d] %v has %d", op, i, g.Copies[i],
					g.Copies[i].Numel(), i, g.Params[i], g.Params[i].Numel())
			}
		}
	}
	if err := sameDType(op, "params", g.Params, tensor.Float32, tensor.Float16, tensor.BFloat16); err != nil {
		return err
	}
	if err := sameDType(op, "grads", g.Grads, tensor.Float32, tensor.Float16, tensor.BFloat16); err != nil {
		return err
	}
	if g.Copies != nil && n > 0 {
		if g.Params[0].DType() != tensor.Float32 {
			return fmt.Errorf("%s: copies given with %v params: copies need float32 master params", op, g.Params[0].DType())
		}
		if err := sameDType(op, "copies", g.Copies, tensor.Float16, tensor.BFloat16); err != nil {
			return err
		}
	}
	return nil
}

// checkBF16Group is checkGroup's extra rule for WithBF16Master groups:
// bfloat16 params and grads, no copies (the masters are the bf16 weights).
func checkBF16Group(op string, g *ParamGroup) error {
	if len(g.Params) == 0 {
		return nil
	}
	if g.Params[0].DType() != tensor.BFloat16 || g.Grads[0].DType() != tensor.BFloat16 {
		return fmt.Errorf("%s: bf16 master weights: params %v and grads %v, want bfloat16 both", op, g.Params[0].DType(), g.Grads[0].DType())
	}
	if g.Copies != nil {
		return fmt.Errorf("%s: bf16 master weights: copies given: the masters are the bf16 weights", op)
	}
	return nil
}

// sameDType checks that every tensor of ts has the dtype of ts[0], one of allowed.
func sameDType(op, name string, ts []*tensor.Tensor, allowed ...tensor.DType) error {
	if len(ts) == 0 {
		return nil
	}
	want := ts[0].DType()
	ok := false
	for _, a := range allowed {
		ok = ok || a == want
	}
	if !ok {
		return fmt.Errorf("%s: %s[0] dtype %v: allowed %v", op, name, want, allowed)
	}
	for i, t := range ts {
		if t.DType() != want {
			return fmt.Errorf("%s: %s[%d] dtype %v, want %v like %s[0]", op, name, i, t.DType(), want, name)
		}
	}
	return nil
}
