package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Linear is y = x W^T + b with W [Out, In] and b [Out] (torch's layout).
// W and B may be float32, float16 or bfloat16 (one dtype for both; their
// gradients one dtype, possibly another); activations are float32 and so is
// the arithmetic: a half weight is widened inside the kernel, tile by tile.
// A tensor-parallel column shard is a Linear with Out/world outputs, a row
// shard one with In/world inputs; the surrounding collective is the only
// addition.
type Linear struct {
	In, Out int
	W       *model.Param // [Out, In]
	B       *model.Param // [Out], nil without bias
}

// NewLinear declares a Linear named name (parameters name.weight, name.bias).
func NewLinear(name string, in, out int, bias bool) *Linear {
	l := &Linear{In: in, Out: out, W: newParam(name+".weight", out, in)}
	if bias {
		l.B = newParam(name+".bias", out)
	}
	return l
}

// Params lists W then B.
func (l *Linear) Params() []*model.Param {
	if l.B == nil {
		return []*model.Param{l.W}
	}
	return []*model.Param{l.W, l.B}
}

func (l *Linear) bias(grad bool) *tensor.Tensor {
	if l.B == nil {
		return nil
	}
	if grad {
		return l.B.Grad
	}
	return l.B.Data
}

// check validates the bound parameters (see checkParams).
func (l *Linear) check(op string, grad bool) (paramTypes, error) {
	if l.B == nil {
		return checkParams(op, grad, []*model.Param{l.W}, []int{l.Out, l.In})
	}
	return checkParams(op, grad, []*model.Param{l.W, l.B}, []int{l.Out, l.In}, []int{l.Out})
}

// Forward computes out[n, Out] = in[n, In] @ W^T + b.
func (l *Linear) Forward(ctx *csrc.Ctx, out, in *tensor.Tensor, n int) error {
	const op = "Linear.Forward"
	pt, err := l.check(op, false)
	if err != nil {
		return err
	}
	if err := needF32(op, "out", out, n*l.Out, "in", in, n*l.In); err != nil {
		return err
	}
	if err := ctx.MatmulForwardMixed(out.Ptr(), in.Ptr(), c(pt.data), l.W.Data.Ptr(), ptr(l.bias(false)), n, l.In, l.Out); err != nil {
		return fmt.Errorf("nn.%s(%s): %w", op, l.W.Name, err)
	}
	return nil
}

// Backward accumulates din[n, In] += dout @ W (skipped when din is nil),
// W.Grad += dout^T @ in and B.Grad += the column sums of dout[n, Out]; a
// half-precision gradient gets one rounding per element per call.
func (l *Linear) Backward(ctx *csrc.Ctx, din, dout, in *tensor.Tensor, n int) error {
	const op = "Linear.Backward"
	pt, err := l.check(op, true)
	if err != nil {
		return err
	}
	if err := needF32(op, "dout", dout, n*l.Out, "in", in, n*l.In); err != nil {
		return err
	}
	if din != nil {
		if err := needF32(op, "din", din, n*l.In); err != nil {
			return err
		}
	}
	if err := ctx.MatmulBackwardMixed(ptr(din), c(pt.grad), l.W.Grad.Ptr(), ptr(l.bias(true)), dout.Ptr(), in.Ptr(), c(pt.data), l.W.Data.Ptr(), n, l.In, l.Out); err != nil {
		return fmt.Errorf("nn.%s(%s): %w", op, l.W.Name, err)
	}
	return nil
}
