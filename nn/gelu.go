package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// GELU is the Gaussian error linear unit in GPT-2's tanh approximation,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). It has no parameters.
type GELU struct{}

// Params is empty.
func (GELU) Params() []*model.Param { return nil }

// Forward computes out[n] = GELU(in[n]).
func (GELU) Forward(ctx *csrc.Ctx, out, in *tensor.Tensor, n int) error {
	if err := needF32("GELU.Forward", "out", out, n, "in", in, n); err != nil {
		return err
	}
	if err := ctx.GELUForward(out.Ptr(), in.Ptr(), n); err != nil {
		return fmt.Errorf("nn.GELU.Forward: %w", err)
	}
	return nil
}

// Backward accumulates din[n] += GELU'(in[n]) dout[n].
func (GELU) Backward(ctx *csrc.Ctx, din, in, dout *tensor.Tensor, n int) error {
	if err := needF32("GELU.Backward", "din", din, n, "in", in, n, "dout", dout, n); err != nil {
		return err
	}
	if err := ctx.GELUBackward(din.Ptr(), in.Ptr(), dout.Ptr(), n); err != nil {
		return fmt.Errorf("nn.GELU.Backward: %w", err)
	}
	return nil
}
