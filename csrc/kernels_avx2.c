/*
 * kernels_avx2.c — AVX2 + F16C leaf loops, for CPUs without AVX-512.
 * Same bit rules as kernels_avx512.c; tails fall back to dg_math.h one
 * element at a time (AVX2 has no 16-bit masked stores).
 */
#include "dg_internal.h"

#if DG_HAVE_X86
#include <immintrin.h>

#include "dg_math.h"

#define T256 DG_TARGET_AVX2
#define AI static inline __attribute__((always_inline)) T256

/* 8 bf16 results as the low 16 bits of each 32-bit lane */
AI __m256i bf16_round(__m256 v)
{
	__m256i x = _mm256_castps_si256(v);
	__m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
	/* ax <= 0x7fffffff, so a signed compare is the unsigned one */
	__m256i nan = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x7f800000));
	__m256i hi = _mm256_srli_epi32(x, 16);
	__m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
	__m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
	return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

AI __m128i bf16_narrow(__m256 v)
{
	__m256i r = bf16_round(v);
	/* values fit in 16 bits, so the saturating pack is exact */
	return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

AI __m256 bf16_widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }

AI __m256 load8(dg_dtype t, const void *p)
{
	if (t == DG_F32)
		return _mm256_loadu_ps(p);
	__m128i h = _mm_loadu_si128((const __m128i *)p);
	return t == DG_F16 ? _mm256_cvtph_ps(h) : bf16_widen(h);
}

AI void store8(dg_dtype t, void *p, __m256 v)
{
	if (t == DG_F32)
		_mm256_storeu_ps(p, v);
	else if (t == DG_F16)
		_mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	else
		_mm_storeu_si128((__m128i *)p, bf16_narrow(v));
}

AI float load1(dg_dtype t, const void *p, int64_t i)
{
	if (t == DG_F32)
		return ((const float *)p)[i];
	uint16_t h = ((const uint16_t *)p)[i];
	return t == DG_F16 ? dg_f16_to_f32(h) : dg_bf16_to_f32(h);
}

AI void store1(dg_dtype t, void *p, int64_t i, float v)
{
	if (t == DG_F32)
		((float *)p)[i] = v;
	else
		((uint16_t *)p)[i] = t == DG_F16 ? dg_f32_to_f16(v) : dg_f32_to_bf16(v);
}

#define AT(p, t, i) ((char *)(p) + (size_t)(i) * ((t) == DG_F32 ? 4u : 2u))
#define CAT(p, t, i) ((const char *)(p) + (size_t)(i) * ((t) == DG_F32 ? 4u : 2u))

AI void cast_loop(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m256 a = load8(src, CAT(s, src, i)), b = load8(src, CAT(s, src, i + 8));
		__m256 c = load8(src, CAT(s, src, i + 16)), e = load8(src, CAT(s, src, i + 24));
		store8(dst, AT(d, dst, i), a);
		store8(dst, AT(d, dst, i + 8), b);
		store8(dst, AT(d, dst, i + 16), c);
		store8(dst, AT(d, dst, i + 24), e);
	}
	for (; i + 8 <= n; i += 8)
		store8(dst, AT(d, dst, i), load8(src, CAT(s, src, i)));
	for (; i < n; i++)
		store1(dst, d, i, load1(src, s, i));
}

T256 static void cast_avx2(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	if (src == DG_F32 && dst == DG_F16)
		cast_loop(DG_F32, DG_F16, s, d, n);
	else if (src == DG_F32 && dst == DG_BF16)
		cast_loop(DG_F32, DG_BF16, s, d, n);
	else if (src == DG_F16 && dst == DG_F32)
		cast_loop(DG_F16, DG_F32, s, d, n);
	else if (src == DG_BF16 && dst == DG_F32)
		cast_loop(DG_BF16, DG_F32, s, d, n);
	else if (src == DG_F16 && dst == DG_BF16)
		cast_loop(DG_F16, DG_BF16, s, d, n);
	else if (src == DG_BF16 && dst == DG_F16)
		cast_loop(DG_BF16, DG_F16, s, d, n);
}

AI void scale_loop(dg_dtype t, void *x, int64_t n, float alpha)
{
	__m256 a = _mm256_set1_ps(alpha);
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 u = load8(t, AT(x, t, i)), v = load8(t, AT(x, t, i + 8));
		store8(t, AT(x, t, i), _mm256_mul_ps(u, a));
		store8(t, AT(x, t, i + 8), _mm256_mul_ps(v, a));
	}
	for (; i < n; i++)
		store1(t, x, i, load1(t, x, i) * alpha);
}

T256 static void scale_avx2(dg_dtype t, void *x, int64_t n, float alpha)
{
	if (t == DG_F32)
		scale_loop(DG_F32, x, n, alpha);
	else if (t == DG_F16)
		scale_loop(DG_F16, x, n, alpha);
	else
		scale_loop(DG_BF16, x, n, alpha);
}

