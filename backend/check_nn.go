package backend

import (
	"fmt"
	"strings"

	"github.com/deepgo-ml/deepgo/tensor"
)

// The argument rules of the NN kernels, one Check function per method, so
// that every backend gives the same *ArgError for the same mistake. Each
// checks the sizes first, then the tensors in argument order.

// NNDTypes are the parameter dtypes of one NN call, as its Check found them.
type NNDTypes struct {
	W    tensor.DType // of the weights (w and b; wte and wpe)
	Grad tensor.DType // of their gradients (float32 when all are nil)
}

// maxElems bounds the product of a call's sizes, so that every element
// count a kernel computes from them fits an int64 with room to spare.
const maxElems = 1 << 62

// size is one size argument and the least value it may take.
type size struct {
	name   string
	v, min int
}

func checkSizes(op string, ss ...size) error {
	prod, over := 1, false
	for _, s := range ss {
		if s.v < s.min {
			return ArgErr(op, s.name, "%d: want >= %d", s.v, s.min)
		}
		if s.v > 0 && prod > maxElems/s.v {
			over = true
		}
		prod *= max(s.v, 1)
	}
	if over {
		parts := make([]string, len(ss))
		for i, s := range ss {
			parts[i] = fmt.Sprintf("%s=%d", s.name, s.v)
		}
		return ArgErr(op, "sizes", "%s multiply past 2^62 elements", strings.Join(parts, " "))
	}
	return nil
}

// fits reports whether the product of non-negative sizes (zeros counted
// as ones) stays within maxElems.
func fits(vs ...int) bool {
	prod := 1
	for _, v := range vs {
		if v > 0 && prod > maxElems/v {
			return false
		}
		prod *= max(v, 1)
	}
	return true
}

// arg is one tensor argument: its name, the elements it must hold at
// least, and whether it may be nil.
type arg struct {
	name string
	t    *tensor.Tensor
	need int
	opt  bool
}

func req(name string, t *tensor.Tensor, need int) arg { return arg{name, t, need, false} }
func opt(name string, t *tensor.Tensor, need int) arg { return arg{name, t, need, true} }

// checkHeld validates the element count of a present tensor.
func checkHeld(op string, a arg) error {
	if a.t.Numel() < a.need {
		return ArgErr(op, a.name, "has %d elements, need %d", a.t.Numel(), a.need)
	}
	return nil
}

// checkActs validates activations (dt float32) or ids (dt int32).
func checkActs(op string, dev tensor.Device, dt tensor.DType, as ...arg) error {
	what := "activations are float32"
	if dt == tensor.Int32 {
		what = "ids are int32"
	}
	for _, a := range as {
		if a.t == nil && a.opt {
			continue
		}
		if err := CheckTensor(op, a.name, a.t, dev); err != nil {
			return err
		}
		if a.t.DType() != dt {
			return ArgErr(op, a.name, "dtype %v: %s", a.t.DType(), what)
		}
		if err := checkHeld(op, a); err != nil {
			return err
		}
	}
	return nil
}

// checkWeights validates parameters (or their gradients) that share one
// floating dtype, that of the first present one, and returns it (float32
// when all are nil).
func checkWeights(op string, dev tensor.Device, as ...arg) (tensor.DType, error) {
	dt, like := tensor.Float32, ""
	for _, a := range as {
		if a.t == nil && a.opt {
			continue
		}
		if err := CheckTensor(op, a.name, a.t, dev); err != nil {
			return dt, err
		}
		if like == "" {
			if err := CheckFloatDType(op, a.name, a.t.DType()); err != nil {
				return dt, err
			}
			dt, like = a.t.DType(), a.name
		} else if a.t.DType() != dt {
			return dt, ArgErr(op, a.name, "dtype %v, want %v like %s", a.t.DType(), dt, like)
		}
		if err := checkHeld(op, a); err != nil {
			return dt, err
		}
	}
	return dt, nil
}

// CheckLayerNormForward validates LayerNormForward's arguments on dev and
// returns the dtype of w and b.
func CheckLayerNormForward(dev tensor.Device, out, mean, rstd, in, w, b *tensor.Tensor, eps float32, n, c int) (tensor.DType, error) {
	const op = "LayerNormForward"
	if err := checkSizes(op, size{"n", n, 0}, size{"c", c, 1}); err != nil {
		return 0, err
	}
	if !(eps >= 0) {
		return 0, ArgErr(op, "eps", "%g: want >= 0", eps)
	}
	if err := checkActs(op, dev, tensor.Float32, req("out", out, n*c), req("mean", mean, n), req("rstd", rstd, n), req("in", in, n*c)); err != nil {
		return 0, err
	}
	return checkWeights(op, dev, req("w", w, c), req("b", b, c))
}

