package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
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
	// biasElsewhere leaves the bias out of Forward (Backward still adds
	// its gradient): a row-parallel shard whose partial outputs are summed
	// with another rank's, which adds the bias once.
	biasElsewhere bool
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
		return gradOf(l.B)
	}
	return l.B.Data
}

// check validates the bound parameters on dev (see checkParams).
func (l *Linear) check(op string, dev tensor.Device, grad bool) error {
	if l.B == nil {
		return checkParams(op, dev, grad, []*model.Param{l.W}, []int{l.Out, l.In})
	}
	return checkParams(op, dev, grad, []*model.Param{l.W, l.B}, []int{l.Out, l.In}, []int{l.Out})
}

// Forward computes out[n, Out] = in[n, In] @ W^T + b on be.
func (l *Linear) Forward(be backend.NN, out, in *tensor.Tensor, n int) error {
	const op = "Linear.Forward"
	dev := be.Device()
	if err := l.check(op, dev, false); err != nil {
		return err
	}
	if err := needF32(op, dev, "out", out, n*l.Out, "in", in, n*l.In); err != nil {
		return err
	}
	w, x, y := l.W.Data, in, out
	if err := asMatrices(mat{&w, l.Out, l.In}, mat{&x, n, l.In}, mat{&y, n, l.Out}); err != nil {
		return fmt.Errorf("nn.%s(%s): %w", op, l.W.Name, err)
	}
	b := l.bias(false)
	if l.biasElsewhere {
		b = nil
	}
	if err := be.LinearForward(y, x, w, b); err != nil {
		return fmt.Errorf("nn.%s(%s): %w", op, l.W.Name, err)
	}
	return nil
}

// Backward accumulates din[n, In] += dout @ W (skipped when din is nil),
// W.Grad += dout^T @ in and B.Grad += the column sums of dout[n, Out]; a
// half-precision gradient gets one rounding per element per call.
func (l *Linear) Backward(be backend.NN, din, dout, in *tensor.Tensor, n int) error {
	return l.backward(be, din, dout, in, n, false)
}

// backwardWrite is Backward into scratch din whatever it held: din = dout
// @ W, the bits of clearing it and accumulating; one call on a
// backend.GradWriter, Zero and Backward on another. Parameter gradients
// accumulate as in Backward.
func (l *Linear) backwardWrite(be backend.NN, din, dout, in *tensor.Tensor, n int) error {
	return l.backward(be, din, dout, in, n, true)
}

func (l *Linear) backward(be backend.NN, din, dout, in *tensor.Tensor, n int, write bool) error {
	const op = "Linear.Backward"
	dev := be.Device()
	if err := l.check(op, dev, true); err != nil {
		return err
	}
	if err := needF32(op, dev, "dout", dout, n*l.Out, "in", in, n*l.In); err != nil {
		return err
	}
	if din != nil {
		if err := needF32(op, dev, "din", din, n*l.In); err != nil {
			return err
		}
	}
	w, dw, x, dy, dx := l.W.Data, gradOf(l.W), in, dout, din
	if err := asMatrices(mat{&w, l.Out, l.In}, mat{&dw, l.Out, l.In}, mat{&x, n, l.In}, mat{&dy, n, l.Out}, mat{&dx, n, l.In}); err != nil {
		return fmt.Errorf("nn.%s(%s): %w", op, l.W.Name, err)
	}
	if err := linearBackward(be, write, dx, dw, l.bias(true), dy, x, w); err != nil {
		return fmt.Errorf("nn.%s(%s): %w", op, l.W.Name, err)
	}
	return nil
}

// linearBackward is be.LinearBackward, or with write din written whatever
// it held (intoScratch).
func linearBackward(be backend.NN, write bool, din, dw, db, dout, in, w *tensor.Tensor) error {
	add := func() error { return be.LinearBackward(din, dw, db, dout, in, w) }
	if !write || din == nil {
		return add()
	}
	return intoScratch(be, din, func(gw backend.GradWriter) error { return gw.LinearBackwardWrite(din, dw, db, dout, in, w) }, add)
}

// intoScratch fills scratch gradient dst whatever it held: with the
// backend.GradWriter kernel write where be has one, else by clearing dst
// and running the accumulating kernel add (the same bits).
func intoScratch(be backend.NN, dst *tensor.Tensor, write func(backend.GradWriter) error, add func() error) error {
	if gw, ok := be.(backend.GradWriter); ok {
		return write(gw)
	}
	if err := zero(be, dst); err != nil {
		return err
	}
	return add()
}

// mat is a tensor to view as rows x cols.
type mat struct {
	t          **tensor.Tensor
	rows, cols int
}

// asMatrices replaces each non-nil *m.t with its view as [rows, cols], the
// exact matrices backend.Linear computes on: the layers take buffers of at
// least n rows, and a parameter may be bound with any shape of its element
// count. A tensor of that shape already is kept, so the usual call makes
// no view.
func asMatrices(ms ...mat) error {
	for _, m := range ms {
		t := *m.t
		if t == nil {
			continue
		}
		if sh := t.Shape(); len(sh) == 2 && sh[0] == m.rows && sh[1] == m.cols {
			continue
		}
		if n := m.rows * m.cols; t.Numel() > n {
			v, err := t.Slice(0, n)
			if err != nil {
				return err
			}
			t = v
		}
		v, err := t.Reshape(m.rows, m.cols)
		if err != nil {
			return err
		}
		*m.t = v
	}
	return nil
}