AI void axpy_loop(dg_dtype t, float alpha, const void *x, void *y, int64_t n)
{
	__m256 a = _mm256_set1_ps(alpha);
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 x0 = load8(t, CAT(x, t, i)), x1 = load8(t, CAT(x, t, i + 8));
		__m256 y0 = load8(t, AT(y, t, i)), y1 = load8(t, AT(y, t, i + 8));
		store8(t, AT(y, t, i), _mm256_add_ps(y0, _mm256_mul_ps(a, x0)));
		store8(t, AT(y, t, i + 8), _mm256_add_ps(y1, _mm256_mul_ps(a, x1)));
	}
	for (; i < n; i++)
		store1(t, y, i, dg_axpy_f32(alpha, load1(t, x, i), load1(t, y, i)));
}

T256 static void axpy_avx2(dg_dtype t, float alpha, const void *x, void *y, int64_t n)
{
	if (t == DG_F32)
		axpy_loop(DG_F32, alpha, x, y, n);
	else if (t == DG_F16)
		axpy_loop(DG_F16, alpha, x, y, n);
	else
		axpy_loop(DG_BF16, alpha, x, y, n);
}

/* Summation order (fixed for this ISA): 16-element steps, each 4-float
 * quarter into its own double accumulator (4 in all; squares exact, so FMA
 * equals multiply-then-add); the tail is summed serially into a separate
 * double; result ((a0+a1)+(a2+a3)) lanes as (l0+l1)+(l2+l3), plus the tail. */
AI void sq_add(__m256 v, __m256d *lo_acc, __m256d *hi_acc)
{
	__m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
	__m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
	*lo_acc = _mm256_fmadd_pd(lo, lo, *lo_acc);
	*hi_acc = _mm256_fmadd_pd(hi, hi, *hi_acc);
}

AI double sumsq_loop(dg_dtype t, const void *x, int64_t n)
{
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		sq_add(load8(t, CAT(x, t, i)), &a0, &a1);
		sq_add(load8(t, CAT(x, t, i + 8)), &a2, &a3);
	}
	double tail = 0;
	for (; i < n; i++) {
		double v = load1(t, x, i);
		tail += v * v;
	}
	__m256d s = _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3));
	double l[4];
	_mm256_storeu_pd(l, s);
	return ((l[0] + l[1]) + (l[2] + l[3])) + tail;
}

T256 static double sumsq_avx2(dg_dtype t, const void *x, int64_t n)
{
	if (t == DG_F32)
		return sumsq_loop(DG_F32, x, n);
	if (t == DG_F16)
		return sumsq_loop(DG_F16, x, n);
	return sumsq_loop(DG_BF16, x, n);
}

/* Running max of |bits|: magnitudes fit in the signed range, so signed
 * compares work on the result. */
T256 static int nonfinite_avx2(dg_dtype t, const void *x, int64_t n)
{
	const char *p = x;
	int64_t es = t == DG_F32 ? 4 : 2, bytes = n * es, i = 0;
	__m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
	if (t == DG_F32) {
		__m256i mag = _mm256_set1_epi32(0x7fffffff);
		for (; i + 128 <= bytes; i += 128) {
			m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i)), mag));
			m1 = _mm256_max_epu32(m1, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i + 32)), mag));
			m2 = _mm256_max_epu32(m2, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i + 64)), mag));
			m3 = _mm256_max_epu32(m3, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i + 96)), mag));
		}
		__m256i m = _mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3));
		int found = _mm256_movemask_epi8(_mm256_cmpgt_epi32(m, _mm256_set1_epi32(0x7f7fffff))) != 0;
		const uint32_t *u = x;
		uint32_t tm = 0;
		for (int64_t k = i / es; k < n; k++) {
			uint32_t a = u[k] & 0x7fffffffu;
			tm = a > tm ? a : tm;
		}
		return found | (tm >= 0x7f800000u);
	}
	__m256i mag = _mm256_set1_epi16(0x7fff);
	for (; i + 128 <= bytes; i += 128) {
		m0 = _mm256_max_epu16(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i)), mag));
		m1 = _mm256_max_epu16(m1, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i + 32)), mag));
		m2 = _mm256_max_epu16(m2, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i + 64)), mag));
		m3 = _mm256_max_epu16(m3, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i + 96)), mag));
	}
	__m256i m = _mm256_max_epu16(_mm256_max_epu16(m0, m1), _mm256_max_epu16(m2, m3));
	uint32_t inf = t == DG_F16 ? 0x7c00u : 0x7f80u;
	int found = _mm256_movemask_epi8(_mm256_cmpgt_epi16(m, _mm256_set1_epi16((short)(inf - 1)))) != 0;
	const uint16_t *u = x;
	uint32_t tm = 0;
	for (int64_t k = i / es; k < n; k++) {
		uint32_t a = u[k] & 0x7fffu;
		tm = a > tm ? a : tm;
	}
	return found | (tm >= inf);
}

