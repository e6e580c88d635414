package csrc

// Bindings of the nn kernels (deepgo.h, "nn ops"): one Go method per C
// function, raw pointers to C float32 (and int32 token) memory, sizes as
// ints. The layers of package nn are written on top of these. The *Mixed
// methods take parameters of dtype wt and parameter gradients of dtype gt
// (F32, F16 or BF16; see deepgo.h, "Mixed precision").

/*
#cgo LDFLAGS: -lopenblas -ldl
#cgo noescape dg_nn_matmul_forward
#cgo nocallback dg_nn_matmul_forward
#cgo noescape dg_nn_matmul_backward
#cgo nocallback dg_nn_matmul_backward
#cgo noescape dg_nn_matmul_forward_mixed
#cgo nocallback dg_nn_matmul_forward_mixed
#cgo noescape dg_nn_matmul_backward_mixed
#cgo nocallback dg_nn_matmul_backward_mixed
#cgo noescape dg_nn_layernorm_forward_mixed
#cgo nocallback dg_nn_layernorm_forward_mixed
#cgo noescape dg_nn_layernorm_backward_mixed
#cgo nocallback dg_nn_layernorm_backward_mixed
#cgo noescape dg_nn_encoder_forward_mixed
#cgo nocallback dg_nn_encoder_forward_mixed
#cgo noescape dg_nn_encoder_backward_mixed
#cgo nocallback dg_nn_encoder_backward_mixed
#cgo noescape dg_nn_layernorm_forward
#cgo nocallback dg_nn_layernorm_forward
#cgo noescape dg_nn_layernorm_backward
#cgo nocallback dg_nn_layernorm_backward
#cgo noescape dg_nn_gelu_forward
#cgo nocallback dg_nn_gelu_forward
#cgo noescape dg_nn_gelu_backward
#cgo nocallback dg_nn_gelu_backward
#cgo noescape dg_nn_add
#cgo nocallback dg_nn_add
#cgo noescape dg_nn_encoder_forward
#cgo nocallback dg_nn_encoder_forward
#cgo noescape dg_nn_encoder_backward
#cgo nocallback dg_nn_encoder_backward
#cgo noescape dg_nn_attention_forward
#cgo nocallback dg_nn_attention_forward
#cgo noescape dg_nn_attention_backward
#cgo nocallback dg_nn_attention_backward
#cgo noescape dg_nn_softmax_xent_forward
#cgo nocallback dg_nn_softmax_xent_forward
#cgo noescape dg_nn_softmax_xent_backward
#cgo nocallback dg_nn_softmax_xent_backward
#cgo noescape dg_nn_vocab_xent_max
#cgo nocallback dg_nn_vocab_xent_max
#cgo noescape dg_nn_vocab_xent_exp
#cgo nocallback dg_nn_vocab_xent_exp
#cgo noescape dg_nn_vocab_xent_grad
#cgo nocallback dg_nn_vocab_xent_grad
#cgo noescape dg_nn_vocab_clear_rows
#cgo nocallback dg_nn_vocab_clear_rows
#cgo noescape dg_nn_transpose_blocks
#cgo nocallback dg_nn_transpose_blocks
#include "deepgo.h"
*/
import "C"

import "unsafe"

func fp(p unsafe.Pointer) *C.float   { return (*C.float)(p) }
func ip(p unsafe.Pointer) *C.int32_t { return (*C.int32_t)(p) }
func i64(n int) C.int64_t            { return C.int64_t(n) }

// MatmulForward computes out[n,oc] = inp[n,c] @ w[oc,c]^T + bias[oc] (bias may be nil).
func (x *Ctx) MatmulForward(out, inp, w, bias unsafe.Pointer, n, c, oc int) error {
	return check("dg_nn_matmul_forward", C.dg_nn_matmul_forward(x.c, fp(out), fp(inp), fp(w), fp(bias), i64(n), i64(c), i64(oc)))
}

// MatmulBackward accumulates dinp += dout @ w, dw += dout^T @ inp, dbias +=
// column sums of dout; a nil gradient is skipped.
func (x *Ctx) MatmulBackward(dinp, dw, dbias, dout, inp, w unsafe.Pointer, n, c, oc int) error {
	return check("dg_nn_matmul_backward", C.dg_nn_matmul_backward(x.c, fp(dinp), fp(dw), fp(dbias), fp(dout), fp(inp), fp(w), i64(n), i64(c), i64(oc)))
}

