/* nn_simd.h — the vector selects and tail masks the nn loops written in
 * intrinsics share (nn_gelu.c, nn_softmax.c). Each is the element math's
 * ternary lane by lane, so a loop built on them keeps its bits. x86 only;
 * include after nn_internal.h. */
#ifndef DG_NN_SIMD_H
#define DG_NN_SIMD_H

#if DG_HAVE_X86
#include <immintrin.h>

/* lt_*(x, y, a, b) is x < y ? a : b (false where either is NaN) */
static DG_TARGET_AVX512 inline __m512 lt_avx512(__m512 x, __m512 y, __m512 a, __m512 b)
{
	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_LT_OQ), b, a);
}

static DG_TARGET_AVX2 inline __m256 lt_avx2(__m256 x, __m256 y, __m256 a, __m256 b)
{
	return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, y, _CMP_LT_OQ));
}

/* nan_*(x, a, b) is x != x ? a : b */
static DG_TARGET_AVX512 inline __m512 nan_avx512(__m512 x, __m512 a, __m512 b)
{
	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), b, a);
}

static DG_TARGET_AVX2 inline __m256 nan_avx2(__m256 x, __m256 a, __m256 b)
{
	return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* abs_*(x) is fabsf lane by lane (the sign bit cleared) */
static DG_TARGET_AVX512 inline __m512 abs_avx512(__m512 x) { return _mm512_abs_ps(x); }

static DG_TARGET_AVX2 inline __m256 abs_avx2(__m256 x)
{
	return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

/* tail_*(left): the mask of a row's last left < W elements (left >= 1),
 * for masked loads and stores that touch nothing past the row */
static DG_TARGET_AVX512 inline __mmask16 tail_avx512(int64_t left) { return (__mmask16)((1u << left) - 1u); }

static DG_TARGET_AVX2 inline __m256i tail_avx2(int64_t left)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

#endif
