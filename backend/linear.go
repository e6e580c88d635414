package backend

import "github.com/deepgo-ml/deepgo/tensor"

// Linear is the matrix product of a linear layer, y = x W^T + b, for a
// module that computes on a backend. The weight and bias may be float32,
// float16 or bfloat16, and so may their gradients (not necessarily the
// weight's dtype); activations and their gradients are float32, and so is
// the arithmetic. A half-precision weight is widened inside the kernel in
// bounded tiles, never copied whole, and a half-precision gradient receives
// each call's float32 contribution with one rounding per element. The CPU
// backend implements it.
type Linear interface {
	// LinearForward computes out[n, oc] = in[n, c] @ w[oc, c]^T + b[oc] (b
	// may be nil). in is any shape whose last dimension is c, out has n*oc
	// elements.
	LinearForward(out, in, w, b *tensor.Tensor) error
	// LinearBackward accumulates din += dout @ w, dw += dout^T @ in and db
	// += the column sums of dout[n, oc]; any of din, dw, db may be nil.
	LinearBackward(din, dw, db, dout, in, w *tensor.Tensor) error
}

// GradWriter is implemented by backends whose backward kernels can write
// an input gradient instead of adding to it. The result is, bit for bit,
// what clearing it (Zero) and accumulating gives (0 + x: a -0 becomes +0
// alike), without the clearing pass and without reading what it held.
// Layers call it for scratch gradients cleared only to be accumulated into
// once, and fall back to Zero and the accumulating kernel on a backend
// without it (the CUDA backend today); the CPU backend and the simulated
// device implement it.
type GradWriter interface {
	// LinearBackwardWrite is LinearBackward with din = dout @ w written;
	// dw and db (may be nil) accumulate as in LinearBackward.
	LinearBackwardWrite(din, dw, db, dout, in, w *tensor.Tensor) error
	// GELUBackwardWrite writes din = GELU'(in) * dout over n elements.
	GELUBackwardWrite(din, in, dout *tensor.Tensor, n int) error
	// AttentionBackwardWrite is AttentionBackward with dqkv written.
	AttentionBackwardWrite(dqkv, dout, qkv, att *tensor.Tensor, b, t, nh, hs, window int) error
}

// LinearDims are the sizes and dtypes of one Linear call, as CheckLinear
// found them.
type LinearDims struct {
	N, C, OC int
	W        tensor.DType // of w and b
	Grad     tensor.DType // of dw and db (float32 when both are nil)
}

// CheckLinear validates the arguments of LinearForward (out, b; din, dw,
// db, dout nil) or LinearBackward (din, dw, db, dout; out, b nil) on dev,
// for backends to give the same *ArgError for the same mistake.
func CheckLinear(op string, dev tensor.Device, out, in, w, b, din, dw, db, dout *tensor.Tensor) (LinearDims, error) {
	var d LinearDims
	if err := CheckTensor(op, "w", w, dev); err != nil {
		return d, err
	}
	if err := CheckFloatDType(op, "w", w.DType()); err != nil {
		return d, err
	}
	if w.Dim() != 2 {
		return d, ArgErr(op, "w", "%v: want 2 dimensions [out, in]", w)
	}
	d.OC, d.C, d.W, d.Grad = w.Shape()[0], w.Shape()[1], w.DType(), tensor.Float32
	if err := checkF32(op, "in", in, dev, -1); err != nil {
		return d, err
	}
	sh := in.Shape()
	if len(sh) == 0 || sh[len(sh)-1] != d.C {
		return d, ArgErr(op, "in", "%v: want last dimension %d, the columns of w %v", in, d.C, w)
	}
	d.N = 1
	for _, k := range sh[:len(sh)-1] {
		d.N *= k
	}
	for _, a := range []struct {
		name string
		t    *tensor.Tensor
		n    int
	}{{"out", out, d.N * d.OC}, {"dout", dout, d.N * d.OC}, {"din", din, d.N * d.C}} {
		if a.t != nil {
			if err := checkF32(op, a.name, a.t, dev, a.n); err != nil {
				return d, err
			}
		}
	}
	if b != nil {
		if err := checkParam(op, "b", b, dev, w.DType(), "w", d.OC); err != nil {
			return d, err
		}
	}
	like := ""
	for _, a := range []struct {
		name string
		t    *tensor.Tensor
		n    int
	}{{"dw", dw, d.OC * d.C}, {"db", db, d.OC}} {
		if a.t == nil {
			continue
		}
		if like == "" {
			if err := CheckFloatDType(op, a.name, a.t.DType()); err != nil {
				return d, err
			}
			d.Grad, like = a.t.DType(), a.name
		}
		if err := checkParam(op, a.name, a.t, dev, d.Grad, like, a.n); err != nil {
			return d, err
		}
	}
	return d, nil
}

// checkF32 validates a float32 activation of n elements (n < 0: any).
func checkF32(op, arg string, t *tensor.Tensor, dev tensor.Device, n int) error {
	if err := CheckTensor(op, arg, t, dev); err != nil {
		return err
	}
	if t.DType() != tensor.Float32 {
		return ArgErr(op, arg, "dtype %v: activations are float32", t.DType())
	}
	if n >= 0 && t.Numel() != n {
		return ArgErr(op, arg, "has %d elements, want %d", t.Numel(), n)
	}
	return nil
}

// checkParam validates a bias or gradient of n elements and dtype want (that
// of argument like).
func checkParam(op, arg string, t *tensor.Tensor, dev tensor.Device, want tensor.DType, like string, n int) error {
	if err := CheckTensor(op, arg, t, dev); err != nil {
		return err
	}
	if t.DType() != want {
		return ArgErr(op, arg, "dtype %v, want %v like %s", t.DType(), want, like)
	}
	if t.Numel() != n {
		return ArgErr(op, arg, "has %d elements, want %d", t.Numel(), n)
	}
	return nil
}
