package backend

import (
	"errors"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
)

var _ NN = (*CPU)(nil)

// LayerNormForward runs the C core's LayerNorm (see NN).
func (b *CPU) LayerNormForward(out, mean, rstd, in, w, bias *tensor.Tensor, eps float32, n, c int) error {
	wt, err := CheckLayerNormForward(tensor.CPU, out, mean, rstd, in, w, bias, eps, n, c)
	if err != nil {
		return err
	}
	return b.ctx.LayerNormForwardMixed(out.Ptr(), mean.Ptr(), rstd.Ptr(), in.Ptr(), dt(wt), w.Ptr(), bias.Ptr(), eps, n, c)
}

// LayerNormBackward runs the C core's LayerNorm backward (see NN).
func (b *CPU) LayerNormBackward(din, dw, db, dout, in, w, mean, rstd *tensor.Tensor, n, c int) error {
	d, err := CheckLayerNormBackward(tensor.CPU, din, dw, db, dout, in, w, mean, rstd, n, c)
	if err != nil {
		return err
	}
	return b.ctx.LayerNormBackwardMixed(ptrOf(din), dt(d.Grad), ptrOf(dw), ptrOf(db), dout.Ptr(), in.Ptr(), dt(d.W), w.Ptr(), mean.Ptr(), rstd.Ptr(), n, c)
}

// GELUForward runs the C core's GELU (see NN).
func (b *CPU) GELUForward(out, in *tensor.Tensor, n int) error {
	if err := CheckGELUForward(tensor.CPU, out, in, n); err != nil {
		return err
	}
	return b.ctx.GELUForward(out.Ptr(), in.Ptr(), n)
}

// GELUBackward runs the C core's GELU backward (see NN).
func (b *CPU) GELUBackward(din, in, dout *tensor.Tensor, n int) error {
	if err := CheckGELUBackward(tensor.CPU, din, in, dout, n); err != nil {
		return err
	}
	return b.ctx.GELUBackward(din.Ptr(), in.Ptr(), dout.Ptr(), n)
}

// Add runs the C core's elementwise add (see NN).
func (b *CPU) Add(out, x, y *tensor.Tensor, n int) error {
	if err := CheckAdd(tensor.CPU, out, x, y, n); err != nil {
		return err
	}
	return b.ctx.Add(out.Ptr(), x.Ptr(), y.Ptr(), n)
}

// EncoderForward runs the C core's embedding lookup (see NN).
func (b *CPU) EncoderForward(out, tok, wte, wpe *tensor.Tensor, bs, t, c, v int) error {
	const op = "EncoderForward"
	wt, err := CheckEncoderForward(tensor.CPU, out, tok, wte, wpe, bs, t, c, v)
	if err != nil {
		return err
	}
	if bs*t == 0 { // an empty token tensor may have no address to give C
		return nil
	}
	return idErr(op, "tok", v, b.ctx.EncoderForwardMixed(out.Ptr(), tok.Ptr(), dt(wt), wte.Ptr(), wpe.Ptr(), bs, t, c, v))
}

// EncoderBackward runs the C core's embedding backward (see NN).
func (b *CPU) EncoderBackward(dwte, dwpe, dout, tok *tensor.Tensor, bs, t, c, v int) error {
	const op = "EncoderBackward"
	gt, err := CheckEncoderBackward(tensor.CPU, dwte, dwpe, dout, tok, bs, t, c, v)
	if err != nil {
		return err
	}
	if bs*t == 0 {
		return nil
	}
	return idErr(op, "tok", v, b.ctx.EncoderBackwardMixed(dt(gt), ptrOf(dwte), ptrOf(dwpe), dout.Ptr(), tok.Ptr(), bs, t, c, v))
}

// AttentionForward runs the C core's causal attention (see NN).
func (b *CPU) AttentionForward(out, att, qkv *tensor.Tensor, bs, t, nh, hs, window int) error {
	if err := CheckAttentionForward(tensor.CPU, out, att, qkv, bs, t, nh, hs); err != nil {
		return err
	}
	return b.ctx.AttentionForward(out.Ptr(), att.Ptr(), qkv.Ptr(), bs, t, nh, hs, window)
}

// AttentionBackward runs the C core's attention backward (see NN).
func (b *CPU) AttentionBackward(dqkv, dout, qkv, att *tensor.Tensor, bs, t, nh, hs, window int) error {
	if err := CheckAttentionBackward(tensor.CPU, dqkv, dout, qkv, att, bs, t, nh, hs); err != nil {
		return err
	}
	return b.ctx.AttentionBackward(dqkv.Ptr(), dout.Ptr(), qkv.Ptr(), att.Ptr(), bs, t, nh, hs, window)
}

// SoftmaxXentForward runs the C core's fused softmax and cross-entropy
// (see NN).
func (b *CPU) SoftmaxXentForward(probs, losses, logits, targets *tensor.Tensor, n, v int) error {
	const op = "SoftmaxXentForward"
	if err := CheckSoftmaxXentForward(tensor.CPU, probs, losses, logits, targets, n, v); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return idErr(op, "targets", v, b.ctx.SoftmaxXentForward(probs.Ptr(), losses.Ptr(), logits.Ptr(), targets.Ptr(), n, v))
}

// SoftmaxXentBackward runs the C core's cross-entropy backward (see NN).
func (b *CPU) SoftmaxXentBackward(dlogits, probs, targets, dlosses *tensor.Tensor, n, v int) error {
	const op = "SoftmaxXentBackward"
	if err := CheckSoftmaxXentBackward(tensor.CPU, dlogits, probs, targets, dlosses, n, v); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return idErr(op, "targets", v, b.ctx.SoftmaxXentBackward(dlogits.Ptr(), probs.Ptr(), targets.Ptr(), dlosses.Ptr(), n, v))
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
