package backend

import (
	"errors"
	"unsafe"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
)

var _ NN = (*CPU)(nil)

// Each method checks its arguments against b's device, takes the tensors'
// addresses while they are known live, and hands only the C call to Exec.

// LayerNormForward runs the C core's LayerNorm (see NN).
func (b *CPU) LayerNormForward(out, mean, rstd, in, w, bias *tensor.Tensor, eps float32, n, c int) error {
	wt, err := CheckLayerNormForward(b.dev, out, mean, rstd, in, w, bias, eps, n, c)
	if err != nil {
		return err
	}
	po, pm, pr, pi, pw, pb := out.Ptr(), mean.Ptr(), rstd.Ptr(), in.Ptr(), w.Ptr(), bias.Ptr()
	return b.Exec("LayerNormForward", false, func() error {
		return b.ctx.LayerNormForwardMixed(po, pm, pr, pi, dt(wt), pw, pb, eps, n, c)
	})
}

// LayerNormBackward runs the C core's LayerNorm backward (see NN).
func (b *CPU) LayerNormBackward(din, dw, db, dout, in, w, mean, rstd *tensor.Tensor, n, c int) error {
	d, err := CheckLayerNormBackward(b.dev, din, dw, db, dout, in, w, mean, rstd, n, c)
	if err != nil {
		return err
	}
	pdi, pdw, pdb, pdo := ptrOf(din), ptrOf(dw), ptrOf(db), dout.Ptr()
	pi, pw, pm, pr := in.Ptr(), w.Ptr(), mean.Ptr(), rstd.Ptr()
	return b.Exec("LayerNormBackward", false, func() error {
		return b.ctx.LayerNormBackwardMixed(pdi, dt(d.Grad), pdw, pdb, pdo, pi, dt(d.W), pw, pm, pr, n, c)
	})
}

// GELUForward runs the C core's GELU (see NN).
func (b *CPU) GELUForward(out, in *tensor.Tensor, n int) error {
	if err := CheckGELUForward(b.dev, out, in, n); err != nil {
		return err
	}
	po, pi := out.Ptr(), in.Ptr()
	return b.Exec("GELUForward", false, func() error { return b.ctx.GELUForward(po, pi, n) })
}

// GELUBackward runs the C core's GELU backward (see NN).
func (b *CPU) GELUBackward(din, in, dout *tensor.Tensor, n int) error {
	if err := CheckGELUBackward(b.dev, din, in, dout, n); err != nil {
		return err
	}
	pdi, pi, pdo := din.Ptr(), in.Ptr(), dout.Ptr()
	return b.Exec("GELUBackward", false, func() error { return b.ctx.GELUBackward(pdi, pi, pdo, n) })
}

// GELUBackwardWrite runs the C core's GELU backward writing din (see
// GradWriter).
func (b *CPU) GELUBackwardWrite(din, in, dout *tensor.Tensor, n int) error {
	if err := CheckGELUBackwardWrite(b.dev, din, in, dout, n); err != nil {
		return err
	}
	pdi, pi, pdo := din.Ptr(), in.Ptr(), dout.Ptr()
	return b.Exec("GELUBackwardWrite", false, func() error { return b.ctx.GELUBackwardWrite(pdi, pi, pdo, n) })
}

// Add runs the C core's elementwise add (see NN).
func (b *CPU) Add(out, x, y *tensor.Tensor, n int) error {
	if err := CheckAdd(b.dev, out, x, y, n); err != nil {
		return err
	}
	po, px, py := out.Ptr(), x.Ptr(), y.Ptr()
	return b.Exec("Add", false, func() error { return b.ctx.Add(po, px, py, n) })
}

// EncoderForward runs the C core's embedding lookup (see NN). On a view a
// token outside [0, v) is found when the kernel runs, after the call.
func (b *CPU) EncoderForward(out, tok, wte, wpe *tensor.Tensor, bs, t, c, v int) error {
	const op = "EncoderForward"
	wt, err := CheckEncoderForward(b.dev, out, tok, wte, wpe, bs, t, c, v)
	if err != nil {
		return err
	}
	if bs*t == 0 { // an empty token tensor may have no address to give C
		return nil
	}
	po, pt, pe, pp := out.Ptr(), tok.Ptr(), wte.Ptr(), wpe.Ptr()
	return b.Exec(op, false, func() error {
		return idErr(op, "tok", v, b.ctx.EncoderForwardMixed(po, pt, dt(wt), pe, pp, bs, t, c, v))
	})
}

