/* nn_encoder.c — token + learned position embedding. */
#include "nn_internal.h"

typedef struct enc_job {
	float *out, *dwte, *dwpe;
	const float *wte, *wpe, *dout;
	const int32_t *tok;
	int64_t t, c;
	int64_t n;
} enc_job;

static int tokens_ok(const int32_t *tok, int64_t n, int64_t v)
{
	for (int64_t i = 0; i < n; i++)
		if (tok[i] < 0 || tok[i] >= v)
			return 0;
	return 1;
}

static void enc_fwd_task(void *v, int64_t lo, int64_t hi)
{
	const enc_job *j = v;
	for (int64_t r = lo; r < hi; r++) {
		const float *e = j->wte + (int64_t)j->tok[r] * j->c;
		const float *p = j->wpe + (r % j->t) * j->c;
		float *o = j->out + r * j->c;
		for (int64_t i = 0; i < j->c; i++)
			o[i] = e[i] + p[i];
	}
}

dg_status dg_nn_encoder_forward(dg_ctx *ctx, float *out, const int32_t *tok, const float *wte, const float *wpe,
				int64_t b, int64_t t, int64_t c, int64_t v)
{
	if (ctx == NULL || out == NULL || tok == NULL || wte == NULL || wpe == NULL || b < 0 || t < 0 || c < 0 || v < 0)
		return DG_ERR_INVALID;
	if (!tokens_ok(tok, b * t, v))
		return DG_ERR_INVALID;
	enc_job j = {.out = out, .wte = wte, .wpe = wpe, .tok = tok, .t = t, .c = c, .n = b * t};
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
			float *g = j->dwte + (int64_t)j->tok[r] * j->c;
			for (int64_t i = lo; i < hi; i++)
				g[i] += d[i];
		}
		if (j->dwpe != NULL) {
			float *g = j->dwpe + (r % j->t) * j->c;
			for (int64_t i = lo; i < hi; i++)
				g[i] += d[i];
		}
	}
}

dg_status dg_nn_encoder_backward(dg_ctx *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tok,
				 int64_t b, int64_t t, int64_t c, int64_t v)
{
	if (ctx == NULL || dout == NULL || tok == NULL || b < 0 || t < 0 || c < 0 || v < 0)
		return DG_ERR_INVALID;
	if (!tokens_ok(tok, b * t, v))
		return DG_ERR_INVALID;
	enc_job j = {.dwte = dwte, .dwpe = dwpe, .dout = dout, .tok = tok, .t = t, .c = c, .n = b * t};
	dg_parallel_for(ctx, c, DG_NN_COL_GRAIN, b * t * c * 2, enc_bwd_task, &j);
	return DG_OK;
}
