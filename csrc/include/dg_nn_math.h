/*
 * dg_nn_math.h — the element math of the nn kernels (deepgo.h, "nn ops"),
 * written once for the C loops (csrc/nn_*.c) and the CUDA kernels
 * (cuda/nn_*.cu). Under nvcc DG_HD is __host__ __device__ (dg_math.h).
 *
 * Every function is the exact sequence of float32 operations the C loops
 * did inline before this header existed (left to right, one rounding per
 * operation, no fused multiply-add: the C core is ISO C11, where GCC does
 * not contract, and nvcc builds with -fmad=false), so the two sides round
 * alike. The transcendentals are written here too (dg_nn_tanh for GELU,
 * dg_nn_exp for the softmax) rather than taken from glibc or CUDA's libm,
 * whose tanhf and expf differ by an ulp or two and cost a call per element
 * on the CPU; so everything here is bit-identical.
 */
#ifndef DG_NN_MATH_H
#define DG_NN_MATH_H

#include <math.h>

#include "dg_math.h"

#define DG_NN_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define DG_NN_GELU_CUBE 0.044715f

/* dg_nn_tanh: tanh(u) as Eigen's and XLA's float rational approximation,
 * u (alpha_1 + ... + alpha_13 u^12) / (beta_0 + ... + beta_6 u^6) on u
 * clamped to +-7.905 (where it reaches +-1), u itself below 4e-4. Within 7
 * ulp (4.1e-7 absolute) of tanh over every float, measured exhaustively
 * against the float64 tanh; glibc's tanhf is within 2.2 ulp. It is plain
 * arithmetic, so the C loops vectorise it (glibc's tanhf is a call per
 * element, most of a GELU's time) and CUDA rounds it alike: with no FMA and
 * an IEEE division, the GPU's GELU is the CPU's bit for bit. The ternaries
 * (not fminf) keep a NaN argument a NaN and compile to vector min/max. */
DG_HD float dg_nn_tanh(float u)
{
	const float c = 7.90531110763549805f;
	float x = u > c ? c : u;
	x = x < -c ? -c : x;
	float x2 = x * x;
	float p = -2.76076847742355e-16f;
	p = p * x2 + 2.00018790482477e-13f;
	p = p * x2 + -8.60467152213735e-11f;
	p = p * x2 + 5.12229709037114e-08f;
	p = p * x2 + 1.48572235717979e-05f;
	p = p * x2 + 6.37261928875436e-04f;
	p = p * x2 + 4.89352455891786e-03f;
	p = x * p;
	float q = 1.19825839466702e-06f;
	q = q * x2 + 1.18534705686654e-04f;
	q = q * x2 + 2.26843463243900e-03f;
	q = q * x2 + 4.89352518554385e-03f;
	float r = p / q;
	return fabsf(u) < 0.0004f ? u : r;
}

/* dg_nn_gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2). */
DG_HD float dg_nn_gelu(float x)
{
	float u = DG_NN_GELU_SCALE * (x + DG_NN_GELU_CUBE * x * x * x);
	return 0.5f * x * (1.0f + dg_nn_tanh(u));
}

/* dg_nn_gelu_grad: d/dx of dg_nn_gelu,
 * 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx. */
