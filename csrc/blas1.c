/* blas1.c — dg_scale and dg_axpy over tensor lists, split like dg_cast. */
#include "dg_internal.h"

typedef struct blas_job {
	const dg_kernels *k;
	dg_dtype t, xt; /* ys' dtype, xs' dtype */
	size_t es, xes;
	float alpha;
	const void *const *xs; /* NULL for scale */
	void *const *ys;
	const int64_t *ns;
	int count;
} blas_job;

static int blas_run(const void *v, int i, int64_t off, int64_t len)
{
	const blas_job *j = v;
	char *y = (char *)j->ys[i] + (size_t)off * j->es;
	if (j->xs == NULL)
		j->k->scale(j->t, y, len, j->alpha);
	else
		dg_axpy_mixed_run(j->k, j->xt, j->t, j->alpha, (const char *)j->xs[i] + (size_t)off * j->xes, y, len);
	return 0;
}

static void blas_task(void *v, int64_t lo, int64_t hi)
{
	const blas_job *j = v;
	dg_list_run(j->ns, j->count, lo, hi, blas_run, j);
}

dg_status dg_scale(dg_ctx *ctx, dg_dtype t, void *const *xs, const int64_t *ns, int count, float alpha)
{
	if (ctx == NULL)
		return DG_ERR_INVALID;
	if (!dg_is_float(t))
		return DG_ERR_DTYPE;
	int64_t total;
	dg_status st = dg_check_list((const void *const *)xs, ns, count, &total);
	if (st != DG_OK)
		return st;
	blas_job j = {ctx->k, t, t, dg_dtype_size(t), dg_dtype_size(t), alpha, NULL, xs, ns, count};
	dg_parallel_for(ctx, total, DG_GRAIN, total, blas_task, &j);
	return DG_OK;
}

/* Elements per step of a mixed axpy: two float32 blocks on the stack, small
 * enough to stay in L1 between the widening, the axpy and the narrowing. */
#define MIX_BLOCK 512

void dg_axpy_mixed_run(const dg_kernels *k, dg_dtype xt, dg_dtype yt, float alpha, const void *x, void *y, int64_t n)
{
	if (xt == yt) {
		k->axpy(yt, alpha, x, y, n);
		return;
	}
	/* widen, axpy in float32 with the table's own loop, narrow: each step is
	 * the table's, and every table gives the scalar bits, so the result is
	 * narrow(dg_axpy_f32(alpha, widen(x), widen(y))) on every ISA */
	const size_t xes = dg_dtype_size(xt), yes = dg_dtype_size(yt);
	float xb[MIX_BLOCK], yb[MIX_BLOCK];
	for (int64_t i = 0; i < n; i += MIX_BLOCK) {
		int64_t len = n - i < MIX_BLOCK ? n - i : MIX_BLOCK;
		const char *xp = (const char *)x + (size_t)i * xes;
		char *yp = (char *)y + (size_t)i * yes;
		const float *xf = (const float *)xp;
		float *yf = (float *)yp;
		if (xt != DG_F32) {
			k->cast(xt, DG_F32, xp, xb, len);
			xf = xb;
		}
		if (yt != DG_F32) {
			k->cast(yt, DG_F32, yp, yb, len);
			yf = yb;
		}
		k->axpy(DG_F32, alpha, xf, yf, len);
		if (yt != DG_F32)
			k->cast(DG_F32, yt, yb, yp, len);
	}
}

dg_status dg_axpy(dg_ctx *ctx, dg_dtype t, float alpha, const void *const *xs, void *const *ys,
		  const int64_t *ns, int count)
{
	return dg_axpy_mixed(ctx, t, t, alpha, xs, ys, ns, count);
}

dg_status dg_axpy_mixed(dg_ctx *ctx, dg_dtype xt, dg_dtype yt, float alpha, const void *const *xs, void *const *ys,
			const int64_t *ns, int count)
{
	if (ctx == NULL)
		return DG_ERR_INVALID;
	if (!dg_is_float(xt) || !dg_is_float(yt))
		return DG_ERR_DTYPE;
	int64_t total;
	dg_status st = dg_check_list(xs, ns, count, &total);
	if (st == DG_OK)
		st = dg_check_list((const void *const *)ys, ns, count, &total);
	if (st != DG_OK)
		return st;
	/* a count of 0 leaves xs possibly NULL, which blas_task reads as scale;
	 * with nothing to do that never matters */
	blas_job j = {ctx->k, yt, xt, dg_dtype_size(yt), dg_dtype_size(xt), alpha, xs, ys, ns, count};
	dg_parallel_for(ctx, total, DG_GRAIN, 2 * total, blas_task, &j);
	return DG_OK;
}
