package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// LayerNorm normalises each row of Width channels to zero mean and unit
// (biased) variance, then scales by W and shifts by B. W and B may be
// float32, float16 or bfloat16 (see Linear).
type LayerNorm struct {
	Width int
	Eps   float32
	W, B  *model.Param // [Width] each
}

// NewLayerNorm declares name.weight and name.bias with eps 1e-5 (GPT-2's).
func NewLayerNorm(name string, width int) *LayerNorm {
	return &LayerNorm{Width: width, Eps: 1e-5, W: newParam(name+".weight", width), B: newParam(name+".bias", width)}
}

// Params lists W then B.
func (l *LayerNorm) Params() []*model.Param { return []*model.Param{l.W, l.B} }

// check validates the bound parameters on dev (see checkParams).
func (l *LayerNorm) check(op string, dev tensor.Device, grad bool) error {
	return checkParams(op, dev, grad, l.Params(), []int{l.Width}, []int{l.Width})
}

// Forward normalises in[n, Width] into out on be, saving the per-row
// mean[n] and reciprocal standard deviation rstd[n] for Backward.
func (l *LayerNorm) Forward(be backend.NN, out, mean, rstd, in *tensor.Tensor, n int) error {
	const op = "LayerNorm.Forward"
	dev := be.Device()
	if err := l.check(op, dev, false); err != nil {
		return err
	}
	if err := needF32(op, dev, "out", out, n*l.Width, "mean", mean, n, "rstd", rstd, n, "in", in, n*l.Width); err != nil {
		return err
	}
	if err := be.LayerNormForward(out, mean, rstd, in, l.W.Data, l.B.Data, l.Eps, n, l.Width); err != nil {
		return fmt.Errorf("nn.%s(%s): %w", op, l.W.Name, err)
	}
	return nil
}

// Backward accumulates din[n, Width] (skipped when nil), W.Grad and B.Grad
// from dout and the saved statistics.
func (l *LayerNorm) Backward(be backend.NN, din, dout, in, mean, rstd *tensor.Tensor, n int) error {
	const op = "LayerNorm.Backward"
	dev := be.Device()
	if err := l.check(op, dev, true); err != nil {
		return err
	}
	if err := needF32(op, dev, "dout", dout, n*l.Width, "mean", mean, n, "rstd", rstd, n, "in", in, n*l.Width); err != nil {
		return err
	}
	if din != nil {
		if err := needF32(op, dev, "din", din, n*l.Width); err != nil {
			return err
		}
	}
	if err := be.LayerNormBackward(din, gradOf(l.W), gradOf(l.B), dout, in, l.W.Data, mean, rstd, n, l.Width); err != nil {
		return fmt.Errorf("nn.%s(%s): %w", op, l.W.Name, err)
	}
	return nil
}
