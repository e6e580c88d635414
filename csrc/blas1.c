/* blas1.c — dg_scale and dg_axpy over tensor lists, split like dg_cast. */
#include "dg_internal.h"

typedef struct blas_job {
	const dg_kernels *k;
	dg_dtype t;
	size_t es;
	float alpha;
	const void *const *xs; /* NULL for scale */
	void *const *ys;
	const int64_t *ns;
	int count;
} blas_job;

static void blas_task(void *v, int64_t lo, int64_t hi)
{
	const blas_job *j = v;
	int i;
	int64_t off;
	dg_list_seek(j->ns, j->count, lo, &i, &off);
	for (int64_t left = hi - lo; left > 0; i++, off = 0) {
		int64_t len = j->ns[i] - off < left ? j->ns[i] - off : left;
		char *y = (char *)j->ys[i] + (size_t)off * j->es;
		if (len > 0) {
			if (j->xs == NULL)
				j->k->scale(j->t, y, len, j->alpha);
			else
				j->k->axpy(j->t, j->alpha, (const char *)j->xs[i] + (size_t)off * j->es, y, len);
		}
		left -= len;
	}
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
	blas_job j = {ctx->k, t, dg_dtype_size(t), alpha, NULL, xs, ns, count};
	dg_parallel_for(ctx, total, DG_GRAIN, total, blas_task, &j);
	return DG_OK;
}

dg_status dg_axpy(dg_ctx *ctx, dg_dtype t, float alpha, const void *const *xs, void *const *ys,
		  const int64_t *ns, int count)
{
	if (ctx == NULL)
		return DG_ERR_INVALID;
	if (!dg_is_float(t))
		return DG_ERR_DTYPE;
	int64_t total;
	dg_status st = dg_check_list(xs, ns, count, &total);
	if (st == DG_OK)
		st = dg_check_list((const void *const *)ys, ns, count, &total);
	if (st != DG_OK)
		return st;
	/* a count of 0 leaves xs possibly NULL, which blas_task reads as scale;
	 * with nothing to do that never matters */
	blas_job j = {ctx->k, t, dg_dtype_size(t), alpha, xs, ys, ns, count};
	dg_parallel_for(ctx, total, DG_GRAIN, 2 * total, blas_task, &j);
	return DG_OK;
}
