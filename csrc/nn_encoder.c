/* nn_encoder.c — token + learned position embedding. */
#include "nn_internal.h"

typedef struct enc_job {
	dg_ctx *ctx;
	float *out;
	void *dwte, *dwpe;
	const void *wte, *wpe;
	const float *dout;
	const int32_t *tok;
	dg_dtype wt, gt;
	int64_t t, c;
	int64_t n;
	/* half gradients: slot[r] indexes tok[r] among the nd distinct tokens,
	 * first[k] is the k-th of them in order of first appearance */
	const int32_t *slot, *first;
	int64_t nd;
	int failed;
} enc_job;

DG_NN_INLINE void enc_fwd_rows(const enc_job *j, int64_t lo, int64_t hi, dg_dtype wt)
{
	for (int64_t r = lo; r < hi; r++) {
		const int64_t e = (int64_t)j->tok[r] * j->c, p = (r % j->t) * j->c;
		float *o = j->out + r * j->c;
		for (int64_t i = 0; i < j->c; i++)
			o[i] = dg_load_f(wt, j->wte, e + i) + dg_load_f(wt, j->wpe, p + i);
	}
}

static void enc_fwd_task(void *v, int64_t lo, int64_t hi)
{
	const enc_job *j = v;
	DG_NN_BY_DTYPE(j->wt, enc_fwd_rows, j, lo, hi);
}

dg_status dg_nn_encoder_forward(dg_ctx *ctx, float *out, const int32_t *tok, const float *wte, const float *wpe,
				int64_t b, int64_t t, int64_t c, int64_t v)
{
	return dg_nn_encoder_forward_mixed(ctx, out, tok, DG_F32, wte, wpe, b, t, c, v);
}

dg_status dg_nn_encoder_forward_mixed(dg_ctx *ctx, float *out, const int32_t *tok, dg_dtype wt, const void *wte,
				      const void *wpe, int64_t b, int64_t t, int64_t c, int64_t v)
{
	if (ctx == NULL || out == NULL || tok == NULL || wte == NULL || wpe == NULL || b < 0 || t < 0 || c < 0 || v < 0)
		return DG_ERR_INVALID;
	if (!dg_is_float(wt))
		return DG_ERR_DTYPE;
	if (!dg_nn_ids_ok(tok, b * t, v))
		return DG_ERR_INVALID;
	enc_job j = {.out = out, .wte = wte, .wpe = wpe, .tok = tok, .wt = wt, .t = t, .c = c, .n = b * t};
	dg_parallel_for(ctx, b * t, DG_NN_ROW_GRAIN, b * t * c * 2, enc_fwd_task, &j);
	return DG_OK;
}

/* each thread owns channels [lo, hi) of every row, so no two threads add to
 * the same gradient element and every sum runs in token order */
static void enc_bwd_task(void *v, int64_t lo, int64_t hi)
{
	const enc_job *j = v;
	for (int64_t r = 0; r < j->n; r++) {
		const float *d = j->dout + r * j->c;
		if (j->dwte != NULL) {
			float *g = (float *)j->dwte + (int64_t)j->tok[r] * j->c;
			for (int64_t i = lo; i < hi; i++)
				g[i] += d[i];
		}
		if (j->dwpe != NULL) {
			float *g = (float *)j->dwpe + (r % j->t) * j->c;
			for (int64_t i = lo; i < hi; i++)
				g[i] += d[i];
		}
	}
}

/* sums, for channels [c0, c0+w), the rows of dout into acc[slot of row r],
 * in row order, then adds acc[k] into grad row row_of(k) with one rounding */
static void enc_sum_add(const enc_job *j, float *acc, int64_t nslots, int by_token, void *grad, int64_t c0,
			int64_t w)
{
	memset(acc, 0, (size_t)(nslots * w) * sizeof(float));
	for (int64_t r = 0; r < j->n; r++) {
		const float *d = j->dout + r * j->c + c0;
		float *a = acc + (by_token ? (int64_t)j->slot[r] : r % j->t) * w;
		for (int64_t i = 0; i < w; i++)
			a[i] += d[i];
	}
	for (int64_t k = 0; k < nslots; k++) {
		int64_t row = by_token ? (int64_t)j->first[k] : k;
		dg_nn_grad_add(j->ctx->k, j->gt, grad, row * j->c + c0, acc + k * w, w);
	}
}