DG_HD float dg_nn_gelu_grad(float x)
{
	float u = DG_NN_GELU_SCALE * (x + DG_NN_GELU_CUBE * x * x * x);
	float th = dg_nn_tanh(u);
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

/* dg_nn_exp: e^x in float32 arithmetic, for the softmax weights. x is
 * split as n ln2 + r (n = x log2(e) rounded to nearest by adding 1.5 * 2^23,
 * r = x - n ln2 in two exact steps, ln2 as 0.693359375 - 2.12194440e-4,
 * the hi part 9 bits so n * hi is exact), e^r is Cephes's degree-7 minimax
 * polynomial 1 + r + r^2 (p5(r)) on |r| <= ln2/2, and 2^n is built in the
 * exponent bits. Within 1 ulp of exp wherever e^x is a normal float
 * (test_exp checks every 61st float; a sweep of every float measured 0.99
 * ulp); below -87.33, where e^x is under FLT_MIN, it is 0 (a softmax
 * weight under 1e-38 of the largest); above 88.72, +Inf; NaN stays NaN.
 * Plain arithmetic and selects, so the C loops vectorise it (glibc's expf is
 * a call per element, most of a softmax's time) and, with no FMA, CUDA
 * rounds it alike. */
DG_HD float dg_nn_exp(float x)
{
	const float lo = -87.3365402f, hi = 88.7228317f, magic = 12582912.0f; /* 1.5 * 2^23 */
	float c = x < lo ? lo : x;
	c = c > hi ? hi : c;
	float t = c * 1.44269504088896341f + magic;
	float n = t - magic;
	float r = c - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * (r * r) + r + 1.0f;
	/* t's bits are 0x4b400000 + n (n in [-126, 128]); 2^n is applied in
	 * two halves so that n = 128 (e^x near FLT_MAX) still builds */
	int32_t k = (int32_t)(dg_f32_bits(t) - 0x4b400000u), k1 = k / 2;
	float s1 = dg_bits_f32((uint32_t)(k1 + 127) << 23), s2 = dg_bits_f32((uint32_t)(k - k1 + 127) << 23);
	float e = p * s1 * s2;
	e = x < lo ? 0.0f : e;
	e = x > hi ? (float)INFINITY : e;
	return x != x ? x : e;
}

/* dg_nn_softmax_exp: an unnormalised softmax weight exp(x - max). */
DG_HD float dg_nn_softmax_exp(float x, float max) { return dg_nn_exp(x - max); }

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

/* The vocabulary-parallel cross-entropy (deepgo.h's dg_nn_vocab_xent_*)
 * keeps the arithmetic of the Go loops it replaced (package nn's first TP
 * cross-entropy), so that the CPU backend's losses and gradients kept
 * their bits: Go's built-in max for the row max, float32(math.Exp(
 * float64(x))) for the weights (not dg_nn_exp, whose bits differ), the
 * rest plain float32 arithmetic in the loops' order. */

/* dg_nn_vxent_max: Go's max(m, z) of two float32 as Go compiles it on
 * amd64, bit for bit: -min(-m, -z), where min(a, b) ORs the bits of
 * minss(minss(a, b), a) and minss(a, b), minss(a, b) being a < b ? a : b.
 * So +0 beats -0 and a NaN wins, its bits ORed with the other operand's;
 * a row's NaN thus depends on the order the row is taken in, which the C
 * loops keep (CUDA's lanes combine in another order, and a GPU's NaN is
 * canonical anyway). */
DG_HD float dg_nn_vxent_max(float m, float z)
{
	const uint32_t sign = 0x80000000u;
	float a = dg_bits_f32(dg_f32_bits(m) ^ sign), b = dg_bits_f32(dg_f32_bits(z) ^ sign);
	float t = a < b ? a : b;
	float u = t < a ? t : a;
	return dg_bits_f32((dg_f32_bits(u) | dg_f32_bits(t)) ^ sign);
}

/* dg_nn_vxent_exp: e^x rounded to float32 as Go's float32(math.Exp(
 * float64(x))) gives it on amd64: math.Exp's exp_amd64.s (Shibata's
 * method: x = k ln2 + r, ln2 in two parts; e^(r/16) - 1 by its Taylor
 * series to r^8/8!; squared back four times as y (y + 2); times 2^k) in
 * plain double arithmetic. Go fuses its multiply-adds with FMA where the
 * CPU has it, which moves the double by an ulp now and then; rounded to
 * float32 the FMA path, this one and glibc's exp agree on every float in
 * [-104, 89] (checked exhaustively on the one machine, 2.2e9 floats), and
 * outside it the float is 0 (x < -104) or +Inf (x > 89). NaN stays NaN.
 * k = x log2(e) rounded to nearest-even by adding 1.5 * 2^52, whose bits
 * then hold k, so the loop has no conversion. */
DG_HD float dg_nn_vxent_exp(float x)
{
	const double log2e = 1.4426950408889634073599246810018920, magic = 6755399441055744.0; /* 1.5 * 2^52 */
	const double ln2u = 0.69314718055966295651160180568695068359375;
	const double ln2l = 0.28235290563031577122588448175013436025525412068e-12;
	float c = x < -104.0f ? -104.0f : x;
	c = c > 89.0f ? 89.0f : c;
	double d = c;
	double t = d * log2e + magic;
	double k = t - magic;
	double r = d - k * ln2u;
	r = r - k * ln2l;
	r = r * 0.0625;
	double p = 2.4801587301587301587e-5;
	p = p * r + 1.9841269841269841270e-4;
	p = p * r + 1.3888888888888888889e-3;
	p = p * r + 8.3333333333333333333e-3;
	p = p * r + 4.1666666666666666667e-2;
	p = p * r + 1.6666666666666666667e-1;
	p = p * r + 0.5;
	p = p * r + 1.0;
	double y = r * p;
	y = y * (y + 2.0);
	y = y * (y + 2.0);
	y = y * (y + 2.0);
	y = y * (y + 2.0);
	y = y + 1.0;
	/* k in [-150, 129]: 2^k is a normal double, the product exact */
	uint64_t e2k = (dg_f64_bits(t) - dg_f64_bits(magic) + 1023u) << 52;
	float e = (float)(y * dg_bits_f64(e2k));
	e = x < -104.0f ? 0.0f : e;
	e = x > 89.0f ? (float)INFINITY : e;
	return x != x ? x : e;
}

/* dg_nn_vxent_grad: one logit's gradient from its weight w = e^(z - max):
 * (w * inv - onehot) * d, inv being 1 / the row's sum of weights over the
 * whole vocabulary and d the mean's scale. */
DG_HD float dg_nn_vxent_grad(float w, float inv, int is_target, float d)
{
	return (w * inv - (is_target ? 1.0f : 0.0f)) * d;
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
