/*
 * dg_nn_math.h — the element math of the nn kernels (deepgo.h, "nn ops"),
 * written once for the C loops (csrc/nn_*.c) and the CUDA kernels
 * (cuda/nn_*.cu). Under nvcc DG_HD is __host__ __device__ (dg_math.h).
 *
 * Every function is the exact sequence of float32 operations the C loops
 * did inline before this header existed (left to right, one rounding per
 * operation, no fused multiply-add: the C core is ISO C11, where GCC does
 * not contract, and nvcc builds with -fmad=false), so the two sides round
 * alike. What can still differ is the transcendental: tanhf and expf are
 * glibc's on the CPU and CUDA's on the GPU (CUDA documents expf and tanhf
 * within 2 ulp; glibc's are within 1), so GELU and the softmax weights may
 * differ in the last bits. Everything else here is bit-identical.
 */
#ifndef DG_NN_MATH_H
#define DG_NN_MATH_H

#include <math.h>

#include "dg_math.h"

#define DG_NN_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define DG_NN_GELU_CUBE 0.044715f

/* dg_nn_gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2). */
DG_HD float dg_nn_gelu(float x)
{
	float u = DG_NN_GELU_SCALE * (x + DG_NN_GELU_CUBE * x * x * x);
	return 0.5f * x * (1.0f + tanhf(u));
}

/* dg_nn_gelu_grad: d/dx of dg_nn_gelu,
 * 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx. */
DG_HD float dg_nn_gelu_grad(float x)
{
	float u = DG_NN_GELU_SCALE * (x + DG_NN_GELU_CUBE * x * x * x);
	float th = tanhf(u);
	float sech2 = 1.0f - th * th;
	return 0.5f * (1.0f + th) + 0.5f * x * sech2 * DG_NN_GELU_SCALE * (1.0f + 3.0f * DG_NN_GELU_CUBE * x * x);
}

/* dg_nn_ln_norm: LayerNorm's normalised value (x - mean) * rstd. */
DG_HD float dg_nn_ln_norm(float x, float mean, float rstd) { return (x - mean) * rstd; }

/* dg_nn_ln_out: LayerNorm's output norm * w + b. */
DG_HD float dg_nn_ln_out(float x, float mean, float rstd, float w, float b)
{
	return dg_nn_ln_norm(x, mean, rstd) * w + b;
}

/* dg_nn_ln_dinp: one element of LayerNorm's input gradient,
 * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd. */
DG_HD float dg_nn_ln_dinp(float dnorm, float norm, float mean_dn, float mean_dn_norm, float rstd)
{
	return (dnorm - mean_dn - norm * mean_dn_norm) * rstd;
}

/* dg_nn_softmax_exp: an unnormalised softmax weight exp(x - max). */
DG_HD float dg_nn_softmax_exp(float x, float max) { return expf(x - max); }

/* dg_nn_att_scale: attention's score scale 1/sqrt(HS). */
DG_HD float dg_nn_att_scale(int64_t hs) { return 1.0f / sqrtf((float)hs); }

/* dg_nn_att_dscore: softmax backward then the score scale: the gradient of
 * one pre-softmax score from its weight a, datt = dout . v and
 * dot = sum_k a_k datt_k. */
DG_HD float dg_nn_att_dscore(float a, float datt, float dot, float scale) { return a * (datt - dot) * scale; }

/* dg_nn_xent_grad: (p - onehot) * dloss for one logit. */
DG_HD float dg_nn_xent_grad(float p, int is_target, float dloss)
{
	return (p - (is_target ? 1.0f : 0.0f)) * dloss;
}

/* dg_nn_first_key: the first key query q attends to (window <= 0: all). */
DG_HD int64_t dg_nn_first_key(int64_t q, int64_t window)
{
	return window > 0 && q - window + 1 > 0 ? q - window + 1 : 0;
}

/* dg_nn_att_span: the length of one saved softmax row, min(window, t), or t
 * without a window. att is [B,NH,T,span] and query q's weight for key k sits
 * at slot k - dg_nn_first_key(q, window), so the weights take T*W floats, not
 * T*T; with window >= t (or <= 0) the slot is k, the full T x T layout. */
DG_HD int64_t dg_nn_att_span(int64_t t, int64_t window) { return window > 0 && window < t ? window : t; }

#endif /* DG_NN_MATH_H */