// MatmulForwardMixed is MatmulForward with w and bias of dtype wt.
func (x *Ctx) MatmulForwardMixed(out, inp unsafe.Pointer, wt DType, w, bias unsafe.Pointer, n, c, oc int) error {
	return check("dg_nn_matmul_forward_mixed", C.dg_nn_matmul_forward_mixed(x.c, fp(out), fp(inp), C.dg_dtype(wt), w, bias, i64(n), i64(c), i64(oc)))
}

// MatmulBackwardMixed is MatmulBackward with w of dtype wt and dw, dbias of
// dtype gt; a half gradient gets one rounding per element per call.
func (x *Ctx) MatmulBackwardMixed(dinp unsafe.Pointer, gt DType, dw, dbias, dout, inp unsafe.Pointer, wt DType, w unsafe.Pointer, n, c, oc int) error {
	return check("dg_nn_matmul_backward_mixed", C.dg_nn_matmul_backward_mixed(x.c, fp(dinp), C.dg_dtype(gt), dw, dbias, fp(dout), fp(inp), C.dg_dtype(wt), w, i64(n), i64(c), i64(oc)))
}

// MatmulBackwardWrite is MatmulBackwardMixed with dinp written, not added
// to: the bits of clearing it and accumulating, without the clearing pass
// (what dinp held is not read).
func (x *Ctx) MatmulBackwardWrite(dinp unsafe.Pointer, gt DType, dw, dbias, dout, inp unsafe.Pointer, wt DType, w unsafe.Pointer, n, c, oc int) error {
	return check("dg_nn_matmul_backward_write", C.dg_nn_matmul_backward_write(x.c, fp(dinp), C.dg_dtype(gt), dw, dbias, fp(dout), fp(inp), C.dg_dtype(wt), w, i64(n), i64(c), i64(oc)))
}

// LayerNormForwardMixed is LayerNormForward with w and b of dtype wt.
func (x *Ctx) LayerNormForwardMixed(out, mean, rstd, inp unsafe.Pointer, wt DType, w, b unsafe.Pointer, eps float32, n, c int) error {
	return check("dg_nn_layernorm_forward_mixed", C.dg_nn_layernorm_forward_mixed(x.c, fp(out), fp(mean), fp(rstd), fp(inp), C.dg_dtype(wt), w, b, C.float(eps), i64(n), i64(c)))
}

// LayerNormBackwardMixed is LayerNormBackward with w of dtype wt and dw, db
// of dtype gt.
func (x *Ctx) LayerNormBackwardMixed(dinp unsafe.Pointer, gt DType, dw, db, dout, inp unsafe.Pointer, wt DType, w, mean, rstd unsafe.Pointer, n, c int) error {
	return check("dg_nn_layernorm_backward_mixed", C.dg_nn_layernorm_backward_mixed(x.c, fp(dinp), C.dg_dtype(gt), dw, db, fp(dout), fp(inp), C.dg_dtype(wt), w, fp(mean), fp(rstd), i64(n), i64(c)))
}

// EncoderForwardMixed is EncoderForward with wte and wpe of dtype wt.
func (x *Ctx) EncoderForwardMixed(out, tok unsafe.Pointer, wt DType, wte, wpe unsafe.Pointer, b, t, c, v int) error {
	return check("dg_nn_encoder_forward_mixed", C.dg_nn_encoder_forward_mixed(x.c, fp(out), ip(tok), C.dg_dtype(wt), wte, wpe, i64(b), i64(t), i64(c), i64(v)))
}

// EncoderBackwardMixed is EncoderBackward with dwte and dwpe of dtype gt.
func (x *Ctx) EncoderBackwardMixed(gt DType, dwte, dwpe, dout, tok unsafe.Pointer, b, t, c, v int) error {
	return check("dg_nn_encoder_backward_mixed", C.dg_nn_encoder_backward_mixed(x.c, C.dg_dtype(gt), dwte, dwpe, fp(dout), ip(tok), i64(b), i64(t), i64(c), i64(v)))
}