// CheckLayerNormBackward validates LayerNormBackward's arguments on dev
// and returns the dtypes of w and of dw, db.
func CheckLayerNormBackward(dev tensor.Device, din, dw, db, dout, in, w, mean, rstd *tensor.Tensor, n, c int) (NNDTypes, error) {
	const op = "LayerNormBackward"
	var d NNDTypes
	if err := checkSizes(op, size{"n", n, 0}, size{"c", c, 1}); err != nil {
		return d, err
	}
	if err := checkActs(op, dev, tensor.Float32, opt("din", din, n*c)); err != nil {
		return d, err
	}
	var err error
	if d.Grad, err = checkWeights(op, dev, opt("dw", dw, c), opt("db", db, c)); err != nil {
		return d, err
	}
	if err := checkActs(op, dev, tensor.Float32, req("dout", dout, n*c), req("in", in, n*c)); err != nil {
		return d, err
	}
	if d.W, err = checkWeights(op, dev, req("w", w, c)); err != nil {
		return d, err
	}
	return d, checkActs(op, dev, tensor.Float32, req("mean", mean, n), req("rstd", rstd, n))
}

// CheckGELUForward validates GELUForward's arguments on dev.
func CheckGELUForward(dev tensor.Device, out, in *tensor.Tensor, n int) error {
	const op = "GELUForward"
	if err := checkSizes(op, size{"n", n, 0}); err != nil {
		return err
	}
	return checkActs(op, dev, tensor.Float32, req("out", out, n), req("in", in, n))
}

// CheckGELUBackward validates GELUBackward's arguments on dev.
func CheckGELUBackward(dev tensor.Device, din, in, dout *tensor.Tensor, n int) error {
	return checkGELUBackward("GELUBackward", dev, din, in, dout, n)
}

// CheckGELUBackwardWrite validates GELUBackwardWrite's arguments on dev
// (GELUBackward's, its errors naming the writing op).
func CheckGELUBackwardWrite(dev tensor.Device, din, in, dout *tensor.Tensor, n int) error {
	return checkGELUBackward("GELUBackwardWrite", dev, din, in, dout, n)
}

func checkGELUBackward(op string, dev tensor.Device, din, in, dout *tensor.Tensor, n int) error {
	if err := checkSizes(op, size{"n", n, 0}); err != nil {
		return err
	}
	return checkActs(op, dev, tensor.Float32, req("din", din, n), req("in", in, n), req("dout", dout, n))
}

// CheckAdd validates Add's arguments on dev.
func CheckAdd(dev tensor.Device, out, a, b *tensor.Tensor, n int) error {
	const op = "Add"
	if err := checkSizes(op, size{"n", n, 0}); err != nil {
		return err
	}
	return checkActs(op, dev, tensor.Float32, req("out", out, n), req("a", a, n), req("b", b, n))
}

// CheckEncoderForward validates EncoderForward's arguments on dev (not
// the token values: the kernel reads them) and returns the dtype of wte
// and wpe.
func CheckEncoderForward(dev tensor.Device, out, tok, wte, wpe *tensor.Tensor, b, t, c, v int) (tensor.DType, error) {
	const op = "EncoderForward"
	if err := checkSizes(op, size{"b", b, 0}, size{"t", t, 0}, size{"c", c, 0}, size{"v", v, 0}); err != nil {
		return 0, err
	}
	if err := checkActs(op, dev, tensor.Float32, req("out", out, b*t*c)); err != nil {
		return 0, err
	}
	if err := checkActs(op, dev, tensor.Int32, req("tok", tok, b*t)); err != nil {
		return 0, err
	}
	return checkWeights(op, dev, req("wte", wte, v*c), req("wpe", wpe, t*c))
}

// CheckEncoderBackward validates EncoderBackward's arguments on dev and
// returns the dtype of dwte and dwpe.
func CheckEncoderBackward(dev tensor.Device, dwte, dwpe, dout, tok *tensor.Tensor, b, t, c, v int) (tensor.DType, error) {
	const op = "EncoderBackward"
	if err := checkSizes(op, size{"b", b, 0}, size{"t", t, 0}, size{"c", c, 0}, size{"v", v, 0}); err != nil {
		return 0, err
	}
	gt, err := checkWeights(op, dev, opt("dwte", dwte, v*c), opt("dwpe", dwpe, t*c))
	if err != nil {
		return 0, err
	}
	if err := checkActs(op, dev, tensor.Float32, req("dout", dout, b*t*c)); err != nil {
		return 0, err
	}
	return gt, checkActs(op, dev, tensor.Int32, req("tok", tok, b*t))
}

// attentionSizes checks the sizes of an attention call, including that
// att[b, nh, t, t] and qkv[b, t, 3*nh*hs] stay countable.
func attentionSizes(op string, b, t, nh, hs int) error {
	if err := checkSizes(op, size{"b", b, 0}, size{"t", t, 0}, size{"nh", nh, 1}, size{"hs", hs, 1}); err != nil {
		return err
	}
	if !fits(b, nh, t, t, 3, hs) {
		return ArgErr(op, "sizes", "b=%d t=%d nh=%d hs=%d: att[b, nh, t, t] and qkv[b, t, 3*nh*hs] need past 2^62 elements", b, t, nh, hs)
	}
	return nil
}

