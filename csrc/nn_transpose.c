/* nn_transpose.c — the block transpose that packs and unpacks Ulysses
 * sequence parallelism's all-to-alls: a copy, so every backend moves the
 * same bits. */
#include "nn_internal.h"

typedef struct transpose_job {
	float *dst;
	const float *src;
	int64_t a, b, w;
} transpose_job;

/* blocks [lo, hi) of src in order: block i*b + j goes to j*a + i */
static void transpose_task(void *vj, int64_t lo, int64_t hi)
{
	const transpose_job *j = vj;
	for (int64_t k = lo; k < hi; k++) {
		int64_t i = k / j->b, jj = k % j->b;
		memcpy(j->dst + (jj * j->a + i) * j->w, j->src + k * j->w, (size_t)j->w * sizeof(float));
	}
}

dg_status dg_nn_transpose_blocks(dg_ctx *ctx, float *dst, const float *src, int64_t a, int64_t b, int64_t w)
{
	if (ctx == NULL || a < 0 || b < 0 || w < 0)
		return DG_ERR_INVALID;
	int64_t n = a * b * w;
	if (n == 0)
		return DG_OK;
	if (dst == NULL || src == NULL)
		return DG_ERR_INVALID;
	/* as addresses: the two ranges must not overlap */
	uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src, bytes = (uintptr_t)n * sizeof(float);
	if (d < s + bytes && s < d + bytes)
		return DG_ERR_INVALID;
	transpose_job j = {.dst = dst, .src = src, .a = a, .b = b, .w = w};
	dg_parallel_for(ctx, a * b, 1 + 4096 / (w > 0 ? w : 1), n * 2, transpose_task, &j);
	return DG_OK;
}