/* see kernels_avx512.c red16 and kernels_scalar.c red_f32 */
AI __m256 red8(dg_redop op, __m256 acc, __m256 v)
{
	__m256 r = op == DG_SUM ? _mm256_add_ps(acc, v) : op == DG_MAX ? _mm256_max_ps(v, acc) : _mm256_min_ps(v, acc);
	__m256 quiet = _mm256_castsi256_ps(_mm256_set1_epi32(0x400000));
	r = _mm256_blendv_ps(r, _mm256_or_ps(v, quiet), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
	return _mm256_blendv_ps(r, _mm256_or_ps(acc, quiet), _mm256_cmp_ps(acc, acc, _CMP_UNORD_Q));
}

AI float red1(dg_redop op, float acc, float v)
{
	float r = op == DG_SUM ? acc + v : op == DG_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
	if (acc != acc)
		return dg_bits_f32(dg_f32_bits(acc) | 0x400000u);
	if (v != v)
		return dg_bits_f32(dg_f32_bits(v) | 0x400000u);
	return r;
}

/* 8 elements of the reduce, scaled when asked, stored to every dst after
 * all of the block's loads (a dst equal to a src is safe); halves are
 * narrowed once. The tail goes one element at a time, same order. */
AI void bcast_loop(dg_dtype t, dg_redop op, int scaled, const void *const *srcs, int nsrc, void *const *dsts,
		   int ndst, int64_t lo, int64_t hi, float scale)
{
	__m256 a = _mm256_set1_ps(scale);
	int64_t k = lo;
	for (; k + 8 <= hi; k += 8) {
		__m256 acc = load8(t, CAT(srcs[0], t, k));
		for (int j = 1; j < nsrc; j++)
			acc = red8(op, acc, load8(t, CAT(srcs[j], t, k)));
		if (t == DG_F32) {
			if (scaled)
				acc = _mm256_mul_ps(acc, a);
			for (int d = 0; d < ndst; d++)
				_mm256_storeu_ps((float *)AT(dsts[d], t, k), acc);
			continue;
		}
		__m128i h = t == DG_F16 ? _mm256_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
					: bf16_narrow(acc);
		if (scaled) {
			__m256 w = _mm256_mul_ps(t == DG_F16 ? _mm256_cvtph_ps(h) : bf16_widen(h), a);
			h = t == DG_F16 ? _mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
					: bf16_narrow(w);
		}
		for (int d = 0; d < ndst; d++)
			_mm_storeu_si128((__m128i *)AT(dsts[d], t, k), h);
	}
	for (; k < hi; k++) {
		float acc = load1(t, srcs[0], k);
		for (int j = 1; j < nsrc; j++)
			acc = red1(op, acc, load1(t, srcs[j], k));
		if (scaled) {
			if (t != DG_F32)
				acc = t == DG_F16 ? dg_f16_to_f32(dg_f32_to_f16(acc)) : dg_bf16_to_f32(dg_f32_to_bf16(acc));
			acc *= scale;
		}
		for (int d = 0; d < ndst; d++)
			store1(t, dsts[d], k, acc);
	}
}

T256 static void reduce_bcast_avx2(dg_dtype t, dg_redop op, const void *const *srcs, int nsrc, void *const *dsts,
				   int ndst, int64_t lo, int64_t hi, float scale)
{
	int scaled = scale != 1.0f;
#define BC_T(tt)                                                                                                    \
	do {                                                                                                        \
		if (op == DG_SUM)                                                                                   \
			bcast_loop(tt, DG_SUM, scaled, srcs, nsrc, dsts, ndst, lo, hi, scale);                     \
		else if (op == DG_MAX)                                                                              \
			bcast_loop(tt, DG_MAX, scaled, srcs, nsrc, dsts, ndst, lo, hi, scale);                     \
		else                                                                                                \
			bcast_loop(tt, DG_MIN, scaled, srcs, nsrc, dsts, ndst, lo, hi, scale);                     \
	} while (0)
	if (t == DG_F32)
		BC_T(DG_F32);
	else if (t == DG_F16)
		BC_T(DG_F16);
	else
		BC_T(DG_BF16);
#undef BC_T
}

const dg_kernels dg_kernels_avx2 = {
	.cast = cast_avx2,
	.scale = scale_avx2,
	.axpy = axpy_avx2,
	.sumsq_block = sumsq_avx2,
	.nonfinite = nonfinite_avx2,
	.reduce_bcast = reduce_bcast_avx2,
};

#endif /* DG_HAVE_X86 */
