/* nn_softmax.c — the pieces of a softmax row the attention and the
 * cross-entropy share: the row max and the exponentials.
 *
 * Each has a copy per ISA, the ctx's ISA picking one: the baseline loop
 * applies dg_nn_exp (plain float arithmetic with selects) element by
 * element, and the AVX2 and AVX-512 copies (SIMD_EXP, intrinsics) do its
 * operations in its order, so every copy gives the scalar element math's
 * bits (test_softmax_isas, test_attention_isas). */
#if defined(__clang__)
#pragma clang fp contract(off) /* see nn_gelu.c */
#endif
#include "nn_internal.h"
#include "nn_simd.h"

/* The row max per ISA with the max instruction: x > m ? x : m is exactly
 * maxps(x, m), which keeps m where x is NaN. Written with intrinsics, as
 * GCC under -ftrapping-math left the plain loop scalar (a fifth of the
 * GPT's cross-entropy forward). */
static float max_tail(const float *lanes, int nl, const float *x, int64_t i, int64_t n)
{
	float mx = -INFINITY;
	for (; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (int l = 0; l < nl; l++)
		mx = lanes[l] > mx ? lanes[l] : mx;
	return mx;
}

#if DG_HAVE_X86
static float max_sse(const float *x, int64_t n)
{
	__m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		m0 = _mm_max_ps(_mm_loadu_ps(x + i), m0);
		m1 = _mm_max_ps(_mm_loadu_ps(x + i + 4), m1);
		m2 = _mm_max_ps(_mm_loadu_ps(x + i + 8), m2);
		m3 = _mm_max_ps(_mm_loadu_ps(x + i + 12), m3);
	}
	float l[16];
	_mm_storeu_ps(l, m0), _mm_storeu_ps(l + 4, m1), _mm_storeu_ps(l + 8, m2), _mm_storeu_ps(l + 12, m3);
	return max_tail(l, 16, x, i, n);
}

/* AVX2 and AVX-512 take a row's last partial vector with a mask (masked-off
 * lanes read as -inf for the max, computed on zeros and not stored for the
 * exponentials): attention's rows are short (a query's keys, 1 to T), and
 * a scalar tail of up to 15 elements took as long as the vectors. */
static DG_TARGET_AVX2 float max_avx2(const float *x, int64_t n)
{
	const __m256 ninf = _mm256_set1_ps(-INFINITY);
	__m256 m0 = ninf, m1 = m0;
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
		m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
	}
	for (; i < n; i += 8) {
		__m256i k = tail_avx2(n - i);
		__m256 v = _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k));
		m0 = _mm256_max_ps(v, m0);
	}
	float l[16];
	_mm256_storeu_ps(l, m0), _mm256_storeu_ps(l + 8, m1);
	return max_tail(l, 16, x, n, n);
}

static DG_TARGET_AVX512 float max_avx512(const float *x, int64_t n)
{
	const __m512 ninf = _mm512_set1_ps(-INFINITY);
	__m512 m0 = ninf, m1 = m0;
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
		m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
	}
	for (; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tail_avx512(n - i);
		m0 = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, k, x + i), m0);
	}
	/* neither holds a NaN (maxps keeps m where x is NaN), so the order of
	 * the reduction does not matter */
	return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}
#endif

float dg_nn_row_max(dg_isa isa, const float *x, int64_t n)
{
#if DG_HAVE_X86
	if (isa == DG_ISA_AVX512)
		return max_avx512(x, n);
	if (isa == DG_ISA_AVX2)
		return max_avx2(x, n);
	return max_sse(x, n);
#else
	return max_tail(NULL, 0, x, 0, n);
#endif
}

static DG_VECTORISE void exp_scalar(float *out, const float *x, int64_t n, float mx)
{
	for (int64_t i = 0; i < n; i++)
		out[i] = dg_nn_softmax_exp(x[i], mx);
}

#if DG_HAVE_X86
/* The AVX-512 and AVX2 copies in intrinsics, dg_nn_exp's operations one for
 * one (its clamps as max/min, which keep a NaN argument; its selects as
 * blends), so they give its bits. GCC's copies if-converted the clamps into
 * masked arithmetic, about 1 element/ns at AVX-512 on the GPT's
 * cross-entropy, most of its forward. SIMD_EXP(sfx, target, V, VI, P, W,
 * TOI, TOF) stamps exp_##sfx for float vector V, int vector VI, intrinsic
 * prefix P, W lanes and the two bit casts, with nn_simd.h's selects. */
