package backend

import "github.com/deepgo-ml/deepgo/tensor"

// NN is the layer kernels package nn computes with (llm.c's forward and
// backward pairs): the linear layer, LayerNorm, GELU, the residual add, the
// token + position embedding, causal attention and softmax cross-entropy,
// the vocabulary-parallel ends of a tensor-parallel model and the block
// transpose of sequence parallelism's exchanges.
// The CPU backend implements it on the C core (and its views, on the
// simulated device); cuda.Backend on a GPU (cuBLAS for the matmuls).
//
// Activations and their gradients are float32, token ids and targets
// int32, and so is the arithmetic float32. Weights (w and b, wte and wpe)
// may be float32, float16 or bfloat16, one dtype per call, and so may
// their gradients (one dtype per call, not necessarily the weights'): a
// half weight is widened inside the kernel, a half gradient gets one
// rounding per element per call.
//
// Sizes are explicit ints; every tensor must be contiguous, live on
// Device() and hold at least the elements the sizes say it is read or
// written at (a position table of MaxSeq rows serves any t <= MaxSeq).
// Backward methods accumulate into their gradients (+=) and skip a nil
// one, except SoftmaxXentBackward, which writes. A violation of these rules
// returns the *ArgError the Check functions of this package give (the same
// for every backend), and nothing is written. A check that needs the data
// itself (a token id or target in range) cannot be made before the kernel
// runs on an asynchronous device: there it is the sticky error of the
// device's next synchronizing call (the simulated device's, for example).
type NN interface {
	Linear
	VocabParallel
	// Device is where the kernels' tensors live.
	Device() tensor.Device
	// Zero and Copy are Backend's: layers clear gradient scratch and copy
	// activations, and a model moves its tokens in and its losses out,
	// with them.
	Zero(xs []*tensor.Tensor) error
	Copy(dst, src *tensor.Tensor) error
	// LayerNormForward normalises n rows of c channels of in into out, to
	// zero mean and unit (biased) variance, then scales by w and shifts by
	// b, saving each row's mean[n] and reciprocal deviation rstd[n].
	LayerNormForward(out, mean, rstd, in, w, b *tensor.Tensor, eps float32, n, c int) error
	// LayerNormBackward accumulates din, dw and db from dout and what the
	// forward saved.
	LayerNormBackward(din, dw, db, dout, in, w, mean, rstd *tensor.Tensor, n, c int) error
	// GELUForward computes out = GELU(in) (GPT-2's tanh approximation) over
	// n elements.
	GELUForward(out, in *tensor.Tensor, n int) error
	// GELUBackward accumulates din += GELU'(in) * dout over n elements.
	GELUBackward(din, in, dout *tensor.Tensor, n int) error
	// Add computes out = a + b over n elements (out may be a or b): the
	// residual connection.
	Add(out, a, b *tensor.Tensor, n int) error
	// EncoderForward computes out[b, t, :] = wte[tok[b, t]] + wpe[t] for c
	// channels and a vocabulary of v; a token outside [0, v) is an
	// *ArgError on tok.
	EncoderForward(out, tok, wte, wpe *tensor.Tensor, b, t, c, v int) error
	// EncoderBackward accumulates dwte[tok[b, t]] += dout[b, t, :] and
	// dwpe[t] += dout[b, t, :]; a half gradient row a token repeats gets
	// one rounding (the rows are summed first).
	EncoderBackward(dwte, dwpe, dout, tok *tensor.Tensor, b, t, c, v int) error
	// AttentionForward runs causal attention of nh heads of hs channels
	// over qkv[b, t, 3*nh*hs] (per token all queries, then keys, then
	// values) into out[b, t, nh*hs], saving the softmax weights in
	// att[b, nh, t, AttentionSpan(t, window)]; with window > 0 a query sees
	// only the last window positions, itself included, and its weight for
	// key k sits at slot k - max(0, q-window+1): memory and work grow as
	// t*window. Without a window (or window >= t) att is [b, nh, t, t].
	AttentionForward(out, att, qkv *tensor.Tensor, b, t, nh, hs, window int) error
	// AttentionBackward accumulates dqkv from dout and the saved att.
	AttentionBackward(dqkv, dout, qkv, att *tensor.Tensor, b, t, nh, hs, window int) error
	// SoftmaxXentForward writes probs = softmax(logits) per row of v and
	// losses[n] = -log probs[n, targets[n]]; probs may be logits. A target
	// outside [0, v) is an *ArgError on targets.
	SoftmaxXentForward(probs, losses, logits, targets *tensor.Tensor, n, v int) error
	// SoftmaxXentBackward writes dlogits = (probs - onehot(targets)) *
	// dlosses per row; dlogits may be probs.
	SoftmaxXentBackward(dlogits, probs, targets, dlosses *tensor.Tensor, n, v int) error
	// TransposeBlocks writes dst[j, i, :] = src[i, j, :] for src[a, b, w]
	// (dst is [b, a, w]): a copy, the packing of Ulysses sequence
	// parallelism's all-to-alls. dst and src must not overlap.
	TransposeBlocks(dst, src *tensor.Tensor, a, b, w int) error
}