// EncoderBackward runs the C core's embedding backward (see NN).
func (b *CPU) EncoderBackward(dwte, dwpe, dout, tok *tensor.Tensor, bs, t, c, v int) error {
	const op = "EncoderBackward"
	gt, err := CheckEncoderBackward(b.dev, dwte, dwpe, dout, tok, bs, t, c, v)
	if err != nil {
		return err
	}
	if bs*t == 0 {
		return nil
	}
	pe, pp, pdo, pt := ptrOf(dwte), ptrOf(dwpe), dout.Ptr(), tok.Ptr()
	return b.Exec(op, false, func() error {
		return idErr(op, "tok", v, b.ctx.EncoderBackwardMixed(dt(gt), pe, pp, pdo, pt, bs, t, c, v))
	})
}

// AttentionForward runs the C core's causal attention (see NN).
func (b *CPU) AttentionForward(out, att, qkv *tensor.Tensor, bs, t, nh, hs, window int) error {
	if err := CheckAttentionForward(b.dev, out, att, qkv, bs, t, nh, hs, window); err != nil {
		return err
	}
	po, pa, pq := out.Ptr(), att.Ptr(), qkv.Ptr()
	return b.Exec("AttentionForward", false, func() error {
		return b.ctx.AttentionForward(po, pa, pq, bs, t, nh, hs, window)
	})
}

// AttentionBackward runs the C core's attention backward (see NN).
func (b *CPU) AttentionBackward(dqkv, dout, qkv, att *tensor.Tensor, bs, t, nh, hs, window int) error {
	return b.attentionBackward("AttentionBackward", b.ctx.AttentionBackward, dqkv, dout, qkv, att, bs, t, nh, hs, window)
}

// AttentionBackwardWrite runs the C core's attention backward writing dqkv
// (see GradWriter).
func (b *CPU) AttentionBackwardWrite(dqkv, dout, qkv, att *tensor.Tensor, bs, t, nh, hs, window int) error {
	return b.attentionBackward("AttentionBackwardWrite", b.ctx.AttentionBackwardWrite, dqkv, dout, qkv, att, bs, t, nh, hs, window)
}

// attentionBackward is both, run being the C call.
func (b *CPU) attentionBackward(op string, run func(dqkv, dout, qkv, att unsafe.Pointer, b, t, nh, hs, window int) error,
	dqkv, dout, qkv, att *tensor.Tensor, bs, t, nh, hs, window int) error {
	if err := checkAttentionBackward(op, b.dev, dqkv, dout, qkv, att, bs, t, nh, hs, window); err != nil {
		return err
	}
	pd, pdo, pq, pa := dqkv.Ptr(), dout.Ptr(), qkv.Ptr(), att.Ptr()
	return b.Exec(op, false, func() error { return run(pd, pdo, pq, pa, bs, t, nh, hs, window) })
}

// SoftmaxXentForward runs the C core's fused softmax and cross-entropy
// (see NN). On a view a target outside [0, v) is found when the kernel
// runs, after the call.
func (b *CPU) SoftmaxXentForward(probs, losses, logits, targets *tensor.Tensor, n, v int) error {
	const op = "SoftmaxXentForward"
	if err := CheckSoftmaxXentForward(b.dev, probs, losses, logits, targets, n, v); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	pp, pl, pg, pt := probs.Ptr(), losses.Ptr(), logits.Ptr(), targets.Ptr()
	return b.Exec(op, false, func() error {
		return idErr(op, "targets", v, b.ctx.SoftmaxXentForward(pp, pl, pg, pt, n, v))
	})
}

// SoftmaxXentBackward runs the C core's cross-entropy backward (see NN).
func (b *CPU) SoftmaxXentBackward(dlogits, probs, targets, dlosses *tensor.Tensor, n, v int) error {
	const op = "SoftmaxXentBackward"
	if err := CheckSoftmaxXentBackward(b.dev, dlogits, probs, targets, dlosses, n, v); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	pd, pp, pt, pl := dlogits.Ptr(), probs.Ptr(), targets.Ptr(), dlosses.Ptr()
	return b.Exec(op, false, func() error {
		return idErr(op, "targets", v, b.ctx.SoftmaxXentBackward(pd, pp, pt, pl, n, v))
	})
}

// TransposeBlocks runs the C core's block transpose (see NN).
func (b *CPU) TransposeBlocks(dst, src *tensor.Tensor, a, bs, w int) error {
	if err := CheckTransposeBlocks(b.dev, dst, src, a, bs, w); err != nil || a*bs*w == 0 {
		return err
	}
	pd, ps := dst.Ptr(), src.Ptr()
	return b.Exec("TransposeBlocks", false, func() error { return b.ctx.TransposeBlocks(pd, ps, a, bs, w) })
}

// idErr turns the C core's "invalid argument" from a kernel whose other
// arguments were checked already into the error every backend gives for
// an id outside [0, v).
func idErr(op, name string, v int, err error) error {
	if errors.Is(err, csrc.Invalid) {
		return IDOutOfRange(op, name, v)
	}
	return err
}