// NNTileFloats bounds the float32 tiles a mixed kernel widens half weights
// into, per thread (deepgo.h's DG_NN_TILE_FLOATS).
const NNTileFloats = C.DG_NN_TILE_FLOATS

// LayerNormForward normalises n rows of c channels, saving mean[n] and rstd[n].
func (x *Ctx) LayerNormForward(out, mean, rstd, inp, w, b unsafe.Pointer, eps float32, n, c int) error {
	return check("dg_nn_layernorm_forward", C.dg_nn_layernorm_forward(x.c, fp(out), fp(mean), fp(rstd), fp(inp), fp(w), fp(b), C.float(eps), i64(n), i64(c)))
}

// LayerNormBackward accumulates dinp, dw and db (each may be nil).
func (x *Ctx) LayerNormBackward(dinp, dw, db, dout, inp, w, mean, rstd unsafe.Pointer, n, c int) error {
	return check("dg_nn_layernorm_backward", C.dg_nn_layernorm_backward(x.c, fp(dinp), fp(dw), fp(db), fp(dout), fp(inp), fp(w), fp(mean), fp(rstd), i64(n), i64(c)))
}

// GELUForward computes out = GELU(inp) (tanh approximation) over n elements.
func (x *Ctx) GELUForward(out, inp unsafe.Pointer, n int) error {
	return check("dg_nn_gelu_forward", C.dg_nn_gelu_forward(x.c, fp(out), fp(inp), i64(n)))
}

// GELUBackward accumulates dinp += GELU'(inp) * dout.
func (x *Ctx) GELUBackward(dinp, inp, dout unsafe.Pointer, n int) error {
	return check("dg_nn_gelu_backward", C.dg_nn_gelu_backward(x.c, fp(dinp), fp(inp), fp(dout), i64(n)))
}

// GELUBackwardWrite writes dinp = 0 + GELU'(inp) * dout: GELUBackward into
// a cleared dinp, bit for bit, in one pass.
func (x *Ctx) GELUBackwardWrite(dinp, inp, dout unsafe.Pointer, n int) error {
	return check("dg_nn_gelu_backward_write", C.dg_nn_gelu_backward_write(x.c, fp(dinp), fp(inp), fp(dout), i64(n)))
}

// Add computes out = a + b over n elements (out may alias a or b).
func (x *Ctx) Add(out, a, b unsafe.Pointer, n int) error {
	return check("dg_nn_add", C.dg_nn_add(x.c, fp(out), fp(a), fp(b), i64(n)))
}

// EncoderForward computes out[b,t,:] = wte[tok[b,t]] + wpe[t]; tok is int32.
func (x *Ctx) EncoderForward(out, tok, wte, wpe unsafe.Pointer, b, t, c, v int) error {
	return check("dg_nn_encoder_forward", C.dg_nn_encoder_forward(x.c, fp(out), ip(tok), fp(wte), fp(wpe), i64(b), i64(t), i64(c), i64(v)))
}

// EncoderBackward accumulates dwte[tok] += dout and dwpe[t] += dout.
func (x *Ctx) EncoderBackward(dwte, dwpe, dout, tok unsafe.Pointer, b, t, c, v int) error {
	return check("dg_nn_encoder_backward", C.dg_nn_encoder_backward(x.c, fp(dwte), fp(dwpe), fp(dout), ip(tok), i64(b), i64(t), i64(c), i64(v)))
}

// AttentionForward runs causal attention over qkv[b,t,3*nh*hs] into
// out[b,t,nh*hs], saving the weights in att[b,nh,t,t]; window <= 0 is full.
func (x *Ctx) AttentionForward(out, att, qkv unsafe.Pointer, b, t, nh, hs, window int) error {
	return check("dg_nn_attention_forward", C.dg_nn_attention_forward(x.c, fp(out), fp(att), fp(qkv), i64(b), i64(t), i64(nh), i64(hs), i64(window)))
}

