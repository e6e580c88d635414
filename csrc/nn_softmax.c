/* nn_softmax.c — the pieces of a softmax row the attention and the
 * cross-entropy share: the row max and the exponentials.
 *
 * The exponential loop is compiled three times from one body, as GELU's
 * (nn_gelu.c): for the baseline and, with a target attribute, for AVX2 and
 * AVX-512; the ctx's ISA picks one. dg_nn_exp is plain float arithmetic with
 * selects, so each copy gives the scalar element math's bits. */
#if defined(__clang__)
#pragma clang fp contract(off) /* see nn_gelu.c */
#endif
#include "nn_internal.h"

float DG_VECTORISE dg_nn_row_max(const float *x, int64_t n)
{
	float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++)
			m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
	for (; i < n; i++)
		m[0] = x[i] > m[0] ? x[i] : m[0];
	float mx = m[0];
	for (int l = 1; l < 8; l++)
		mx = m[l] > mx ? m[l] : mx;
	return mx;
}

#define EXP_LOOP(sfx, target)                                                                                      \
	static target DG_VECTORISE void exp_##sfx(float *out, const float *x, int64_t n, float mx)                  \
	{                                                                                                          \
		for (int64_t i = 0; i < n; i++)                                                                    \
			out[i] = dg_nn_softmax_exp(x[i], mx);                                                      \
	}

EXP_LOOP(scalar, )
#if DG_HAVE_X86
EXP_LOOP(avx2, DG_TARGET_AVX2)
EXP_LOOP(avx512, DG_TARGET_AVX512)
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
