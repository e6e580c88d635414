/* nn_gelu.c — GELU (tanh approximation, as GPT-2) and the residual add:
 * plain elementwise loops on the pool. */
#include "nn_internal.h"

typedef struct ew_job {
	float *out;
	const float *a, *b;
} ew_job;

static void gelu_fwd_task(void *v, int64_t lo, int64_t hi)
{
	const ew_job *j = v;
	for (int64_t i = lo; i < hi; i++) {
		j->out[i] = dg_nn_gelu(j->a[i]);
	}
}

dg_status dg_nn_gelu_forward(dg_ctx *ctx, float *out, const float *inp, int64_t n)
{
	if (ctx == NULL || out == NULL || inp == NULL || n < 0)
		return DG_ERR_INVALID;
	ew_job j = {out, inp, NULL};
	dg_parallel_for(ctx, n, DG_GRAIN, n * 8, gelu_fwd_task, &j);
	return DG_OK;
}

/* dinp += GELU'(x) * dout (dg_nn_math.h) */
static void gelu_bwd_task(void *v, int64_t lo, int64_t hi)
{
	const ew_job *j = v;
	for (int64_t i = lo; i < hi; i++) {
		j->out[i] += dg_nn_gelu_grad(j->a[i]) * j->b[i];
	}
}

dg_status dg_nn_gelu_backward(dg_ctx *ctx, float *dinp, const float *inp, const float *dout, int64_t n)
{
	if (ctx == NULL || dinp == NULL || inp == NULL || dout == NULL || n < 0)
		return DG_ERR_INVALID;
	ew_job j = {dinp, inp, dout};
	dg_parallel_for(ctx, n, DG_GRAIN, n * 8, gelu_bwd_task, &j);
	return DG_OK;
}

static void add_task(void *v, int64_t lo, int64_t hi)
{
	const ew_job *j = v;
	for (int64_t i = lo; i < hi; i++)
		j->out[i] = j->a[i] + j->b[i];
}

dg_status dg_nn_add(dg_ctx *ctx, float *out, const float *a, const float *b, int64_t n)
{
	if (ctx == NULL || out == NULL || a == NULL || b == NULL || n < 0)
		return DG_ERR_INVALID;
	ew_job j = {out, a, b};
	dg_parallel_for(ctx, n, DG_GRAIN, n, add_task, &j);
	return DG_OK;
}
