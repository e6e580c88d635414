/* nn_attention.c — causal multi-head self-attention with an optional
 * sliding window, llm.c's loop form: one (batch, head, query) row of scores
 * at a time. The saved softmax weights are rows of span = min(W, T) floats
 * (dg_nn_att_span), key k of query q at slot k - first_key(q), so memory and
 * work both grow as T*W; without a window the rows are T long, slot k. */
#include "nn_internal.h"

typedef struct att_job {
	float *out, *att, *dqkv;
	const float *qkv, *catt, *dout;
	int64_t t, nh, hs, window, span;
} att_job;

/* unit u = (b*NH + h)*T + q */
static void att_fwd_task(void *v, int64_t lo, int64_t hi)
{
	const att_job *j = v;
	const int64_t T = j->t, NH = j->nh, HS = j->hs, C = NH * HS, C3 = 3 * C;
	const float scale = dg_nn_att_scale(HS);
	for (int64_t u = lo; u < hi; u++) {
		int64_t q = u % T, h = (u / T) % NH, b = u / (T * NH);
		const float *base = j->qkv + b * T * C3;
		const float *qv = base + q * C3 + h * HS;
		int64_t k0 = dg_nn_first_key(q, j->window);
		float *row = j->att + u * j->span - k0; /* row[k] for k in k0..q */
		float mx = -INFINITY;
		for (int64_t k = k0; k <= q; k++) {
			const float *kv = base + k * C3 + C + h * HS;
			float s = 0.0f;
			for (int64_t i = 0; i < HS; i++)
				s += qv[i] * kv[i];
			s *= scale;
			row[k] = s;
			if (s > mx)
				mx = s;
		}
		float sum = 0.0f;
		for (int64_t k = k0; k <= q; k++) {
			float e = dg_nn_softmax_exp(row[k], mx);
			row[k] = e;
			sum += e;
		}
		float inv = 1.0f / sum;
		for (int64_t k = k0; k < k0 + j->span; k++)
			row[k] = k <= q ? row[k] * inv : 0.0f;
		float *o = j->out + (b * T + q) * C + h * HS;
		for (int64_t i = 0; i < HS; i++)
			o[i] = 0.0f;
		for (int64_t k = k0; k <= q; k++) {
			const float *vv = base + k * C3 + 2 * C + h * HS;
			float a = row[k];
			for (int64_t i = 0; i < HS; i++)
				o[i] += a * vv[i];
		}
	}
}

dg_status dg_nn_attention_forward(dg_ctx *ctx, float *out, float *att, const float *qkv, int64_t b, int64_t t,
				  int64_t nh, int64_t hs, int64_t window)
{
	if (ctx == NULL || out == NULL || att == NULL || qkv == NULL || b < 0 || t < 0 || nh <= 0 || hs <= 0)
		return DG_ERR_INVALID;
	int64_t span = dg_nn_att_span(t, window);
	att_job j = {.out = out, .att = att, .qkv = qkv, .t = t, .nh = nh, .hs = hs, .window = window, .span = span};
	int64_t units = b * nh * t;
	dg_parallel_for(ctx, units, 1, units * span * hs * 2, att_fwd_task, &j);
	return DG_OK;
}

/* unit u = b*NH + h: a thread owns one head of one sequence, so the key and
 * value gradients, summed over queries, never race. datt is not stored: it
 * is recomputed (a dot product) in the second pass instead of needing a
 * T-long scratch row per thread. */
static void att_bwd_task(void *v, int64_t lo, int64_t hi)
{
	const att_job *j = v;
	const int64_t T = j->t, NH = j->nh, HS = j->hs, C = NH * HS, C3 = 3 * C;
	const float scale = dg_nn_att_scale(HS);
	for (int64_t u = lo; u < hi; u++) {
		int64_t h = u % NH, b = u / NH;
		const float *base = j->qkv + b * T * C3;
		float *dbase = j->dqkv + b * T * C3;
		for (int64_t q = 0; q < T; q++) {
			int64_t k0 = dg_nn_first_key(q, j->window);
			const float *row = j->catt + (u * T + q) * j->span - k0;
			const float *d = j->dout + (b * T + q) * C + h * HS;
			/* pass 1: sum_k att[k] * datt[k], datt[k] = dout . v_k */
			float dot = 0.0f;
			for (int64_t k = k0; k <= q; k++) {
				const float *vv = base + k * C3 + 2 * C + h * HS;
				float da = 0.0f;
				for (int64_t i = 0; i < HS; i++)
					da += d[i] * vv[i];
				dot += row[k] * da;
			}
			const float *qv = base + q * C3 + h * HS;
			float *dq = dbase + q * C3 + h * HS;
			for (int64_t k = k0; k <= q; k++) {
				const float *kv = base + k * C3 + C + h * HS;
				const float *vv = base + k * C3 + 2 * C + h * HS;
				float *dk = dbase + k * C3 + C + h * HS;
				float *dv = dbase + k * C3 + 2 * C + h * HS;
				float da = 0.0f;
				for (int64_t i = 0; i < HS; i++)
					da += d[i] * vv[i];
				/* softmax backward, then the 1/sqrt(HS) scale */
				float ds = dg_nn_att_dscore(row[k], da, dot, scale);
				for (int64_t i = 0; i < HS; i++) {
					dq[i] += ds * kv[i];
					dk[i] += ds * qv[i];
					dv[i] += row[k] * d[i];
				}
			}
		}
	}
}

dg_status dg_nn_attention_backward(dg_ctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *att,
				   int64_t b, int64_t t, int64_t nh, int64_t hs, int64_t window)
{
	if (ctx == NULL || dqkv == NULL || dout == NULL || qkv == NULL || att == NULL || b < 0 || t < 0 || nh <= 0 ||
	    hs <= 0)
		return DG_ERR_INVALID;
	int64_t span = dg_nn_att_span(t, window);
	att_job j = {.dqkv = dqkv,
		     .dout = dout,
		     .qkv = qkv,
		     .catt = att,
		     .t = t,
		     .nh = nh,
		     .hs = hs,
		     .window = window,
		     .span = span};
	int64_t units = b * nh;
	dg_parallel_for(ctx, units, 1, units * t * span * hs * 4, att_bwd_task, &j);
	return DG_OK;
}
