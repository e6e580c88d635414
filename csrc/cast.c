/* cast.c — dg_cast: the list is split over threads by its concatenated
 * element space, so one big tensor and many small ones both use every thread. */
#include <string.h>

#include "dg_internal.h"

typedef struct cast_job {
	void (*cast)(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n);
	void (*copy)(void *d, const void *s, int64_t bytes);
	dg_dtype src, dst;
	size_t ss, ds;
	const void *const *srcs;
	void *const *dsts;
	const int64_t *ns;
	int count;
} cast_job;

static void plain_copy(void *d, const void *s, int64_t bytes) { memcpy(d, s, (size_t)bytes); }

static int cast_run(const void *v, int i, int64_t off, int64_t len)
{
	const cast_job *j = v;
	const char *s = (const char *)j->srcs[i] + (size_t)off * j->ss;
	char *d = (char *)j->dsts[i] + (size_t)off * j->ds;
	if (j->src == j->dst)
		j->copy(d, s, len * (int64_t)j->ss);
	else
		j->cast(j->src, j->dst, s, d, len);
	return 0;
}

static void cast_task(void *v, int64_t lo, int64_t hi)
{
	const cast_job *j = v;
	dg_list_run(j->ns, j->count, lo, hi, cast_run, j);
}

dg_status dg_cast(dg_ctx *ctx, dg_dtype src, dg_dtype dst, const void *const *srcs, void *const *dsts,
		  const int64_t *ns, int count)
{
	if (ctx == NULL)
		return DG_ERR_INVALID;
	if (!dg_is_float(src) || !dg_is_float(dst))
		return DG_ERR_DTYPE;
	int64_t total;
	dg_status st = dg_check_list(srcs, ns, count, &total);
	if (st == DG_OK)
		st = dg_check_list((const void *const *)dsts, ns, count, &total);
	if (st != DG_OK)
		return st;
	cast_job j = {ctx->k->cast, plain_copy, src, dst, dg_dtype_size(src), dg_dtype_size(dst), srcs, dsts, ns, count};
	if (total * (int64_t)j.ds >= DG_STREAM_BYTES) {
		if (ctx->k->cast_stream != NULL)
			j.cast = ctx->k->cast_stream;
		if (ctx->k->copy_stream != NULL)
			j.copy = ctx->k->copy_stream;
	}
	dg_parallel_for(ctx, total, DG_GRAIN, total, cast_task, &j);
	return DG_OK;
}
