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

static void zero_task(void *v, int64_t lo, int64_t hi)
{
	const zero_job *j = v;
	int i;
	int64_t off;
	dg_list_seek(j->bytes, j->count, lo, &i, &off);
	for (int64_t left = hi - lo; left > 0; i++, off = 0) {
		int64_t len = j->bytes[i] - off < left ? j->bytes[i] - off : left;
		if (len > 0)
			memset((char *)j->xs[i] + off, 0, (size_t)len);
		left -= len;
	}
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
