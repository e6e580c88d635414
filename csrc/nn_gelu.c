/* nn_gelu.c — GELU (tanh approximation, as GPT-2) and the residual add:
 * elementwise loops on the pool.
 *
 * GELU's element math (dg_nn_math.h) is plain arithmetic, so each loop is
 * compiled three times from one body (DG_VECTORISE): for the baseline and,
 * with a target attribute, for AVX2 and AVX-512; the ctx's ISA picks one.
 * GCC 12 vectorises the AVX-512 copy (masked division makes dg_nn_tanh's
 * selects branch-free); under -ftrapping-math it leaves the AVX2 and
 * baseline copies scalar, still without a libm call per element. Every
 * element is the same sequence of IEEE float operations in each (no FMA:
 * GCC in ISO C11 mode does not contract), so the three give the same bits
 * (test_gelu_isas). */
#if defined(__clang__)
/* clang contracts a * b + c into an FMA by default, which the AVX2 and
 * AVX-512 copies could use and the baseline cannot; before the
 * includes, as it applies where the element math is written */
#pragma clang fp contract(off)
#endif
#include "nn_internal.h"

typedef struct ew_job {
	float *out;
	const float *a, *b;
	dg_isa isa;
} ew_job;

#define GELU_LOOPS(sfx, target)                                                                                    \
	static target DG_VECTORISE void gelu_fwd_##sfx(float *out, const float *x, int64_t n)                       \
	{                                                                                                          \
		for (int64_t i = 0; i < n; i++)                                                                    \
			out[i] = dg_nn_gelu(x[i]);                                                                 \
	}                                                                                                          \
	/* dinp += GELU'(x) * dout */                                                                              \
	static target DG_VECTORISE void gelu_bwd_##sfx(float *dinp, const float *x, const float *dout, int64_t n)   \
	{                                                                                                          \
		for (int64_t i = 0; i < n; i++)                                                                    \
			dinp[i] += dg_nn_gelu_grad(x[i]) * dout[i];                                                \
	}

GELU_LOOPS(scalar, )
#if DG_HAVE_X86
GELU_LOOPS(avx2, DG_TARGET_AVX2)
GELU_LOOPS(avx512, DG_TARGET_AVX512)
#endif

static void gelu_fwd_task(void *v, int64_t lo, int64_t hi)
{
	const ew_job *j = v;
#if DG_HAVE_X86
	if (j->isa == DG_ISA_AVX512) {
		gelu_fwd_avx512(j->out + lo, j->a + lo, hi - lo);
		return;
	}
	if (j->isa == DG_ISA_AVX2) {
		gelu_fwd_avx2(j->out + lo, j->a + lo, hi - lo);
		return;
	}
#endif
	gelu_fwd_scalar(j->out + lo, j->a + lo, hi - lo);
}

dg_status dg_nn_gelu_forward(dg_ctx *ctx, float *out, const float *inp, int64_t n)
{
	if (ctx == NULL || out == NULL || inp == NULL || n < 0)
		return DG_ERR_INVALID;
	ew_job j = {out, inp, NULL, ctx->isa};
	dg_parallel_for(ctx, n, DG_GRAIN, n * 8, gelu_fwd_task, &j);
	return DG_OK;
}

static void gelu_bwd_task(void *v, int64_t lo, int64_t hi)
{
	const ew_job *j = v;
#if DG_HAVE_X86
	if (j->isa == DG_ISA_AVX512) {
		gelu_bwd_avx512(j->out + lo, j->a + lo, j->b + lo, hi - lo);
		return;
	}
	if (j->isa == DG_ISA_AVX2) {
		gelu_bwd_avx2(j->out + lo, j->a + lo, j->b + lo, hi - lo);
		return;
	}
#endif
	gelu_bwd_scalar(j->out + lo, j->a + lo, j->b + lo, hi - lo);
}

dg_status dg_nn_gelu_backward(dg_ctx *ctx, float *dinp, const float *inp, const float *dout, int64_t n)
{
	if (ctx == NULL || dinp == NULL || inp == NULL || dout == NULL || n < 0)
		return DG_ERR_INVALID;
	ew_job j = {dinp, inp, dout, ctx->isa};
	dg_parallel_for(ctx, n, DG_GRAIN, n * 8, gelu_bwd_task, &j);
	return DG_OK;
}

static DG_VECTORISE void add_task(void *v, int64_t lo, int64_t hi)
{
	const ew_job *j = v;
	for (int64_t i = lo; i < hi; i++)
		j->out[i] = j->a[i] + j->b[i];
}

dg_status dg_nn_add(dg_ctx *ctx, float *out, const float *a, const float *b, int64_t n)
{
	if (ctx == NULL || out == NULL || a == NULL || b == NULL || n < 0)
		return DG_ERR_INVALID;
	ew_job j = {out, a, b, ctx->isa};
	dg_parallel_for(ctx, n, DG_GRAIN, n, add_task, &j);
	return DG_OK;
}
