/*
 * kernels_avx512.c — AVX-512 (F, BW, VL, DQ) + F16C leaf loops.
 *
 * cgo compiles every file with the same flags and no -march, so each function
 * carries a target attribute and is only called after dg_cpu_best_isa saw the
 * features. Element results are bit-identical to dg_math.h:
 *   - f16: VCVTPS2PH/VCVTPH2PS with an immediate round-to-nearest-even; they
 *     keep subnormals and quiet NaNs exactly as dg_f32_to_f16/dg_f16_to_f32
 *     (checked exhaustively by tests/test_cast.c);
 *   - bf16: integer ops implementing dg_f32_to_bf16's rule; with AVX512_BF16
 *     (dg_kernels_avx512bf16) VCVTNE2PS2BF16 for vectors without a subnormal,
 *     which it would flush (every float32 pattern checked by tests/test_cast.c);
 *   - axpy: a separate multiply and add, never FMA.
 * Tails use masked loads and stores so short tensors stay on the vector path.
 */
#include <string.h>

#include "dg_internal.h"

#if DG_HAVE_X86
#include <immintrin.h>

#include "dg_math.h"

#define T512 DG_TARGET_AVX512
#define AI static inline __attribute__((always_inline)) T512

AI __mmask16 tail_mask(int64_t r) { return (__mmask16)((1u << r) - 1u); }

/* DG_PF and DG_PF_FAR: dg_internal.h */

/* prefetch the lines DG_PF and DG_PF_FAR bytes past the `bytes` bytes at p,
 * when on (the loop's dg_stream_prefetch(), read once before it) */
AI void pf_ahead(int on, const void *p, size_t bytes)
{
	if (!on)
		return;
	for (size_t o = 0; o < bytes; o += 64) {
		_mm_prefetch((const char *)p + DG_PF + o, _MM_HINT_T0);
		_mm_prefetch((const char *)p + DG_PF_FAR + o, _MM_HINT_T2);
	}
}

/* The sum of squares of halves prefetches with PREFETCHNTA instead (into L1,
 * not L2): at 64 MiB it then reaches its read roof (0.96-1.0 on 1 and 2
 * threads against ~0.8 with T0 at any distance from 1 to 8 KiB). The other
 * loops lose a third or more with NTA, so they keep T0. It adds the far T2
 * hint: from DRAM (256 MiB) the near hint alone kept too few lines in flight
 * for a loop of 18 vector uops a line (0.73-0.79 of the roof on 1 and 2
 * threads; with the far hint 0.84-0.89; bench-kernels, 4 interleaved pairs).
 * An input the L3 holds (64 MiB here) on 2 threads loses ~0.07 to the extra
 * hint; gradients to be normed are rarely that small. */
#ifndef DG_PFN
#define DG_PFN 4096
#endif
/* the line DG_PFN bytes past p with PREFETCHNTA, and DG_PF_FAR past it with T2 */
AI void pf_ahead_nta(const void *p)
{
	_mm_prefetch((const char *)p + DG_PFN, _MM_HINT_NTA);
	_mm_prefetch((const char *)p + DG_PF_FAR, _MM_HINT_T2);
}

AI __m256i bf16_narrow(__m512 v)
{
	__m512i x = _mm512_castps_si512(v);
	__m512i ax = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
	__mmask16 nan = _mm512_cmpgt_epu32_mask(ax, _mm512_set1_epi32(0x7f800000));
	__m512i hi = _mm512_srli_epi32(x, 16);
	__m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
	__m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
	r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
	return _mm512_cvtepi32_epi16(r);
}

AI __m512 bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

/* 16 elements of dtype t at p, widened to float32 */
AI __m512 load16(dg_dtype t, const void *p)
{
	if (t == DG_F32)
		return _mm512_loadu_ps(p);
	__m256i h = _mm256_loadu_si256((const __m256i *)p);
	return t == DG_F16 ? _mm512_cvtph_ps(h) : bf16_widen(h);
}

AI __m512 load16m(dg_dtype t, const void *p, __mmask16 m)
{
	if (t == DG_F32)
		return _mm512_maskz_loadu_ps(m, p);
	__m256i h = _mm256_maskz_loadu_epi16(m, p);
	return t == DG_F16 ? _mm512_cvtph_ps(h) : bf16_widen(h);
}

AI __m256i narrow16(dg_dtype t, __m512 v)
{
	return t == DG_F16 ? _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) : bf16_narrow(v);
}

AI void store16(dg_dtype t, void *p, __m512 v)
{
	if (t == DG_F32)
		_mm512_storeu_ps(p, v);
	else
		_mm256_storeu_si256((__m256i *)p, narrow16(t, v));
}

