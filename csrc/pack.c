/*
 * pack.c — dg_pack/dg_unpack: memcpy between a tensor list and one flat
 * buffer, split over threads by the list's concatenated element space.
 *
 * Validation: every region must satisfy 0 <= offs[i] and
 * offs[i] + ns[i] <= flat_n (DG_ERR_SIZE otherwise). Overlap between regions
 * is always checked (DG_ERR_INVALID): in O(count) when the offsets ascend
 * (the usual layout of a bucket), else by sorting a copy in
 * O(count log count), the only allocation on this path (DG_ERR_NOMEM if it
 * fails). Empty regions never overlap. Overlap between the flat buffer and
 * the tensors themselves is the caller's business.
 */
#include <stdlib.h>
#include <string.h>

#include "dg_internal.h"

typedef struct region {
	int64_t off, n;
} region;

static int region_cmp(const void *a, const void *b)
{
	const region *x = a, *y = b;
	return (x->off > y->off) - (x->off < y->off);
}

static dg_status check_regions(const int64_t *offs, const int64_t *ns, int count, int64_t flat_n)
{
	int ascending = 1;
	int64_t prev_end = 0;
	for (int i = 0; i < count; i++) {
		if (offs[i] < 0 || offs[i] > flat_n - ns[i])
			return DG_ERR_SIZE;
		if (ns[i] == 0)
			continue;
		if (offs[i] < prev_end)
			ascending = 0;
		prev_end = offs[i] + ns[i];
	}
	if (ascending)
		return DG_OK;
	region *r = malloc((size_t)count * sizeof *r);
	if (r == NULL)
		return DG_ERR_NOMEM;
	int m = 0;
	for (int i = 0; i < count; i++)
		if (ns[i] > 0)
			r[m++] = (region){offs[i], ns[i]};
	qsort(r, (size_t)m, sizeof *r, region_cmp);
	dg_status st = DG_OK;
	for (int i = 1; i < m && st == DG_OK; i++)
		if (r[i].off < r[i - 1].off + r[i - 1].n)
			st = DG_ERR_INVALID;
	free(r);
	return st;
}

typedef struct pack_job {
	size_t es;
	const void *const *tensors;
	const int64_t *ns, *offs;
	int count;
	char *flat;
	int unpack;
	void (*copy)(void *d, const void *s, int64_t bytes);
} pack_job;

static void plain_copy(void *d, const void *s, int64_t bytes) { memcpy(d, s, (size_t)bytes); }

static int pack_run(const void *v, int i, int64_t off, int64_t len)
{
	const pack_job *j = v;
	char *t = (char *)j->tensors[i] + (size_t)off * j->es;
	char *f = j->flat + (size_t)(j->offs[i] + off) * j->es;
	if (j->unpack)
		j->copy(t, f, len * (int64_t)j->es);
	else
		j->copy(f, t, len * (int64_t)j->es);
	return 0;
}

static void pack_task(void *v, int64_t lo, int64_t hi)
{
	const pack_job *j = v;
	dg_list_run(j->ns, j->count, lo, hi, pack_run, j);
}

static dg_status pack_common(dg_ctx *ctx, dg_dtype t, const void *const *tensors, const int64_t *ns,
			     const int64_t *offs, int count, void *flat, int64_t flat_n, int unpack)
{
	if (ctx == NULL || flat_n < 0 || (flat == NULL && flat_n > 0))
		return DG_ERR_INVALID;
	size_t es = dg_dtype_size(t);
	if (es == 0)
		return DG_ERR_DTYPE;
	int64_t total;
	dg_status st = dg_check_list(tensors, ns, count, &total);
	if (st != DG_OK)
		return st;
	if (count > 0 && offs == NULL)
		return DG_ERR_INVALID;
	if ((uint64_t)flat_n > SIZE_MAX / es)
		return DG_ERR_SIZE;
	st = check_regions(offs, ns, count, flat_n);
	if (st != DG_OK)
		return st;
	pack_job j = {es, tensors, ns, offs, count, flat, unpack, plain_copy};
	if (total * (int64_t)es >= DG_STREAM_BYTES && ctx->k->copy_stream != NULL)
		j.copy = ctx->k->copy_stream;
	/* memcpy moves bytes, so weigh the work by element size */
	int64_t work = total > INT64_MAX / 8 ? INT64_MAX : total * (int64_t)es / 4;
	dg_parallel_for(ctx, total, DG_GRAIN, work, pack_task, &j);
	return DG_OK;
}

dg_status dg_pack(dg_ctx *ctx, dg_dtype t, const void *const *srcs, const int64_t *ns, const int64_t *offs,
		  int count, void *flat, int64_t flat_n)
{
	return pack_common(ctx, t, srcs, ns, offs, count, flat, flat_n, 0);
}

dg_status dg_unpack(dg_ctx *ctx, dg_dtype t, const void *flat, int64_t flat_n, const int64_t *offs,
		    const int64_t *ns, void *const *dsts, int count)
{
	/* the flat buffer is only read on this path */
	return pack_common(ctx, t, (const void *const *)dsts, ns, offs, count, (void *)flat, flat_n, 1);
}