// AttentionBackwardWrite is AttentionBackward with dqkv written: the bits of
// clearing it and accumulating, without the clearing pass.
func (x *Ctx) AttentionBackwardWrite(dqkv, dout, qkv, att unsafe.Pointer, b, t, nh, hs, window int) error {
	return check("dg_nn_attention_backward_write", C.dg_nn_attention_backward_write(x.c, fp(dqkv), fp(dout), fp(qkv), fp(att), i64(b), i64(t), i64(nh), i64(hs), i64(window)))
}

// AttentionBackward accumulates dqkv from dout and the saved att.
func (x *Ctx) AttentionBackward(dqkv, dout, qkv, att unsafe.Pointer, b, t, nh, hs, window int) error {
	return check("dg_nn_attention_backward", C.dg_nn_attention_backward(x.c, fp(dqkv), fp(dout), fp(qkv), fp(att), i64(b), i64(t), i64(nh), i64(hs), i64(window)))
}

// SoftmaxXentForward writes probs = softmax(logits) per row and losses[n] =
// -log probs[n, targets[n]]; probs may alias logits; targets is int32.
func (x *Ctx) SoftmaxXentForward(probs, losses, logits, targets unsafe.Pointer, n, v int) error {
	return check("dg_nn_softmax_xent_forward", C.dg_nn_softmax_xent_forward(x.c, fp(probs), fp(losses), fp(logits), ip(targets), i64(n), i64(v)))
}

// SoftmaxXentBackward writes dlogits = (probs - onehot) * dlosses per row;
// dlogits may alias probs.
func (x *Ctx) SoftmaxXentBackward(dlogits, probs, targets, dlosses unsafe.Pointer, n, v int) error {
	return check("dg_nn_softmax_xent_backward", C.dg_nn_softmax_xent_backward(x.c, fp(dlogits), fp(probs), ip(targets), fp(dlosses), i64(n), i64(v)))
}

// VocabXentMax writes maxes[n] = the largest logit of each row of the
// vocabulary slice logits[n, v] (Go's max: a NaN wins, +0 beats -0).
func (x *Ctx) VocabXentMax(maxes, logits unsafe.Pointer, n, v int) error {
	return check("dg_nn_vocab_xent_max", C.dg_nn_vocab_xent_max(x.c, fp(maxes), fp(logits), i64(n), i64(v)))
}

// VocabXentExp replaces logits[n, v] (token ids [lo, lo+v) of vocab) by
// e^(logits - maxes[row]) and writes each row's sum and the target's
// logit minus the max where the slice holds the target (else 0); a target
// outside [0, vocab) is Invalid, nothing written.
func (x *Ctx) VocabXentExp(logits, sums, tlogits, maxes, targets unsafe.Pointer, n, v, lo, vocab int) error {
	return check("dg_nn_vocab_xent_exp", C.dg_nn_vocab_xent_exp(x.c, fp(logits), fp(sums), fp(tlogits), fp(maxes), ip(targets),
		i64(n), i64(v), i64(lo), i64(vocab)))
}

// VocabXentGrad turns VocabXentExp's weights into the gradient
// (logits / sums[row] - onehot) * d in place.
func (x *Ctx) VocabXentGrad(logits, sums, targets unsafe.Pointer, d float32, n, v, lo int) error {
	return check("dg_nn_vocab_xent_grad", C.dg_nn_vocab_xent_grad(x.c, fp(logits), fp(sums), ip(targets), C.float(d), i64(n), i64(v), i64(lo)))
}

// VocabClearRows zeroes the rows r of x[n, c] whose ids[r] is outside
// [lo, lo+v).
func (x *Ctx) VocabClearRows(xs, ids unsafe.Pointer, n, c, lo, v int) error {
	return check("dg_nn_vocab_clear_rows", C.dg_nn_vocab_clear_rows(x.c, fp(xs), ip(ids), i64(n), i64(c), i64(lo), i64(v)))
}

// TransposeBlocks writes dst[j, i, :] = src[i, j, :] for src[a, b, w]
// (float32; dst and src must not overlap).
func (x *Ctx) TransposeBlocks(dst, src unsafe.Pointer, a, b, w int) error {
	return check("dg_nn_transpose_blocks", C.dg_nn_transpose_blocks(x.c, fp(dst), fp(src), i64(a), i64(b), i64(w)))
}
