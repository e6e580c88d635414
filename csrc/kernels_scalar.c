/*
 * kernels_scalar.c — the portable leaf loops, written directly on dg_math.h.
 * They are the oracle the SIMD tables are tested against, and the path every
 * non-x86 build takes.
 */
#include <string.h>

#include "dg_internal.h"
#include "dg_math.h"

static void cast_scalar(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	/* the common pairs get their own loops so the dtype switch is not per element */
	if (src == DG_F32 && dst == DG_F16) {
		const float *x = s;
		uint16_t *y = d;
		for (int64_t i = 0; i < n; i++)
			y[i] = dg_f32_to_f16(x[i]);
	} else if (src == DG_F32 && dst == DG_BF16) {
		const float *x = s;
		uint16_t *y = d;
		for (int64_t i = 0; i < n; i++)
			y[i] = dg_f32_to_bf16(x[i]);
	} else if (src == DG_F16 && dst == DG_F32) {
		const uint16_t *x = s;
		float *y = d;
		for (int64_t i = 0; i < n; i++)
			y[i] = dg_f16_to_f32(x[i]);
	} else if (src == DG_BF16 && dst == DG_F32) {
		const uint16_t *x = s;
		float *y = d;
		for (int64_t i = 0; i < n; i++)
			y[i] = dg_bf16_to_f32(x[i]);
	} else {
		for (int64_t i = 0; i < n; i++)
			dg_store_f(dst, d, i, dg_load_f(src, s, i));
	}
}

static void scale_scalar(dg_dtype t, void *x, int64_t n, float alpha)
{
	for (int64_t i = 0; i < n; i++)
		dg_store_f(t, x, i, dg_load_f(t, x, i) * alpha);
}

static void axpy_scalar(dg_dtype t, float alpha, const void *x, void *y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dg_store_f(t, y, i, dg_axpy_f32(alpha, dg_load_f(t, x, i), dg_load_f(t, y, i)));
}

/* Four interleaved accumulators (element i goes to acc[i % 4]) break the add
 * dependency chain; the squares are exact in double, so only the adds round. */
static double sumsq_scalar(dg_dtype t, const void *x, int64_t n)
{
	double acc[4] = {0, 0, 0, 0};
	int64_t i = 0;
	for (; i + 4 <= n; i += 4) {
		for (int j = 0; j < 4; j++) {
			double v = dg_load_f(t, x, i + j);
			acc[j] += v * v;
		}
	}
	for (; i < n; i++) {
		double v = dg_load_f(t, x, i);
		acc[i & 3] += v * v;
	}
	return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* max of |bits| compared once at the end: no per-element branch */
static int nonfinite_scalar(dg_dtype t, const void *x, int64_t n)
{
	if (t == DG_F32) {
		const uint32_t *u = x;
		uint32_t m = 0;
		for (int64_t i = 0; i < n; i++) {
			uint32_t a = u[i] & 0x7fffffffu;
			m = a > m ? a : m;
		}
		return m >= 0x7f800000u;
	}
	const uint16_t *u = x;
	uint32_t m = 0;
	for (int64_t i = 0; i < n; i++) {
		uint32_t a = u[i] & 0x7fffu;
		m = a > m ? a : m;
	}
	return m >= (t == DG_F16 ? 0x7c00u : 0x7f80u);
}

/* red_f32 combines acc with the next source in list order. A NaN input
 * decides the result explicitly: the first NaN in list order, quieted. Left
 * to the FPU, which NaN wins depends on operand order, and compilers swap
 * the operands of a commutative add freely. Ties of MAX/MIN keep acc. */
static inline float red_f32(dg_redop op, float acc, float v)
{
	float r;
	switch (op) {
	case DG_MAX: r = v > acc ? v : acc; break;
	case DG_MIN: r = v < acc ? v : acc; break;
	default: r = acc + v; break;
	}
	if (acc != acc)
		return dg_bits_f32(dg_f32_bits(acc) | 0x400000u);
	if (v != v)
		return dg_bits_f32(dg_f32_bits(v) | 0x400000u);
	return r;
}

/* v rounded to dtype t and widened back */
static inline float round_t(dg_dtype t, float v)
{
	switch (t) {
	case DG_F16: return dg_f16_to_f32(dg_f32_to_f16(v));
	case DG_BF16: return dg_bf16_to_f32(dg_f32_to_bf16(v));
	default: return v;
	}
}

/* the list-order reduce of each element (red_f32), then (scale != 1)
 * scale_scalar's rounding, stored to every dst after all of the element's
 * loads */
static void reduce_bcast_scalar(dg_dtype t, dg_redop op, const void *const *srcs, int nsrc, void *const *dsts,
				int ndst, int64_t lo, int64_t hi, float scale)
{
	int scaled = scale != 1.0f;
	for (int64_t k = lo; k < hi; k++) {
		float acc = dg_load_f(t, srcs[0], k);
		for (int j = 1; j < nsrc; j++)
			acc = red_f32(op, acc, dg_load_f(t, srcs[j], k));
		if (scaled)
			acc = round_t(t, acc) * scale;
		for (int d = 0; d < ndst; d++)
			dg_store_f(t, dsts[d], k, acc);
	}
}

const dg_kernels dg_kernels_scalar = {
	.cast = cast_scalar,
	.scale = scale_scalar,
	.axpy = axpy_scalar,
	.sumsq_block = sumsq_scalar,
	.nonfinite = nonfinite_scalar,
	.reduce_bcast = reduce_bcast_scalar,
};