AI void store16m(dg_dtype t, void *p, __mmask16 m, __m512 v)
{
	if (t == DG_F32)
		_mm512_mask_storeu_ps(p, m, v);
	else
		_mm256_mask_storeu_epi16(p, m, narrow16(t, v));
}

#define AT(p, t, i) ((char *)(p) + (size_t)(i) * ((t) == DG_F32 ? 4u : 2u))
#define CAT(p, t, i) ((const char *)(p) + (size_t)(i) * ((t) == DG_F32 ? 4u : 2u))

AI void cast_loop(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	const int pf = dg_stream_prefetch();
	int64_t i = 0;
	for (; i + 64 <= n; i += 64) {
		pf_ahead(pf, CAT(s, src, i), src == DG_F32 ? 256 : 128);
		__m512 a = load16(src, CAT(s, src, i)), b = load16(src, CAT(s, src, i + 16));
		__m512 c = load16(src, CAT(s, src, i + 32)), e = load16(src, CAT(s, src, i + 48));
		store16(dst, AT(d, dst, i), a);
		store16(dst, AT(d, dst, i + 16), b);
		store16(dst, AT(d, dst, i + 32), c);
		store16(dst, AT(d, dst, i + 48), e);
	}
	for (; i + 16 <= n; i += 16)
		store16(dst, AT(d, dst, i), load16(src, CAT(s, src, i)));
	if (i < n) {
		__mmask16 m = tail_mask(n - i);
		store16m(dst, AT(d, dst, i), m, load16m(src, CAT(s, src, i), m));
	}
}

/* cast_stream_loop is cast_loop with non-temporal stores. The head up to
 * the first 64-byte aligned destination element goes through the scalar
 * oracle (same bits); the body stores whole aligned vectors; the tail uses
 * the masked path. */
AI void store16_nt(dg_dtype t, void *p, __m512 v)
{
	if (t == DG_F32)
		_mm512_stream_ps(p, v);
	else
		_mm256_stream_si256((__m256i *)p, narrow16(t, v));
}

/* casts the elements before the first 64-byte aligned destination element
 * with the scalar oracle and returns how many that was */
AI int64_t cast_stream_head(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	size_t es = dst == DG_F32 ? 4u : 2u;
	int64_t head = (int64_t)(((64u - ((uintptr_t)d & 63u)) & 63u) / es);
	if ((uintptr_t)d % es != 0 || head > n)
		head = n; /* cannot align: all of it the ordinary way */
	if (head > 0)
		dg_kernels_scalar.cast(src, dst, s, d, head);
	return head;
}

AI void cast_stream_loop(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	const int pf = dg_stream_prefetch();
	int64_t i = cast_stream_head(src, dst, s, d, n);
	for (; i + 64 <= n; i += 64) {
		pf_ahead(pf, CAT(s, src, i), src == DG_F32 ? 256 : 128);
		__m512 a = load16(src, CAT(s, src, i)), b = load16(src, CAT(s, src, i + 16));
		__m512 c = load16(src, CAT(s, src, i + 32)), e = load16(src, CAT(s, src, i + 48));
		store16_nt(dst, AT(d, dst, i), a);
		store16_nt(dst, AT(d, dst, i + 16), b);
		store16_nt(dst, AT(d, dst, i + 32), c);
		store16_nt(dst, AT(d, dst, i + 48), e);
	}
	_mm_sfence();
	if (i < n)
		cast_loop(src, dst, CAT(s, src, i), AT(d, dst, i), n - i);
}

T512 static void cast_stream_avx512(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	if (src == DG_F32 && dst == DG_F16)
		cast_stream_loop(DG_F32, DG_F16, s, d, n);
	else if (src == DG_F32 && dst == DG_BF16)
		cast_stream_loop(DG_F32, DG_BF16, s, d, n);
	else if (src == DG_F16 && dst == DG_F32)
		cast_stream_loop(DG_F16, DG_F32, s, d, n);
	else if (src == DG_BF16 && dst == DG_F32)
		cast_stream_loop(DG_BF16, DG_F32, s, d, n);
	else if (src == DG_F16)
		cast_stream_loop(DG_F16, DG_BF16, s, d, n);
	else
		cast_stream_loop(DG_BF16, DG_F16, s, d, n);
}

/* copy_stream_avx512 is memcpy with non-temporal stores: an ordinary head
 * up to a 64-byte aligned destination, 256-byte streamed steps, an ordinary
 * tail. */
