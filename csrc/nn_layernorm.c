/* nn_layernorm.c — LayerNorm forward/backward; rows split over the pool for
 * the per-row work, channels split for the weight/bias gradient sums (so
 * they run in row order whatever the thread count). */
#include "nn_internal.h"

typedef struct ln_job {
	float *out, *mean, *rstd, *dinp, *dw, *db;
	const float *inp, *w, *b, *dout, *cmean, *crstd;
	float eps;
	int64_t c;
	int64_t n;
} ln_job;

static void ln_fwd_task(void *v, int64_t lo, int64_t hi)
{
	const ln_job *j = v;
	const int64_t c = j->c;
	for (int64_t r = lo; r < hi; r++) {
		const float *x = j->inp + r * c;
		/* statistics in double: C is small, and it keeps the float32
		 * result within an ulp or two of the float64 reference */
		double m = 0.0;
		for (int64_t i = 0; i < c; i++)
			m += x[i];
		m /= (double)c;
		double var = 0.0;
		for (int64_t i = 0; i < c; i++) {
			double d = x[i] - m;
			var += d * d;
		}
		var /= (double)c;
		float s = (float)(1.0 / sqrt(var + (double)j->eps));
		float mf = (float)m;
		float *o = j->out + r * c;
		for (int64_t i = 0; i < c; i++)
			o[i] = dg_nn_ln_out(x[i], mf, s, j->w[i], j->b[i]);
		j->mean[r] = mf;
		j->rstd[r] = s;
	}
}

dg_status dg_nn_layernorm_forward(dg_ctx *ctx, float *out, float *mean, float *rstd, const float *inp,
				  const float *w, const float *b, float eps, int64_t n, int64_t c)
{
	if (ctx == NULL || out == NULL || mean == NULL || rstd == NULL || inp == NULL || w == NULL || b == NULL ||
	    n < 0 || c <= 0 || !(eps >= 0.0f))
		return DG_ERR_INVALID;
	ln_job j = {.out = out, .mean = mean, .rstd = rstd, .inp = inp, .w = w, .b = b, .eps = eps, .c = c, .n = n};
	dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * c * 3, ln_fwd_task, &j);
	return DG_OK;
}

/* dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * w */
static void ln_dinp_task(void *v, int64_t lo, int64_t hi)
{
	const ln_job *j = v;
	const int64_t c = j->c;
	for (int64_t r = lo; r < hi; r++) {
		const float *x = j->inp + r * c, *d = j->dout + r * c;
		float m = j->cmean[r], s = j->crstd[r];
		float a = 0.0f, bsum = 0.0f;
		for (int64_t i = 0; i < c; i++) {
			float norm = dg_nn_ln_norm(x[i], m, s);
			float dn = j->w[i] * d[i];
			a += dn;
			bsum += dn * norm;
		}
		a /= (float)c;
		bsum /= (float)c;
		float *dx = j->dinp + r * c;
		for (int64_t i = 0; i < c; i++) {
			float norm = dg_nn_ln_norm(x[i], m, s);
			float dn = j->w[i] * d[i];
			dx[i] += dg_nn_ln_dinp(dn, norm, a, bsum, s);
		}
	}
}

static void ln_dw_task(void *v, int64_t lo, int64_t hi)
{
	const ln_job *j = v;
	const int64_t c = j->c;
	for (int64_t r = 0; r < j->n; r++) {
		const float *x = j->inp + r * c, *d = j->dout + r * c;
		float m = j->cmean[r], s = j->crstd[r];
		for (int64_t i = lo; i < hi; i++) {
			if (j->dw != NULL)
				j->dw[i] += dg_nn_ln_norm(x[i], m, s) * d[i];
			if (j->db != NULL)
				j->db[i] += d[i];
		}
	}
}

dg_status dg_nn_layernorm_backward(dg_ctx *ctx, float *dinp, float *dw, float *db, const float *dout,
				   const float *inp, const float *w, const float *mean, const float *rstd, int64_t n,
				   int64_t c)
{
	if (ctx == NULL || dout == NULL || inp == NULL || w == NULL || mean == NULL || rstd == NULL || n < 0 ||
	    c <= 0)
		return DG_ERR_INVALID;
	ln_job j = {.dinp = dinp, .dw = dw, .db = db, .inp = inp, .w = w, .dout = dout, .cmean = mean,
		    .crstd = rstd, .c = c, .n = n};
	if (dinp != NULL)
		dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * c * 4, ln_dinp_task, &j);
	if (dw != NULL || db != NULL)
		dg_parallel_for(ctx, c, DG_NN_COL_GRAIN, n * c * 3, ln_dw_task, &j);
	return DG_OK;
}