// AttentionSpan is the length of one row of saved attention weights for
// t tokens and the given window: min(window, t), or t when window <= 0.
// att is [b, nh, t, AttentionSpan(t, window)], so a window makes it T*W
// floats per head rather than T*T (see NN.AttentionForward).
func AttentionSpan(t, window int) int {
	if window > 0 && window < t {
		return window
	}
	return t
}

// CheckAttentionForward validates AttentionForward's arguments on dev
// (every window is allowed: <= 0 is full causal).
func CheckAttentionForward(dev tensor.Device, out, att, qkv *tensor.Tensor, b, t, nh, hs, window int) error {
	const op = "AttentionForward"
	if err := attentionSizes(op, b, t, nh, hs); err != nil {
		return err
	}
	c := nh * hs
	return checkActs(op, dev, tensor.Float32, req("out", out, b*t*c), req("att", att, b*nh*t*AttentionSpan(t, window)), req("qkv", qkv, b*t*3*c))
}

// CheckAttentionBackward validates AttentionBackward's arguments on dev.
func CheckAttentionBackward(dev tensor.Device, dqkv, dout, qkv, att *tensor.Tensor, b, t, nh, hs, window int) error {
	return checkAttentionBackward("AttentionBackward", dev, dqkv, dout, qkv, att, b, t, nh, hs, window)
}

// CheckAttentionBackwardWrite validates AttentionBackwardWrite's arguments
// on dev (AttentionBackward's, its errors naming the writing op).
func CheckAttentionBackwardWrite(dev tensor.Device, dqkv, dout, qkv, att *tensor.Tensor, b, t, nh, hs, window int) error {
	return checkAttentionBackward("AttentionBackwardWrite", dev, dqkv, dout, qkv, att, b, t, nh, hs, window)
}

func checkAttentionBackward(op string, dev tensor.Device, dqkv, dout, qkv, att *tensor.Tensor, b, t, nh, hs, window int) error {
	if err := attentionSizes(op, b, t, nh, hs); err != nil {
		return err
	}
	c := nh * hs
	return checkActs(op, dev, tensor.Float32, req("dqkv", dqkv, b*t*3*c), req("dout", dout, b*t*c), req("qkv", qkv, b*t*3*c),
		req("att", att, b*nh*t*AttentionSpan(t, window)))
}

// CheckSoftmaxXentForward validates SoftmaxXentForward's arguments on dev
// (not the target values: the kernel reads them).
func CheckSoftmaxXentForward(dev tensor.Device, probs, losses, logits, targets *tensor.Tensor, n, v int) error {
	const op = "SoftmaxXentForward"
	if err := checkSizes(op, size{"n", n, 0}, size{"v", v, 1}); err != nil {
		return err
	}
	if err := checkActs(op, dev, tensor.Float32, req("probs", probs, n*v), req("losses", losses, n), req("logits", logits, n*v)); err != nil {
		return err
	}
	return checkActs(op, dev, tensor.Int32, req("targets", targets, n))
}

// CheckSoftmaxXentBackward validates SoftmaxXentBackward's arguments on dev.
func CheckSoftmaxXentBackward(dev tensor.Device, dlogits, probs, targets, dlosses *tensor.Tensor, n, v int) error {
	const op = "SoftmaxXentBackward"
	if err := checkSizes(op, size{"n", n, 0}, size{"v", v, 1}); err != nil {
		return err
	}
	if err := checkActs(op, dev, tensor.Float32, req("dlogits", dlogits, n*v), req("probs", probs, n*v)); err != nil {
		return err
	}
	if err := checkActs(op, dev, tensor.Int32, req("targets", targets, n)); err != nil {
		return err
	}
	return checkActs(op, dev, tensor.Float32, req("dlosses", dlosses, n))
}

// CheckTransposeBlocks validates TransposeBlocks's arguments on dev,
// including that dst and src do not overlap.
func CheckTransposeBlocks(dev tensor.Device, dst, src *tensor.Tensor, a, b, w int) error {
	const op = "TransposeBlocks"
	if err := checkSizes(op, size{"a", a, 0}, size{"b", b, 0}, size{"w", w, 0}); err != nil {
		return err
	}
	n := a * b * w
	if err := checkActs(op, dev, tensor.Float32, req("dst", dst, n), req("src", src, n)); err != nil {
		return err
	}
	d, s, bytes := uintptr(dst.Ptr()), uintptr(src.Ptr()), uintptr(n)*4
	if n > 0 && d < s+bytes && s < d+bytes {
		return ArgErr(op, "dst", "overlaps src: want two separate buffers")
	}
	return nil
}

// IDOutOfRange is the *ArgError of a kernel that found an id (a token, a
// target) outside [0, v) in argument name and wrote nothing.
func IDOutOfRange(op, name string, v int) error {
	return ArgErr(op, name, "holds an id outside [0, %d); nothing written", v)
}