T512 static void copy_stream_avx512(void *d, const void *s, int64_t bytes)
{
	char *dp = d;
	const char *sp = s;
	int64_t head = (int64_t)((64u - ((uintptr_t)dp & 63u)) & 63u);
	if (head > bytes)
		head = bytes;
	memcpy(dp, sp, (size_t)head);
	int64_t i = head;
	for (; i + 256 <= bytes; i += 256) {
		__m512i a = _mm512_loadu_si512(sp + i), b = _mm512_loadu_si512(sp + i + 64);
		__m512i c = _mm512_loadu_si512(sp + i + 128), e = _mm512_loadu_si512(sp + i + 192);
		_mm512_stream_si512((__m512i *)(dp + i), a);
		_mm512_stream_si512((__m512i *)(dp + i + 64), b);
		_mm512_stream_si512((__m512i *)(dp + i + 128), c);
		_mm512_stream_si512((__m512i *)(dp + i + 192), e);
	}
	_mm_sfence();
	memcpy(dp + i, sp + i, (size_t)(bytes - i));
}

T512 static void cast_avx512(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	/* constant arguments let each call inline into a loop with no dtype tests */
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
	__m512 a = _mm512_set1_ps(alpha);
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512 u = load16(t, AT(x, t, i)), v = load16(t, AT(x, t, i + 16));
		store16(t, AT(x, t, i), _mm512_mul_ps(u, a));
		store16(t, AT(x, t, i + 16), _mm512_mul_ps(v, a));
	}
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
		store16m(t, AT(x, t, i), m, _mm512_mul_ps(load16m(t, AT(x, t, i), m), a));
	}
}

T512 static void scale_avx512(dg_dtype t, void *x, int64_t n, float alpha)
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
	__m512 a = _mm512_set1_ps(alpha);
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512 x0 = load16(t, CAT(x, t, i)), x1 = load16(t, CAT(x, t, i + 16));
		__m512 y0 = load16(t, AT(y, t, i)), y1 = load16(t, AT(y, t, i + 16));
		store16(t, AT(y, t, i), _mm512_add_ps(y0, _mm512_mul_ps(a, x0)));
		store16(t, AT(y, t, i + 16), _mm512_add_ps(y1, _mm512_mul_ps(a, x1)));
	}
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
		__m512 x0 = load16m(t, CAT(x, t, i), m), y0 = load16m(t, AT(y, t, i), m);
		store16m(t, AT(y, t, i), m, _mm512_add_ps(y0, _mm512_mul_ps(a, x0)));
	}
}

T512 static void axpy_avx512(dg_dtype t, float alpha, const void *x, void *y, int64_t n)
{
	if (t == DG_F32)
		axpy_loop(DG_F32, alpha, x, y, n);
	else if (t == DG_F16)
		axpy_loop(DG_F16, alpha, x, y, n);
	else
		axpy_loop(DG_BF16, alpha, x, y, n);
}

/* Summation order of float32 (fixed for this ISA; halves: sumsq_f16_loop and
 * sumsq_bf16_loop below): 32-element steps; the low and high
 * 8 floats of each 16 go to their own double accumulator (4 in all), squares
 * are exact in double so FMA equals multiply-then-add here; the masked tail
 * feeds accumulators 0 and 1; then (a0+a1)+(a2+a3) and a fixed lane tree. */
AI __m512d sq_add(__m512 v, __m512d acc_lo, __m512d *acc_hi)
{
	__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
	__m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
	*acc_hi = _mm512_fmadd_pd(hi, hi, *acc_hi);
	return _mm512_fmadd_pd(lo, lo, acc_lo);
}

AI double sumsq_loop(dg_dtype t, const void *x, int64_t n)
{
	const int pf = dg_stream_prefetch();
	__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		pf_ahead(pf, CAT(x, t, i), t == DG_F32 ? 128 : 64);
		a0 = sq_add(load16(t, CAT(x, t, i)), a0, &a1);
		a2 = sq_add(load16(t, CAT(x, t, i + 16)), a2, &a3);
	}
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
		a0 = sq_add(load16m(t, CAT(x, t, i), m), a0, &a1);
	}
	return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}

/* Float16 without conversion instructions (the converters are the
 * bottleneck: half->float->double is three of them per 16 elements; bfloat16
 * needs none, see sumsq_bf16_loop). A 512-bit load holds four halves per
 * 64-bit lane; each is shifted so its exponent's low bit lands on the
 * double's, masked (sign dropped), and the constant 992 ORed into the
 * double's exponent above the half's five bits: one ternary-logic op makes
 * the double exactly |x| * 2^-16. The loop adds the (exact) scaled squares
 * x^2 * 2^-32 with FMAs and scales the sum back by 2^32 at the end: every
 * term (at least 2^-80) and partial sum stays a normal double, so each
 * rounding is the unscaled one times a power of two, and the bits are those
 * of summing x^2 itself. A half with a zero exponent (zero or subnormal)
 * would get the bias too; a vector holding one leaves the OR path for the
 * rest of its DG_F16_CHUNK, where the masked bits become a double of
 * |x| * 2^-1008 and one multiply by 2^992 gives the same |x| * 2^-16 (zero
 * stays zero). Per 32 halves the OR path takes 14 port-0/5 uops, the
 * multiply path 19 (bench-kernels, 64 MiB of random halves, 1 thread: ~0.66
 * -> ~0.85 of the read-and-sum roof); two vectors share one zero-exponent
 * branch (KORTEST ORs their masks: 13.5 uops, ~2% in a C harness); data
 * with scattered zeros runs the multiply path after one mispredicted exit
 * per chunk. Order (fixed for this ISA): the half at position q (0..3) of
 * each lane goes to accumulator q; a short tail is a zero-padded masked
 * load; then (a0+a1)+(a2+a3) and a fixed lane tree. Both paths map Inf/NaN
 * to finite values: |Inf| becomes 2^16, NaN more, every finite half less, so
 * a sum at least that square (sums of non-negative terms only grow) may hold
 * one; nonfinite then decides and such a block is summed again by
 * sumsq_loop, whose double arithmetic gives the Inf or NaN. That costs
 * nothing per element, unlike a running max of |bits|. */
