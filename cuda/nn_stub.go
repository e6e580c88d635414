//go:build !cuda

package cuda

import "github.com/deepgo-ml/deepgo/tensor"

// NNKernels runs package nn's layer kernels on a Backend's device (see the
// cuda build); without the cuda tag every call fails with ErrNoCUDA.
type NNKernels struct{}

// NewNNKernels runs the nn kernels on b.
func NewNNKernels(b *Backend) (*NNKernels, error) { return nil, ErrNoCUDA }

// CuBLASPath is the libcublas file the nn matmuls use ("" without CUDA).
func CuBLASPath() string { return "" }

// CuBLASSoname is the cuBLAS the matmuls load ("" without CUDA).
func CuBLASSoname() string { return "" }

// MatmulForward computes out[n,oc] = inp[n,c] @ w[oc,c]^T + bias[oc].
func (k *NNKernels) MatmulForward(out, inp, w, bias *tensor.Tensor, n, c, oc int) error {
	return ErrNoCUDA
}

// MatmulBackward accumulates dinp, dw and dbias.
func (k *NNKernels) MatmulBackward(dinp, dw, dbias, dout, inp, w *tensor.Tensor, n, c, oc int) error {
	return ErrNoCUDA
}

// LayerNormForward normalises n rows of c channels, saving mean and rstd.
func (k *NNKernels) LayerNormForward(out, mean, rstd, inp, w, b *tensor.Tensor, eps float32, n, c int) error {
	return ErrNoCUDA
}

// LayerNormBackward accumulates dinp, dw and db.
func (k *NNKernels) LayerNormBackward(dinp, dw, db, dout, inp, w, mean, rstd *tensor.Tensor, n, c int) error {
	return ErrNoCUDA
}

// GELUForward computes out = GELU(inp).
func (k *NNKernels) GELUForward(out, inp *tensor.Tensor, n int) error { return ErrNoCUDA }

// GELUBackward accumulates dinp += GELU'(inp) * dout.
func (k *NNKernels) GELUBackward(dinp, inp, dout *tensor.Tensor, n int) error { return ErrNoCUDA }

// Add computes out = a + b.
func (k *NNKernels) Add(out, a, b *tensor.Tensor, n int) error { return ErrNoCUDA }

// EncoderForward computes out[b,t,:] = wte[tok[b,t]] + wpe[t].
func (k *NNKernels) EncoderForward(out, tok, wte, wpe *tensor.Tensor, b, t, c, v int) error {
	return ErrNoCUDA
}

// EncoderBackward accumulates dwte[tok] += dout and dwpe[t] += dout.
func (k *NNKernels) EncoderBackward(dwte, dwpe, dout, tok *tensor.Tensor, b, t, c, v int) error {
	return ErrNoCUDA
}

// AttentionForward runs causal attention, saving the weights in att.
func (k *NNKernels) AttentionForward(out, att, qkv *tensor.Tensor, b, t, nh, hs, window int) error {
	return ErrNoCUDA
}

// AttentionBackward accumulates dqkv from dout and the saved att.
func (k *NNKernels) AttentionBackward(dqkv, dout, qkv, att *tensor.Tensor, b, t, nh, hs, window int) error {
	return ErrNoCUDA
}

// SoftmaxXentForward writes probs and losses.
func (k *NNKernels) SoftmaxXentForward(probs, losses, logits, targets *tensor.Tensor, n, v int) error {
	return ErrNoCUDA
}

// SoftmaxXentBackward writes dlogits = (probs - onehot) * dlosses.
func (k *NNKernels) SoftmaxXentBackward(dlogits, probs, targets, dlosses *tensor.Tensor, n, v int) error {
	return ErrNoCUDA
}