/* half gradients: the thread still owns channels [lo, hi), now in blocks
 * narrow enough that one float32 accumulator per distinct token (or
 * position) fits in a tile */
static void enc_bwd_half_task(void *v, int64_t lo, int64_t hi)
{
	enc_job *j = v;
	const int64_t tslots = j->dwpe != NULL ? j->t : 0, slots = j->nd > tslots ? j->nd : tslots;
	int64_t w = DG_NN_TILE_FLOATS / (slots > 0 ? slots : 1);
	w = w < 1 ? 1 : (w > hi - lo ? hi - lo : w);
	const size_t bytes = (size_t)(slots * w) * sizeof(float);
	float *acc = dg_scratch_alloc(j->ctx, bytes);
	if (acc == NULL) {
		dg_nn_failed(&j->failed);
		return;
	}
	for (int64_t c0 = lo; c0 < hi; c0 += w) {
		const int64_t cw = hi - c0 < w ? hi - c0 : w;
		if (j->dwte != NULL)
			enc_sum_add(j, acc, j->nd, 1, j->dwte, c0, cw);
		if (j->dwpe != NULL)
			enc_sum_add(j, acc, j->t, 0, j->dwpe, c0, cw);
	}
	dg_scratch_free(j->ctx, acc, bytes);
}

dg_status dg_nn_encoder_backward(dg_ctx *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tok,
				 int64_t b, int64_t t, int64_t c, int64_t v)
{
	return dg_nn_encoder_backward_mixed(ctx, DG_F32, dwte, dwpe, dout, tok, b, t, c, v);
}

dg_status dg_nn_encoder_backward_mixed(dg_ctx *ctx, dg_dtype gt, void *dwte, void *dwpe, const float *dout,
				       const int32_t *tok, int64_t b, int64_t t, int64_t c, int64_t v)
{
	if (ctx == NULL || dout == NULL || tok == NULL || b < 0 || t < 0 || c < 0 || v < 0)
		return DG_ERR_INVALID;
	if (!dg_is_float(gt))
		return DG_ERR_DTYPE;
	if (!dg_nn_ids_ok(tok, b * t, v))
		return DG_ERR_INVALID;
	const int64_t n = b * t;
	enc_job j = {.ctx = ctx, .dwte = dwte, .dwpe = dwpe, .dout = dout, .tok = tok, .gt = gt, .t = t, .c = c,
		     .n = n};
	if (gt == DG_F32) {
		dg_parallel_for(ctx, c, DG_NN_COL_GRAIN, n * c * 2, enc_bwd_task, &j);
		return DG_OK;
	}
	if (n == 0 || c == 0 || (dwte == NULL && dwpe == NULL))
		return DG_OK;
	if (n > INT32_MAX || v > INT32_MAX) /* token slots are int32 */
		return DG_ERR_SIZE;
	/* number the distinct tokens in order of first appearance */
	const size_t bytes = (size_t)(v + 2 * n) * sizeof(int32_t);
	int32_t *map = dg_scratch_alloc(ctx, bytes);
	if (map == NULL)
		return DG_ERR_NOMEM;
	int32_t *slot = map + v, *first = slot + n;
	for (int64_t i = 0; i < v; i++)
		map[i] = -1;
	int64_t nd = 0;
	for (int64_t r = 0; r < n; r++) {
		if (map[tok[r]] < 0) {
			map[tok[r]] = (int32_t)nd;
			first[nd++] = tok[r];
		}
		slot[r] = map[tok[r]];
	}
	j.slot = slot, j.first = first, j.nd = dwte != NULL ? nd : 0;
	dg_parallel_for(ctx, c, DG_NN_COL_GRAIN, n * c * 2, enc_bwd_half_task, &j);
	dg_scratch_free(ctx, map, bytes);
	return j.failed ? DG_ERR_NOMEM : DG_OK;
}