static int nonfinite_avx512(dg_dtype t, const void *x, int64_t n);

/* the 32 halves at p, or the first r of them zero-padded when r < 32 */
AI __m512i load32h(const char *p, int64_t r)
{
	return r >= 32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16((__mmask32)((1ull << r) - 1), p);
}

/* The same |half| as the shift trick gives for position q (0..3) of each
 * 64-bit lane, for a vector holding a subnormal half: the trick makes such
 * a half a subnormal double, and the multiply that restores it takes a
 * microcode assist (~70x slower with one half in 7 subnormal). Here those
 * lanes are zeroed before the multiply and get mantissa * ulp instead, an
 * exact integer conversion times a power of two (2^-40: one ulp, scaled as
 * above): the same doubles, so the same sums. */
AI __m512d half_sub_exact(__m512i v, int q, int sh, __m512i keep, __m512d up, __m512i lim, __m512d tiny)
{
	__m512i bits = _mm512_and_si512(_mm512_srli_epi64(v, (unsigned)(16 * q)), _mm512_set1_epi64(0x7fff));
	__mmask8 sub = _mm512_cmp_epu64_mask(_mm512_sub_epi64(bits, _mm512_set1_epi64(1)), lim, _MM_CMPINT_LT);
	__m512i w = q * 16 <= sh ? _mm512_slli_epi64(v, (unsigned)(sh - 16 * q)) : _mm512_srli_epi64(v, (unsigned)(16 * q - sh));
	w = _mm512_mask_mov_epi64(_mm512_and_si512(w, keep), sub, _mm512_setzero_si512());
	__m512d y = _mm512_mul_pd(_mm512_castsi512_pd(w), up);
	return _mm512_mask_mul_pd(y, sub, _mm512_cvtepi64_pd(bits), tiny);
}

/* Halves a vector is scanned in before a fallback to the multiply path (see
 * sumsq_f16_loop) returns to the OR path: one mispredicted exit per chunk
 * that holds a zero exponent. */
#define DG_F16_CHUNK 2048

/* the OR path's squares of the 32 halves in v, none with a zero exponent,
 * added to the four accumulators (see sumsq_f16_loop) */
AI void f16_or_add(__m512i v, __m512d *a0, __m512d *a1, __m512d *a2, __m512d *a3)
{
	const int sh = 42; /* float16's exponent LSB -> double's bit 52 */
	const __m512i keep = _mm512_set1_epi64((int64_t)0x7fff << sh);
	const __m512i bias = _mm512_set1_epi64((int64_t)992 << 52);
	/* 0xEA: (shifted & keep) | bias */
	__m512d y0 = _mm512_castsi512_pd(_mm512_ternarylogic_epi64(_mm512_slli_epi64(v, sh), keep, bias, 0xEA));
	__m512d y1 = _mm512_castsi512_pd(_mm512_ternarylogic_epi64(_mm512_slli_epi64(v, sh - 16), keep, bias, 0xEA));
	__m512d y2 = _mm512_castsi512_pd(_mm512_ternarylogic_epi64(_mm512_slli_epi64(v, sh - 32), keep, bias, 0xEA));
	__m512d y3 = _mm512_castsi512_pd(_mm512_ternarylogic_epi64(_mm512_srli_epi64(v, 48 - sh), keep, bias, 0xEA));
	*a0 = _mm512_fmadd_pd(y0, y0, *a0);
	*a1 = _mm512_fmadd_pd(y1, y1, *a1);
	*a2 = _mm512_fmadd_pd(y2, y2, *a2);
	*a3 = _mm512_fmadd_pd(y3, y3, *a3);
}

