package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// GELU is the Gaussian error linear unit in GPT-2's tanh approximation,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). It has no parameters.
type GELU struct{}

// Params is empty.
func (GELU) Params() []*model.Param { return nil }

// Forward computes out[n] = GELU(in[n]) on be.
func (GELU) Forward(be backend.NN, out, in *tensor.Tensor, n int) error {
	if err := needF32("GELU.Forward", be.Device(), "out", out, n, "in", in, n); err != nil {
		return err
	}
	if err := be.GELUForward(out, in, n); err != nil {
		return fmt.Errorf("nn.GELU.Forward: %w", err)
	}
	return nil
}

// Backward accumulates din[n] += GELU'(in[n]) dout[n].
func (g GELU) Backward(be backend.NN, din, in, dout *tensor.Tensor, n int) error {
	return g.backward(be, din, in, dout, n, false)
}

// backwardWrite is Backward into scratch din whatever it held: din =
// GELU'(in) dout, the bits of clearing it and accumulating; one pass on a
// backend.GradWriter, Zero and Backward on another.
func (g GELU) backwardWrite(be backend.NN, din, in, dout *tensor.Tensor, n int) error {
	return g.backward(be, din, in, dout, n, true)
}

func (GELU) backward(be backend.NN, din, in, dout *tensor.Tensor, n int, write bool) error {
	if err := needF32("GELU.Backward", be.Device(), "din", din, n, "in", in, n, "dout", dout, n); err != nil {
		return err
	}
	add := func() error { return be.GELUBackward(din, in, dout, n) }
	var err error
	if write {
		err = intoScratch(be, din, func(gw backend.GradWriter) error { return gw.GELUBackwardWrite(din, in, dout, n) }, add)
	} else {
		err = add()
	}
	if err != nil {
		return fmt.Errorf("nn.GELU.Backward: %w", err)
	}
	return nil
}