#define SIMD_EXP(sfx, target, V, VI, P, W, TOI, TOF)                                                               \
	static target inline V exp_vec_##sfx(V x)                                                                   \
	{                                                                                                          \
		const V lo = P##_set1_ps(-87.3365402f), hi = P##_set1_ps(88.7228317f);                            \
		const V magic = P##_set1_ps(12582912.0f);                                                         \
		V c = P##_min_ps(hi, P##_max_ps(lo, x));                                                           \
		V t = P##_add_ps(P##_mul_ps(c, P##_set1_ps(1.44269504088896341f)), magic);                        \
		V nn = P##_sub_ps(t, magic);                                                                       \
		V r = P##_sub_ps(c, P##_mul_ps(nn, P##_set1_ps(0.693359375f)));                                   \
		r = P##_sub_ps(r, P##_mul_ps(nn, P##_set1_ps(-2.12194440e-4f)));                                   \
		V p = P##_set1_ps(1.9875691500e-4f);                                                               \
		p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(1.3981999507e-3f));                                   \
		p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(8.3334519073e-3f));                                   \
		p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(4.1665795894e-2f));                                   \
		p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(1.6666665459e-1f));                                   \
		p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(5.0000001201e-1f));                                   \
		p = P##_add_ps(P##_add_ps(P##_mul_ps(p, P##_mul_ps(r, r)), r), P##_set1_ps(1.0f));                \
		/* k = bits(t) - 0x4b400000, k1 = k / 2 (toward zero) */                                         \
		VI k = P##_sub_epi32(TOI(t), P##_set1_epi32(0x4b400000));                                          \
		VI k1 = P##_srai_epi32(P##_add_epi32(k, P##_srli_epi32(k, 31)), 1);                                 \
		VI b127 = P##_set1_epi32(127);                                                                     \
		V s1 = TOF(P##_slli_epi32(P##_add_epi32(k1, b127), 23));                                           \
		V s2 = TOF(P##_slli_epi32(P##_add_epi32(P##_sub_epi32(k, k1), b127), 23));                         \
		V e = P##_mul_ps(P##_mul_ps(p, s1), s2);                                                           \
		e = lt_##sfx(x, lo, P##_setzero_ps(), e);                                                          \
		e = lt_##sfx(hi, x, P##_set1_ps((float)INFINITY), e);                                              \
		return nan_##sfx(x, x, e);                                                                         \
	}                                                                                                          \
	static target void exp_##sfx(float *out, const float *in, int64_t n, float mx)                              \
	{                                                                                                          \
		const V vmx = P##_set1_ps(mx);                                                                     \
		int64_t i = 0;                                                                                     \
		for (; i + W <= n; i += W)                                                                         \
			P##_storeu_ps(out + i, exp_vec_##sfx(P##_sub_ps(P##_loadu_ps(in + i), vmx)));              \
		if (i < n)                                                                                         \
			exp_tail_##sfx(out + i, in + i, n - i, vmx);                                               \
	}

/* exp_tail_* run the last n < W elements with a mask */
#define exp_tail_avx512(out, in, n, vmx)                                                                           \
	do {                                                                                                       \
		__mmask16 k_ = tail_avx512(n);                                                                     \
		_mm512_mask_storeu_ps(out, k_, exp_vec_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k_, in), vmx))); \
	} while (0)
#define exp_tail_avx2(out, in, n, vmx)                                                                             \
	do {                                                                                                       \
		__m256i k_ = tail_avx2(n);                                                                         \
		_mm256_maskstore_ps(out, k_, exp_vec_avx2(_mm256_sub_ps(_mm256_maskload_ps(in, k_), vmx)));        \
	} while (0)

SIMD_EXP(avx512, DG_TARGET_AVX512, __m512, __m512i, _mm512, 16, _mm512_castps_si512, _mm512_castsi512_ps)
SIMD_EXP(avx2, DG_TARGET_AVX2, __m256, __m256i, _mm256, 8, _mm256_castps_si256, _mm256_castsi256_ps)
#endif

void dg_nn_softmax_exps(dg_isa isa, float *out, const float *x, int64_t n, float mx)
{
#if DG_HAVE_X86
	if (isa == DG_ISA_AVX512) {
		exp_avx512(out, x, n, mx);
		return;
	}
	if (isa == DG_ISA_AVX2) {
		exp_avx2(out, x, n, mx);
		return;
	}
#endif
	exp_scalar(out, x, n, mx);
}