AI double sumsq_f16_loop(const void *x, int64_t n)
{
	const int sh = 42; /* float16's exponent LSB -> double's bit 52 */
	const __m512d up = _mm512_set1_pd(0x1p992);
	const __m512i keep = _mm512_set1_epi64((int64_t)0x7fff << sh);
	const __m512i expo = _mm512_set1_epi16(0x7c00);
	const __m512i mant = _mm512_set1_epi16(0x03ff);
	const __m512i lim = _mm512_set1_epi64(0x03ff); /* largest subnormal's bits */
	const __m512d tiny = _mm512_set1_pd(0x1p-40); /* one subnormal ulp, scaled */
	const char *p = x;
	__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	for (int64_t i = 0; i < n;) {
		const int64_t end = n - i > DG_F16_CHUNK ? i + DG_F16_CHUNK : n;
		/* no zero exponent: shift, OR the bias in; two vectors a step
		 * share one branch (KORTEST ORs their masks) */
		for (; i + 64 <= end; i += 64) {
			pf_ahead_nta(p + 2 * i);
			pf_ahead_nta(p + 2 * i + 64);
			__m512i v = _mm512_loadu_si512(p + 2 * i), w = _mm512_loadu_si512(p + 2 * i + 64);
			if (__builtin_expect(!_kortestz_mask32_u8(_mm512_testn_epi16_mask(v, expo), _mm512_testn_epi16_mask(w, expo)), 0))
				break; /* the loop below finds which */
			f16_or_add(v, &a0, &a1, &a2, &a3);
			f16_or_add(w, &a0, &a1, &a2, &a3);
		}
		for (; i < end; i += 32) {
			pf_ahead_nta(p + 2 * i);
			__m512i v = load32h(p + 2 * i, n - i);
			if (__builtin_expect(_mm512_testn_epi16_mask(v, expo) != 0, 0))
				break;
			f16_or_add(v, &a0, &a1, &a2, &a3);
		}
		for (; i < end; i += 32) { /* the rest of the chunk: shift, mask, multiply */
			pf_ahead_nta(p + 2 * i);
			__m512i v = load32h(p + 2 * i, n - i);
			__m512d y0, y1, y2, y3;
			if (__builtin_expect(_mm512_mask_test_epi16_mask(_mm512_testn_epi16_mask(v, expo), v, mant) != 0, 0)) {
				y0 = half_sub_exact(v, 0, sh, keep, up, lim, tiny);
				y1 = half_sub_exact(v, 1, sh, keep, up, lim, tiny);
				y2 = half_sub_exact(v, 2, sh, keep, up, lim, tiny);
				y3 = half_sub_exact(v, 3, sh, keep, up, lim, tiny);
			} else {
				y0 = _mm512_mul_pd(_mm512_castsi512_pd(_mm512_and_si512(_mm512_slli_epi64(v, sh), keep)), up);
				y1 = _mm512_mul_pd(_mm512_castsi512_pd(_mm512_and_si512(_mm512_slli_epi64(v, sh - 16), keep)), up);
				y2 = _mm512_mul_pd(_mm512_castsi512_pd(_mm512_and_si512(_mm512_slli_epi64(v, sh - 32), keep)), up);
				y3 = _mm512_mul_pd(_mm512_castsi512_pd(_mm512_and_si512(_mm512_srli_epi64(v, 48 - sh), keep)), up);
			}
			a0 = _mm512_fmadd_pd(y0, y0, a0);
			a1 = _mm512_fmadd_pd(y1, y1, a1);
			a2 = _mm512_fmadd_pd(y2, y2, a2);
			a3 = _mm512_fmadd_pd(y3, y3, a3);
		}
	}
	double sum = 0x1p32 * _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
	if (sum >= 0x1p32 && nonfinite_avx512(DG_F16, x, n))
		return sumsq_loop(DG_F16, x, n);
	return sum;
}

/* bfloat16 is the top half of a float32: a bfloat16 stored into the upper
 * half of a zeroed 32-bit slot is an exact float32, and VCVTPS2PD an exact
 * double (subnormals too; Inf and NaN square to Inf and NaN). Two masked
 * stores per 32 elements build those float32s in a ring in L1 (the even
 * elements stored 2 bytes up, the odd ones where they already sit in their
 * 32-bit lanes; the low halves are never written and stay zero), so no shift
 * or mask runs on ports 0 and 5: 12 vector uops there per 32 elements (4x
 * VCVTPS2PD from memory at 2, 4 FMAs) against 14. The loop converts the slot
 * it filled DG_BF16_LAG vectors earlier, then refills it. A masked store
 * does not forward to a load (read back at once it waits ~30 cycles), and
 * with the lag the arithmetic never waits on the line just requested: a line
 * the L3 is slow to deliver no longer stalls the conversions queued behind
 * it, which the out-of-order window alone did not hide (bench-kernels, 64
 * MiB, 1 thread: 0.82-0.86 -> 0.85-0.98 of the read-and-sum roof; lags of 8
 * and 16 measured in a C harness, 16 ahead). The same float32s, conversions
 * and FMAs in the same order as converting each vector at once: the same
 * bits (a NaN sum may be another NaN, sign and payload, as the final adds'
 * operand order is the compiler's; tests/test_reduce.c pins the rest). Order
 * (fixed for this ISA): of each 32 elements, the even ones 0..14 go to
 * accumulator 0, even 16..30 to 1, odd 1..15 to 2, odd 17..31 to 3; a short
 * tail is a zero-padded masked load; then (a0+a1)+(a2+a3) and a fixed lane
 * tree. The float16 loop above has no store to wait on and gained nothing
 * from the same ring. */
