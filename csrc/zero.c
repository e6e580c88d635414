/* zero.c — dg_zero: memset of a list of buffers, split over the pool by the
 * list's concatenated byte space (gradient buffers and activation arenas are
 * tens of megabytes: one thread alone leaves the others idle for that long). */
#include <string.h>

#include "dg_internal.h"

#define ZERO_GRAIN ((int64_t)4096) /* bytes: one page per unit */

typedef struct zero_job {
	void *const *xs;
	const int64_t *bytes;
	int count;
} zero_job;

static int zero_run(const void *v, int i, int64_t off, int64_t len)
{
	const zero_job *j = v;
	memset((char *)j->xs[i] + off, 0, (size_t)len);
	return 0;
}

static void zero_task(void *v, int64_t lo, int64_t hi)
{
	const zero_job *j = v;
	dg_list_run(j->bytes, j->count, lo, hi, zero_run, j);
}

dg_status dg_zero(dg_ctx *ctx, void *const *xs, const int64_t *bytes, int count)
{
	if (ctx == NULL)
		return DG_ERR_INVALID;
	int64_t total;
	dg_status st = dg_check_list((const void *const *)xs, bytes, count, &total);
	if (st != DG_OK)
		return st;
	zero_job j = {xs, bytes, count};
	dg_parallel_for(ctx, total, ZERO_GRAIN, total / 4, zero_task, &j);
	return DG_OK;
}
