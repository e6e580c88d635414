package backend

import (
	"unsafe"

	"github.com/deepgo-ml/deepgo/csrc"

	"github.com/deepgo-ml/deepgo/tensor"
)

var _ Linear = (*CPU)(nil)

// LinearForward computes out = in @ w^T + b on the C core (see Linear).
func (b *CPU) LinearForward(out, in, w, bias *tensor.Tensor) error {
	const op = "LinearForward"
	d, err := CheckLinear(op, b.dev, out, in, w, bias, nil, nil, nil, nil)
	if err != nil {
		return err
	}
	po, pi, pw, pb := out.Ptr(), in.Ptr(), w.Ptr(), ptrOf(bias)
	return b.Exec(op, false, func() error { return b.ctx.MatmulForwardMixed(po, pi, dt(d.W), pw, pb, d.N, d.C, d.OC) })
}

// LinearBackward accumulates din, dw and db on the C core (see Linear).
func (b *CPU) LinearBackward(din, dw, db, dout, in, w *tensor.Tensor) error {
	return b.linearBackward("LinearBackward", b.ctx.MatmulBackwardMixed, din, dw, db, dout, in, w)
}

var _ GradWriter = (*CPU)(nil)

// LinearBackwardWrite is LinearBackward with din written (see GradWriter).
func (b *CPU) LinearBackwardWrite(din, dw, db, dout, in, w *tensor.Tensor) error {
	return b.linearBackward("LinearBackwardWrite", b.ctx.MatmulBackwardWrite, din, dw, db, dout, in, w)
}

// linearBackward is both, run being the C call.
func (b *CPU) linearBackward(op string, run func(dinp unsafe.Pointer, gt csrc.DType, dw, dbias, dout, inp unsafe.Pointer, wt csrc.DType, w unsafe.Pointer, n, c, oc int) error,
	din, dw, db, dout, in, w *tensor.Tensor) error {
	d, err := CheckLinear(op, b.dev, nil, in, w, nil, din, dw, db, dout)
	if err != nil {
		return err
	}
	pdi, pdw, pdb, pdo, pi, pw := ptrOf(din), ptrOf(dw), ptrOf(db), dout.Ptr(), in.Ptr(), w.Ptr()
	return b.Exec(op, false, func() error { return run(pdi, dt(d.Grad), pdw, pdb, pdo, pi, dt(d.W), pw, d.N, d.C, d.OC) })
}

// ptrOf is t's address, nil for a nil tensor (an optional C argument).
func ptrOf(t *tensor.Tensor) unsafe.Pointer {
	if t == nil {
		return nil
	}
	return t.Ptr()
}