#define DG_BF16_LAG 16
_Static_assert((DG_BF16_LAG & (DG_BF16_LAG - 1)) == 0, "the ring wraps by masking");

/* the float32s of 32 bfloat16s into a 128-byte slot whose low halves are zero */
AI void bf16_slot_fill(char *slot, __m512i v)
{
	_mm512_mask_storeu_epi16(slot + 2, (__mmask32)0x55555555u, v);
	_mm512_mask_storeu_epi16(slot + 64, (__mmask32)0xAAAAAAAAu, v);
}

/* adds the squares of the 32 float32s in a slot */
AI void bf16_slot_sum(const char *slot, __m512d *a0, __m512d *a1, __m512d *a2, __m512d *a3)
{
	__m512d y0 = _mm512_cvtps_pd(_mm256_load_ps((const float *)slot));
	__m512d y1 = _mm512_cvtps_pd(_mm256_load_ps((const float *)(slot + 32)));
	__m512d y2 = _mm512_cvtps_pd(_mm256_load_ps((const float *)(slot + 64)));
	__m512d y3 = _mm512_cvtps_pd(_mm256_load_ps((const float *)(slot + 96)));
	*a0 = _mm512_fmadd_pd(y0, y0, *a0);
	*a1 = _mm512_fmadd_pd(y1, y1, *a1);
	*a2 = _mm512_fmadd_pd(y2, y2, *a2);
	*a3 = _mm512_fmadd_pd(y3, y3, *a3);
}

AI double sumsq_bf16_loop(const void *x, int64_t n)
{
	const char *p = x;
	const int64_t m = (n + 31) / 32; /* vectors, the last one maybe partial */
	const int64_t lag = m < DG_BF16_LAG ? m : DG_BF16_LAG;
	char ring[DG_BF16_LAG * 128] __attribute__((aligned(64)));
	memset(ring, 0, (size_t)lag * 128);
	__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	int64_t j = 0, off = 0;
	for (; j < lag; j++) {
		pf_ahead_nta(p + 64 * j);
		bf16_slot_fill(ring + 128 * j, load32h(p + 64 * j, n - 32 * j));
	}
	for (; j < m; j++) {
		pf_ahead_nta(p + 64 * j);
		/* keeps the compiler from folding the ring away */
		__asm__ volatile("" ::: "memory");
		bf16_slot_sum(ring + off, &a0, &a1, &a2, &a3);
		__asm__ volatile("" ::: "memory");
		bf16_slot_fill(ring + off, load32h(p + 64 * j, n - 32 * j));
		off = (off + 128) & (DG_BF16_LAG * 128 - 1);
	}
	__asm__ volatile("" ::: "memory");
	for (int64_t k = 0; k < lag; k++) { /* the last lag vectors, oldest first */
		bf16_slot_sum(ring + off, &a0, &a1, &a2, &a3);
		off = (off + 128) & (DG_BF16_LAG * 128 - 1);
	}
	return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}

T512 static double sumsq_avx512(dg_dtype t, const void *x, int64_t n)
{
	if (t == DG_F32)
		return sumsq_loop(DG_F32, x, n);
	if (t == DG_F16)
		return sumsq_f16_loop(x, n);
	return sumsq_bf16_loop(x, n);
}

/* Inf/NaN are exactly the values whose magnitude bits are >= the Inf pattern,
 * so a running unsigned max of |bits| needs one compare at the end. */
/* nonfinite: a running max of |bits| against the Inf pattern. It prefetches
 * as the casts do (DG_PF, DG_PF_FAR; not on AMD): from DRAM (256 MiB) the
 * loop alone reached 0.90-0.93 of the read-and-sum roof on an Intel Xeon,
 * with the hints 0.96-1.0 (1 and 2 threads, bench-kernels, two
 * interleaved pairs); at 64 MiB it was at the roof either way. */
