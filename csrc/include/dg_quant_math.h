/*
 * dg_quant_math.h — the element math of ZeRO++ qwZ's weight quantization,
 * written once for the C loops (csrc/quant.c) and the CUDA kernels
 * (cuda/quant.cu): DeepSpeed 0.19.8's symmetric 8-bit quantizer
 * (ops/csrc/includes/quantization_utils.h, Params<Symmetric, 8>, as
 * CUDAQuantizer.quantize / dequantize call it).
 *
 * Per group of g elements:
 *   - each input is first rounded to float16 (DeepSpeed's kernel reads
 *     __half; its Python casts bf16 and fp32 weights to half first), so a
 *     bf16 value above 65504 becomes Inf;
 *   - absmax = the largest |x| of the group's half values (NaN skipped);
 *   - mult = 256 / (2 * absmax) in float32, or 1 when absmax is 0;
 *   - q = clamp(round_half_even(x * mult), -128, 127) (__float2int_rn;
 *     NaN gives 0), so +absmax maps to 127 and -absmax to -128;
 *   - the stored scale is 1 / mult (float32, one per group);
 *   - dequantization is float(q) * scale, rounded to float16 (the
 *     kernel's __half output), then converted to the model dtype (the
 *     Python's .to(dtype)): exact for float32, nearest even for bfloat16.
 * An Inf in a group makes mult 0 and the scale Inf, so the whole group
 * dequantizes to NaN, as DeepSpeed's does.
 *
 * Every step is one IEEE float32 operation in round-to-nearest-even (no
 * fused multiply-add: nvcc builds with -fmad=false), so C and CUDA agree
 * bit for bit.
 */
#ifndef DG_QUANT_MATH_H
#define DG_QUANT_MATH_H

#include <stdint.h>

#include "deepgo.h"
#include "dg_math.h"

/* dg_q8_half rounds a model-dtype element (F32, F16 or BF16 bits at p[i])
 * to float16 and widens it back: the value DeepSpeed's kernel quantizes. */
DG_HD float dg_q8_half(dg_dtype t, const void *p, int64_t i)
{
	switch (t) {
	case DG_F16:
		return dg_f16_to_f32(((const uint16_t *)p)[i]);
	case DG_BF16:
		return dg_f16_to_f32(dg_f32_to_f16(dg_bf16_to_f32(((const uint16_t *)p)[i])));
	default:
		return dg_f16_to_f32(dg_f32_to_f16(((const float *)p)[i]));
	}
}

/* dg_q8_absmax folds |v| into the running maximum m (NaN skipped). */
DG_HD float dg_q8_absmax(float m, float v)
{
	float a = v < 0.0f ? -v : v;
	return a > m ? a : m;
}

/* dg_q8_mult is the quantization multiplier of a group of absolute maximum
 * absmax (Params<Symmetric, 8>(max)). */
DG_HD float dg_q8_mult(float absmax) { return absmax == 0.0f ? 1.0f : 256.0f / (2.0f * absmax); }

/* dg_q8_round is __float2int_rn for the range that matters here: nearest,
 * ties to even; NaN gives 0; values beyond int range are clamped by the
 * caller's bounds anyway. */
DG_HD int32_t dg_q8_round(float v)
{
	if (!(v == v))
		return 0;
	if (v >= 2147483520.0f)
		return 2147483647;
	if (v <= -2147483648.0f)
		return -2147483647 - 1;
	int32_t t = (int32_t)v; /* toward zero */
	float r = v - (float)t; /* exact: |v| < 2^31 and t has v's leading bits */
	if (r > 0.5f || (r == 0.5f && (t & 1)))
		t++;
	else if (r < -0.5f || (r == -0.5f && (t & 1)))
		t--;
	return t;
}

/* dg_q8_quantize quantizes one half-rounded value with multiplier mult. */
DG_HD int8_t dg_q8_quantize(float h, float mult)
{
	int32_t q = dg_q8_round(h * mult);
	q = q < -128 ? -128 : q;
	q = q > 127 ? 127 : q;
	return (int8_t)q;
}

/* dg_q8_store writes the dequantized value of q under scale into y[i] in
 * dtype t: through float16 as DeepSpeed's kernel, then the model dtype. */
DG_HD void dg_q8_store(dg_dtype t, void *y, int64_t i, int8_t q, float scale)
{
	uint16_t h = dg_f32_to_f16((float)q * scale);
	switch (t) {
	case DG_F16:
		((uint16_t *)y)[i] = h;
		break;
	case DG_BF16:
		((uint16_t *)y)[i] = dg_f32_to_bf16(dg_f16_to_f32(h));
		break;
	default:
		((float *)y)[i] = dg_f16_to_f32(h);
		break;
	}
}

#endif
