/* quant.c — dg_quantize_i8 / dg_dequantize_i8: ZeRO++ qwZ's int8 weight
 * quantizer, split over threads by group; the element math is
 * dg_quant_math.h, shared with cuda/quant.cu. */
#include "dg_internal.h"
#include "dg_quant_math.h"

typedef struct quant_job {
	dg_dtype t;
	const void *x;
	int8_t *q;
	float *scales;
	void *y;
	const int8_t *qin;
	const float *sin;
	int64_t g; /* elements per group */
} quant_job;

static void quant_task(void *v, int64_t lo, int64_t hi)
{
	const quant_job *j = v;
	for (int64_t k = lo; k < hi; k++) {
		int64_t b = k * j->g;
		float m = 0.0f;
		for (int64_t i = 0; i < j->g; i++)
			m = dg_q8_absmax(m, dg_q8_half(j->t, j->x, b + i));
		float mult = dg_q8_mult(m);
		for (int64_t i = 0; i < j->g; i++)
			j->q[b + i] = dg_q8_quantize(dg_q8_half(j->t, j->x, b + i), mult);
		j->scales[k] = 1.0f / mult;
	}
}

static void dequant_task(void *v, int64_t lo, int64_t hi)
{
	const quant_job *j = v;
	for (int64_t k = lo; k < hi; k++) {
		float s = j->sin[k];
		int64_t b = k * j->g;
		for (int64_t i = 0; i < j->g; i++)
			dg_q8_store(j->t, j->y, b + i, j->qin[b + i], s);
	}
}

static dg_status quant_check(dg_ctx *ctx, dg_dtype t, const void *a, const void *b, const void *c, int64_t n,
			     int64_t groups)
{
	if (ctx == NULL || n < 0 || groups < 1)
		return DG_ERR_INVALID;
	if (!dg_is_float(t))
		return DG_ERR_DTYPE;
	if (n % groups != 0)
		return DG_ERR_SIZE;
	if (n > 0 && (a == NULL || b == NULL || c == NULL))
		return DG_ERR_INVALID;
	return DG_OK;
}

dg_status dg_quantize_i8(dg_ctx *ctx, dg_dtype t, const void *x, int8_t *q, float *scales, int64_t n,
			 int64_t groups)
{
	dg_status st = quant_check(ctx, t, x, q, scales, n, groups);
	if (st != DG_OK || n == 0)
		return st;
	quant_job j = {.t = t, .x = x, .q = q, .scales = scales, .g = n / groups};
	dg_parallel_for(ctx, groups, 1, n * 2, quant_task, &j);
	return DG_OK;
}

dg_status dg_dequantize_i8(dg_ctx *ctx, dg_dtype t, const int8_t *q, const float *scales, void *y, int64_t n,
			   int64_t groups)
{
	dg_status st = quant_check(ctx, t, q, scales, y, n, groups);
	if (st != DG_OK || n == 0)
		return st;
	quant_job j = {.t = t, .y = y, .qin = q, .sin = scales, .g = n / groups};
	dg_parallel_for(ctx, groups, 1, n, dequant_task, &j);
	return DG_OK;
}
