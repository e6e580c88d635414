/* nn_crossentropy.c — softmax + cross-entropy over the vocabulary, fused so
 * the logits buffer can hold the probabilities and then their gradient. */
#include "nn_internal.h"

typedef struct xent_job {
	float *probs, *losses, *dlogits;
	const float *logits, *cprobs, *dlosses;
	const int32_t *targets;
	int64_t v;
	dg_isa isa;
} xent_job;

/* Rows per block of the forward. A row's normaliser is a double sum in
 * element order (below), one chain of V dependent adds; summing a block's
 * rows side by side, each in its own order, pays the adder's latency once
 * per block instead of once per row (the chain was half the GPT's
 * cross-entropy) and leaves every row's bits as they were. */
#define XENT_ROWS DG_NN_SUM_ROWS

/* dg_nn_row_sums: scalar on purpose: packed into vectors, the eight loads
 * took a shuffle each, twice the time of eight scalar conversions */
DG_NO_SLP void dg_nn_row_sums(const float *p, int64_t v, int64_t m, double *sum)
{
	if (m < XENT_ROWS) {
		for (int64_t k = 0; k < m; k++) {
			double s = 0.0;
			for (int64_t i = 0; i < v; i++)
				s += p[k * v + i];
			sum[k] = s;
		}
		return;
	}
	/* named, so they stay in registers (an array went through the stack) */
	const float *p0 = p, *p1 = p0 + v, *p2 = p1 + v, *p3 = p2 + v, *p4 = p3 + v, *p5 = p4 + v, *p6 = p5 + v,
		    *p7 = p6 + v;
	double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, s5 = 0.0, s6 = 0.0, s7 = 0.0;
	for (int64_t i = 0; i < v; i++) {
		s0 += p0[i];
		s1 += p1[i];
		s2 += p2[i];
		s3 += p3[i];
		s4 += p4[i];
		s5 += p5[i];
		s6 += p6[i];
		s7 += p7[i];
	}
	sum[0] = s0, sum[1] = s1, sum[2] = s2, sum[3] = s3, sum[4] = s4, sum[5] = s5, sum[6] = s6, sum[7] = s7;
}

static void xent_fwd_task(void *vj, int64_t lo, int64_t hi)
{
	const xent_job *j = vj;
	const int64_t V = j->v;
	for (int64_t r0 = lo; r0 < hi; r0 += XENT_ROWS) {
		const int64_t m = hi - r0 < XENT_ROWS ? hi - r0 : XENT_ROWS;
		float xt[XENT_ROWS], mx[XENT_ROWS];
		double sum[XENT_ROWS];
		for (int64_t k = 0; k < m; k++) {
			const float *x = j->logits + (r0 + k) * V;
			/* read before p (which may alias x) is written: the
			 * loss in log-sum-exp form stays exact when the
			 * target's probability underflows */
			xt[k] = x[j->targets[r0 + k]];
			mx[k] = dg_nn_row_max(j->isa, x, V);
			dg_nn_softmax_exps(j->isa, j->probs + (r0 + k) * V, x, V, mx[k]);
		}
		/* the normaliser in double: V is large, and float32
		 * summation error would show first in the loss */
		dg_nn_row_sums(j->probs + r0 * V, V, m, sum);
		for (int64_t k = 0; k < m; k++) {
			/* the plain loop, as before: a vectorised copy's scalar
			 * tail multiplied inv * p, which kept another NaN than
			 * p * inv where both are NaN */
			float *p = j->probs + (r0 + k) * V, inv = (float)(1.0 / sum[k]);
			for (int64_t i = 0; i < V; i++)
				p[i] *= inv;
			j->losses[r0 + k] = (float)(log(sum[k]) - ((double)xt[k] - (double)mx[k]));
		}
	}
}

dg_status dg_nn_softmax_xent_forward(dg_ctx *ctx, float *probs, float *losses, const float *logits,
				     const int32_t *targets, int64_t n, int64_t v)
{
	if (ctx == NULL || probs == NULL || losses == NULL || logits == NULL || targets == NULL || n < 0 || v <= 0)
		return DG_ERR_INVALID;
	if (!dg_nn_ids_ok(targets, n, v))
		return DG_ERR_INVALID;
	xent_job j = {.probs = probs, .losses = losses, .logits = logits, .targets = targets, .v = v, .isa = ctx->isa};
	dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * v * 4, xent_fwd_task, &j);
	return DG_OK;
}

static DG_VECTORISE void xent_bwd_task(void *vj, int64_t lo, int64_t hi)
{
	const xent_job *j = vj;
	const int64_t V = j->v;
	for (int64_t r = lo; r < hi; r++) {
		const float *p = j->cprobs + r * V;
		float *d = j->dlogits + r * V;
		float dl = j->dlosses[r];
		int32_t tg = j->targets[r];
		/* the target's element apart, so the loop vectorises; its
		 * probability read first, as d may alias p */
		float pt = p[tg];
		for (int64_t i = 0; i < V; i++)
			d[i] = dg_nn_xent_grad(p[i], 0, dl);
		d[tg] = dg_nn_xent_grad(pt, 1, dl);
	}
}

dg_status dg_nn_softmax_xent_backward(dg_ctx *ctx, float *dlogits, const float *probs, const int32_t *targets,
				      const float *dlosses, int64_t n, int64_t v)
{
	if (ctx == NULL || dlogits == NULL || probs == NULL || targets == NULL || dlosses == NULL || n < 0 || v <= 0)
		return DG_ERR_INVALID;
	if (!dg_nn_ids_ok(targets, n, v))
		return DG_ERR_INVALID;
	xent_job j = {.dlogits = dlogits, .cprobs = probs, .dlosses = dlosses, .targets = targets, .v = v};
	dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * v * 2, xent_bwd_task, &j);
	return DG_OK;
}