T512 static int nonfinite_avx512(dg_dtype t, const void *x, int64_t n)
{
	const char *p = x;
	const int pf = dg_stream_prefetch();
	int64_t bytes = n * (t == DG_F32 ? 4 : 2), i = 0;
	__m512i mag = t == DG_F32 ? _mm512_set1_epi32(0x7fffffff) : _mm512_set1_epi16(0x7fff);
	__m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
	if (t == DG_F32) {
		for (; i + 256 <= bytes; i += 256) {
			pf_ahead(pf, p + i, 256);
			m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(p + i), mag));
			m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(p + i + 64), mag));
			m2 = _mm512_max_epu32(m2, _mm512_and_si512(_mm512_loadu_si512(p + i + 128), mag));
			m3 = _mm512_max_epu32(m3, _mm512_and_si512(_mm512_loadu_si512(p + i + 192), mag));
		}
		for (; i < bytes; i += 64) {
			__mmask64 k = bytes - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (bytes - i)) - 1);
			m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_maskz_loadu_epi8(k, p + i), mag));
		}
		__m512i m = _mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3));
		return _mm512_cmpge_epu32_mask(m, _mm512_set1_epi32(0x7f800000)) != 0;
	}
	for (; i + 256 <= bytes; i += 256) {
		pf_ahead(pf, p + i, 256);
		m0 = _mm512_max_epu16(m0, _mm512_and_si512(_mm512_loadu_si512(p + i), mag));
		m1 = _mm512_max_epu16(m1, _mm512_and_si512(_mm512_loadu_si512(p + i + 64), mag));
		m2 = _mm512_max_epu16(m2, _mm512_and_si512(_mm512_loadu_si512(p + i + 128), mag));
		m3 = _mm512_max_epu16(m3, _mm512_and_si512(_mm512_loadu_si512(p + i + 192), mag));
	}
	for (; i < bytes; i += 64) {
		__mmask64 k = bytes - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (bytes - i)) - 1);
		m0 = _mm512_max_epu16(m0, _mm512_and_si512(_mm512_maskz_loadu_epi8(k, p + i), mag));
	}
	__m512i m = _mm512_max_epu16(_mm512_max_epu16(m0, m1), _mm512_max_epu16(m2, m3));
	uint16_t inf = t == DG_F16 ? 0x7c00 : 0x7f80;
	return _mm512_cmpge_epu16_mask(m, _mm512_set1_epi16((short)inf)) != 0;
}

/* Same rule as kernels_scalar.c red_f32: VMAXPS(v, acc) is v > acc ? v : acc;
 * NaN lanes are then overwritten with the first NaN in list order, quieted,
 * because the compiler may commute the add's operands. */
AI __m512 red16(dg_redop op, __m512 acc, __m512 v)
{
	__m512 r = op == DG_SUM ? _mm512_add_ps(acc, v) : op == DG_MAX ? _mm512_max_ps(v, acc) : _mm512_min_ps(v, acc);
	__m512 quiet = _mm512_castsi512_ps(_mm512_set1_epi32(0x400000));
	__mmask16 an = _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q);
	__mmask16 vn = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
	r = _mm512_mask_blend_ps(vn, r, _mm512_or_ps(v, quiet));
	return _mm512_mask_blend_ps(an, r, _mm512_or_ps(acc, quiet));
}

/* 16 (or, masked, fewer) elements of the reduce, scaled when asked, stored
 * to every dst: all loads of the block precede its first store, so a dst
 * equal to a src is safe. Halves are narrowed once and the same 16-bit
 * vector is stored ndst times. */
AI void bcast16(dg_dtype t, dg_redop op, int scaled, __m512 a, const void *const *srcs, int nsrc,
		void *const *dsts, int ndst, int64_t k, __mmask16 m, int full)
{
	__m512 acc = full ? load16(t, CAT(srcs[0], t, k)) : load16m(t, CAT(srcs[0], t, k), m);
	for (int j = 1; j < nsrc; j++)
		acc = red16(op, acc, full ? load16(t, CAT(srcs[j], t, k)) : load16m(t, CAT(srcs[j], t, k), m));
	if (t == DG_F32) {
		if (scaled)
			acc = _mm512_mul_ps(acc, a);
		for (int d = 0; d < ndst; d++) {
			if (full)
				_mm512_storeu_ps(AT(dsts[d], t, k), acc);
			else
				_mm512_mask_storeu_ps(AT(dsts[d], t, k), m, acc);
		}
		return;
	}
	__m256i h = narrow16(t, acc);
	if (scaled)
		h = narrow16(t, _mm512_mul_ps(t == DG_F16 ? _mm512_cvtph_ps(h) : bf16_widen(h), a));
	for (int d = 0; d < ndst; d++) {
		if (full)
			_mm256_storeu_si256((__m256i *)AT(dsts[d], t, k), h);
		else
			_mm256_mask_storeu_epi16(AT(dsts[d], t, k), m, h);
	}
}

