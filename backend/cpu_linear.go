package backend

import (
	"unsafe"

	"github.com/deepgo-ml/deepgo/tensor"
)

var _ Linear = (*CPU)(nil)

// LinearForward computes out = in @ w^T + b on the C core (see Linear).
func (b *CPU) LinearForward(out, in, w, bias *tensor.Tensor) error {
	d, err := CheckLinear("LinearForward", tensor.CPU, out, in, w, bias, nil, nil, nil, nil)
	if err != nil {
		return err
	}
	return b.ctx.MatmulForwardMixed(out.Ptr(), in.Ptr(), dt(d.W), w.Ptr(), ptrOf(bias), d.N, d.C, d.OC)
}

// LinearBackward accumulates din, dw and db on the C core (see Linear).
func (b *CPU) LinearBackward(din, dw, db, dout, in, w *tensor.Tensor) error {
	d, err := CheckLinear("LinearBackward", tensor.CPU, nil, in, w, nil, din, dw, db, dout)
	if err != nil {
		return err
	}
	return b.ctx.MatmulBackwardMixed(ptrOf(din), dt(d.Grad), ptrOf(dw), ptrOf(db), dout.Ptr(), in.Ptr(), dt(d.W), w.Ptr(), d.N, d.C, d.OC)
}

// ptrOf is t's address, nil for a nil tensor (an optional C argument).
func ptrOf(t *tensor.Tensor) unsafe.Pointer {
	if t == nil {
		return nil
	}
	return t.Ptr()
}
