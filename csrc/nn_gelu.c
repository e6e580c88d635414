/* nn_gelu.c — GELU (tanh approximation, as GPT-2) and the residual add:
 * elementwise loops on the pool.
 *
 * GELU's element math (dg_nn_math.h) is plain arithmetic: the baseline
 * loop applies it element by element (GELU_LOOPS), and the AVX2 and
 * AVX-512 loops (SIMD_GELU, intrinsics) do the same IEEE float operations
 * in the same order, no FMA, so all three give the same bits
 * (test_gelu_isas); the ctx's ISA picks one. */
#if defined(__clang__)
/* clang contracts a * b + c into an FMA by default, which the AVX2 and
 * AVX-512 copies could use and the baseline cannot; before the
 * includes, as it applies where the element math is written */
#pragma clang fp contract(off)
#endif
#include "nn_internal.h"
#include "nn_simd.h"

typedef struct ew_job {
	float *out;
	const float *a, *b;
	dg_isa isa;
	int write; /* GELU backward: dinp = 0 + ... (dg_nn_gelu_backward_write), not += */
} ew_job;

static DG_VECTORISE void gelu_fwd_scalar(float *out, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		out[i] = dg_nn_gelu(x[i]);
}

/* dinp += GELU'(x) * dout; with write, dinp = 0 + GELU'(x) * dout (the
 * bits of adding to a cleared dinp: a -0 product becomes +0 alike) */
static DG_VECTORISE void gelu_bwd_scalar(float *dinp, const float *x, const float *dout, int64_t n, int write)
{
	if (write) {
		for (int64_t i = 0; i < n; i++)
			dinp[i] = 0.0f + dg_nn_gelu_grad(x[i]) * dout[i];
		return;
	}
	for (int64_t i = 0; i < n; i++)
		dinp[i] += dg_nn_gelu_grad(x[i]) * dout[i];
}

#if DG_HAVE_X86
/* The AVX-512 and AVX2 loops in intrinsics, the element math's operations
 * one for one (multiplies and adds in its order, no FMA, the same IEEE
 * division), so they give its bits (test_gelu_isas). GCC left the plain
 * AVX2 loop scalar under -ftrapping-math (0.17 elements/ns), and its
 * AVX-512 copy if-converted dg_nn_tanh's clamp into masks and divided twice
 * per vector. Here the clamp is min/max: u > c ? c : u is minps(c, u) and
 * x < -c ? -c : x is maxps(-c, x), both keeping a NaN argument.
 * SIMD_GELU(sfx, target, V, P, W) stamps both loops for vector type V of W
 * floats and its intrinsics' prefix P (token-pasted), with nn_simd.h's
 * selects. */