AI void bcast_loop(dg_dtype t, dg_redop op, int scaled, const void *const *srcs, int nsrc, void *const *dsts,
		   int ndst, int64_t lo, int64_t hi, float scale)
{
	__m512 a = _mm512_set1_ps(scale);
	int64_t k = lo;
	for (; k + 16 <= hi; k += 16)
		bcast16(t, op, scaled, a, srcs, nsrc, dsts, ndst, k, (__mmask16)0xffff, 1);
	if (k < hi)
		bcast16(t, op, scaled, a, srcs, nsrc, dsts, ndst, k, tail_mask(hi - k), 0);
}

T512 static void reduce_bcast_avx512(dg_dtype t, dg_redop op, const void *const *srcs, int nsrc, void *const *dsts,
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

/* ---- AVX512_BF16 casts ----------------------------------------------------
 * VCVTNE2PS2BF16 rounds to nearest even and quiets a NaN as (x >> 16) | 0x40,
 * as dg_f32_to_bf16 does, but reads subnormal inputs as zero. A pair of
 * vectors holding a subnormal therefore takes bf16_narrow instead; that test
 * (VFPCLASSPS) is cheaper than the integer rounding it replaces. */
#define TBF DG_TARGET_AVX512BF16
#define AIBF static inline __attribute__((always_inline)) TBF

/* 32 bfloat16: lo's 16 then hi's 16 */
AIBF __m512i bf16_narrow32(__m512 lo, __m512 hi)
{
	__mmask16 sub = _mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20); /* 0x20: denormal */
	if (__builtin_expect(sub != 0, 0))
		return _mm512_inserti64x4(_mm512_castsi256_si512(bf16_narrow(lo)), bf16_narrow(hi), 1);
	return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* src (float32 or float16) -> bfloat16; nt: non-temporal stores to a 64-byte
 * aligned d. The tail (and, for nt, the caller's head) is cast_loop's. */
AIBF void cast_bf16_loop(dg_dtype src, const void *s, uint16_t *d, int64_t n, int nt)
{
	const int pf = dg_stream_prefetch();
	int64_t i = 0;
	for (; i + 64 <= n; i += 64) {
		pf_ahead(pf, CAT(s, src, i), src == DG_F32 ? 256 : 128);
		__m512i r0 = bf16_narrow32(load16(src, CAT(s, src, i)), load16(src, CAT(s, src, i + 16)));
		__m512i r1 = bf16_narrow32(load16(src, CAT(s, src, i + 32)), load16(src, CAT(s, src, i + 48)));
		if (nt) {
			_mm512_stream_si512((__m512i *)(d + i), r0);
			_mm512_stream_si512((__m512i *)(d + i + 32), r1);
		} else {
			_mm512_storeu_si512(d + i, r0);
			_mm512_storeu_si512(d + i + 32, r1);
		}
	}
	if (nt)
		_mm_sfence();
	if (i < n)
		cast_loop(src, DG_BF16, CAT(s, src, i), d + i, n - i);
}

TBF static void cast_avx512bf16(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	if (src == DG_F32 && dst == DG_BF16)
		cast_bf16_loop(DG_F32, s, d, n, 0);
	else if (src == DG_F16 && dst == DG_BF16)
		cast_bf16_loop(DG_F16, s, d, n, 0);
	else
		cast_avx512(src, dst, s, d, n);
}

TBF static void cast_stream_avx512bf16(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	if (dst != DG_BF16 || src == DG_BF16) {
		cast_stream_avx512(src, dst, s, d, n);
		return;
	}
	int64_t head = cast_stream_head(src, dst, s, d, n);
	if (src == DG_F32)
		cast_bf16_loop(DG_F32, CAT(s, src, head), (uint16_t *)d + head, n - head, 1);
	else
		cast_bf16_loop(DG_F16, CAT(s, src, head), (uint16_t *)d + head, n - head, 1);
}

const dg_kernels dg_kernels_avx512bf16 = {
	.cast = cast_avx512bf16,
	.scale = scale_avx512,
	.axpy = axpy_avx512,
	.sumsq_block = sumsq_avx512,
	.nonfinite = nonfinite_avx512,
	.reduce_bcast = reduce_bcast_avx512,
	.cast_stream = cast_stream_avx512bf16,
	.copy_stream = copy_stream_avx512,
};

const dg_kernels dg_kernels_avx512 = {
	.cast = cast_avx512,
	.scale = scale_avx512,
	.axpy = axpy_avx512,
	.sumsq_block = sumsq_avx512,
	.nonfinite = nonfinite_avx512,
	.reduce_bcast = reduce_bcast_avx512,
	.cast_stream = cast_stream_avx512,
	.copy_stream = copy_stream_avx512,
};

#endif /* DG_HAVE_X86 */