#define SIMD_GELU(sfx, target, V, P, W)                                                                            \
	static target inline V tanh_##sfx(V u)                                                                      \
	{                                                                                                          \
		const float c = 7.90531110763549805f;                                                              \
		V x = P##_max_ps(P##_set1_ps(-c), P##_min_ps(P##_set1_ps(c), u));                                 \
		V x2 = P##_mul_ps(x, x);                                                                           \
		V p = P##_set1_ps(-2.76076847742355e-16f);                                                         \
		p = P##_add_ps(P##_mul_ps(p, x2), P##_set1_ps(2.00018790482477e-13f));                             \
		p = P##_add_ps(P##_mul_ps(p, x2), P##_set1_ps(-8.60467152213735e-11f));                            \
		p = P##_add_ps(P##_mul_ps(p, x2), P##_set1_ps(5.12229709037114e-08f));                             \
		p = P##_add_ps(P##_mul_ps(p, x2), P##_set1_ps(1.48572235717979e-05f));                             \
		p = P##_add_ps(P##_mul_ps(p, x2), P##_set1_ps(6.37261928875436e-04f));                             \
		p = P##_add_ps(P##_mul_ps(p, x2), P##_set1_ps(4.89352455891786e-03f));                             \
		p = P##_mul_ps(x, p);                                                                              \
		V q = P##_set1_ps(1.19825839466702e-06f);                                                          \
		q = P##_add_ps(P##_mul_ps(q, x2), P##_set1_ps(1.18534705686654e-04f));                             \
		q = P##_add_ps(P##_mul_ps(q, x2), P##_set1_ps(2.26843463243900e-03f));                             \
		q = P##_add_ps(P##_mul_ps(q, x2), P##_set1_ps(4.89352518554385e-03f));                             \
		/* fabsf(u) < 0.0004f ? u : p / q */                                                               \
		return lt_##sfx(abs_##sfx(u), P##_set1_ps(0.0004f), u, P##_div_ps(p, q));                          \
	}                                                                                                          \
	/* u = sqrt(2/pi) (x + 0.044715 x^3), as dg_nn_gelu: ((k x) x) x */                                     \
	static target inline V arg_##sfx(V x)                                                                       \
	{                                                                                                          \
		V cube = P##_mul_ps(P##_mul_ps(P##_mul_ps(P##_set1_ps(DG_NN_GELU_CUBE), x), x), x);               \
		return P##_mul_ps(P##_set1_ps(DG_NN_GELU_SCALE), P##_add_ps(x, cube));                            \
	}                                                                                                          \
	static target void gelu_fwd_##sfx(float *out, const float *x, int64_t n)                                    \
	{                                                                                                          \
		int64_t i = 0;                                                                                     \
		for (; i + 2 * W <= n; i += 2 * W) { /* two chains a step, as gelu_bwd */                          \
			V v0 = P##_loadu_ps(x + i), v1 = P##_loadu_ps(x + i + W);                                  \
			V t0 = tanh_##sfx(arg_##sfx(v0)), t1 = tanh_##sfx(arg_##sfx(v1));                          \
			P##_storeu_ps(out + i, P##_mul_ps(P##_mul_ps(P##_set1_ps(0.5f), v0), P##_add_ps(P##_set1_ps(1.0f), t0))); \
			P##_storeu_ps(out + i + W, P##_mul_ps(P##_mul_ps(P##_set1_ps(0.5f), v1), P##_add_ps(P##_set1_ps(1.0f), t1))); \
		}                                                                                                  \
		for (; i + W <= n; i += W) {                                                                       \
			V v = P##_loadu_ps(x + i), th = tanh_##sfx(arg_##sfx(v));                                  \
			V half = P##_mul_ps(P##_set1_ps(0.5f), v);                                                 \
			P##_storeu_ps(out + i, P##_mul_ps(half, P##_add_ps(P##_set1_ps(1.0f), th)));              \
		}                                                                                                  \
		for (; i < n; i++)                                                                                 \
			out[i] = dg_nn_gelu(x[i]);                                                                 \
	}                                                                                                          \
	/* GELU'(x), as dg_nn_gelu_grad: 0.5 (1 + th) +                                                        \
	 * (((0.5 x) sech2) scale) (1 + ((3 cube) x) x) */                                                       \
	static target inline V grad_##sfx(V v)                                                                     \
	{                                                                                                          \
		const float k3 = 3.0f * DG_NN_GELU_CUBE; /* folded as in dg_nn_gelu_grad */                      \
		const V one = P##_set1_ps(1.0f), half = P##_set1_ps(0.5f);                                      \
		V th = tanh_##sfx(arg_##sfx(v));                                                                   \
		V sech2 = P##_sub_ps(one, P##_mul_ps(th, th));                                                     \
		V a = P##_mul_ps(half, P##_add_ps(one, th));                                                       \
		V b = P##_mul_ps(P##_mul_ps(P##_mul_ps(half, v), sech2), P##_set1_ps(DG_NN_GELU_SCALE));           \
		V c = P##_add_ps(one, P##_mul_ps(P##_mul_ps(P##_set1_ps(k3), v), v));                              \
		return P##_add_ps(a, P##_mul_ps(b, c));                                                            \
	}                                                                                                          \
	/* dinp += GELU'(x) dout, two vectors a step: each is one chain of ~30 \
	 * dependent operations and a division, and one vector a step left the \
	 * core waiting on it (bench-train -mode ops, Intel Xeon, 1 thread: 6.0 \
	 * -> 4.4 ms a step; the forward 2.8 -> 2.7) */                            \
	static target void gelu_bwd_##sfx(float *dinp, const float *x, const float *dout, int64_t n, int write)     \
	{                                                                                                          \
		int64_t i = 0;                                                                                     \
		for (; i + 2 * W <= n; i += 2 * W) {                                                               \
			V g0 = grad_##sfx(P##_loadu_ps(x + i)), g1 = grad_##sfx(P##_loadu_ps(x + i + W));         \
			V acc0 = write ? P##_setzero_ps() : P##_loadu_ps(dinp + i);                                \
			V acc1 = write ? P##_setzero_ps() : P##_loadu_ps(dinp + i + W);                            \
			P##_storeu_ps(dinp + i, P##_add_ps(acc0, P##_mul_ps(g0, P##_loadu_ps(dout + i))));        \
			P##_storeu_ps(dinp + i + W, P##_add_ps(acc1, P##_mul_ps(g1, P##_loadu_ps(dout + i + W)))); \
		}                                                                                                  \
		for (; i + W <= n; i += W) {                                                                       \
			V acc = write ? P##_setzero_ps() : P##_loadu_ps(dinp + i);                                 \
			P##_storeu_ps(dinp + i, P##_add_ps(acc, P##_mul_ps(grad_##sfx(P##_loadu_ps(x + i)), P##_loadu_ps(dout + i)))); \
		}                                                                                                  \
		gelu_bwd_scalar(dinp + i, x + i, dout + i, n - i, write);                                          \
	}

SIMD_GELU(avx512, DG_TARGET_AVX512, __m512, _mm512, 16)
SIMD_GELU(avx2, DG_TARGET_AVX2, __m256, _mm256, 8)
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
	ew_job j = {out, inp, NULL, ctx->isa, 0};
	dg_parallel_for(ctx, n, DG_GRAIN, n * 8, gelu_fwd_task, &j);
	return DG_OK;
}

static void gelu_bwd_task(void *v, int64_t lo, int64_t hi)
{
	const ew_job *j = v;
#if DG_HAVE_X86
	if (j->isa == DG_ISA_AVX512) {
		gelu_bwd_avx512(j->out + lo, j->a + lo, j->b + lo, hi - lo, j->write);
		return;
	}
	if (j->isa == DG_ISA_AVX2) {
		gelu_bwd_avx2(j->out + lo, j->a + lo, j->b + lo, hi - lo, j->write);
		return;
	}
#endif
	gelu_bwd_scalar(j->out + lo, j->a + lo, j->b + lo, hi - lo, j->write);
}

static dg_status gelu_backward(dg_ctx *ctx, float *dinp, const float *inp, const float *dout, int64_t n, int write)
{
	if (ctx == NULL || dinp == NULL || inp == NULL || dout == NULL || n < 0)
		return DG_ERR_INVALID;
	ew_job j = {dinp, inp, dout, ctx->isa, write};
	dg_parallel_for(ctx, n, DG_GRAIN, n * 8, gelu_bwd_task, &j);
	return DG_OK;
}

dg_status dg_nn_gelu_backward(dg_ctx *ctx, float *dinp, const float *inp, const float *dout, int64_t n)
{
	return gelu_backward(ctx, dinp, inp, dout, n, 0);
}

dg_status dg_nn_gelu_backward_write(dg_ctx *ctx, float *dinp, const float *inp, const float *dout, int64_t n)
{
	return gelu_backward(ctx, dinp, inp, dout, n, 1);
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
	ew_job j = {out, a, b, ctx->isa, 0};
	dg_parallel_for(ctx, n, DG_GRAIN, n, add_task, &j);
	return DG_OK;
}
