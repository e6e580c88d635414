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

static int targets_ok(const int32_t *t, int64_t n, int64_t v)
{
	for (int64_t i = 0; i < n; i++)
		if (t[i] < 0 || t[i] >= v)
			return 0;
	return 1;
}

static void xent_fwd_task(void *vj, int64_t lo, int64_t hi)
{
	const xent_job *j = vj;
	const int64_t V = j->v;
	for (int64_t r = lo; r < hi; r++) {
		const float *x = j->logits + r * V;
		float *p = j->probs + r * V;
		/* read before p (which may alias x) is written: the loss in
		 * log-sum-exp form stays exact when the target's probability
		 * underflows */
		float xt = x[j->targets[r]];
		float mx = dg_nn_row_max(x, V);
		dg_nn_softmax_exps(j->isa, p, x, V, mx);
		/* the normaliser in double: V is large, and float32 summation
		 * error would show first in the loss */
		double sum = 0.0;
		for (int64_t i = 0; i < V; i++)
			sum += p[i];
		float inv = (float)(1.0 / sum);
		for (int64_t i = 0; i < V; i++)
			p[i] *= inv;
		j->losses[r] = (float)(log(sum) - ((double)xt - (double)mx));
	}
}

dg_status dg_nn_softmax_xent_forward(dg_ctx *ctx, float *probs, float *losses, const float *logits,
				     const int32_t *targets, int64_t n, int64_t v)
{
	if (ctx == NULL || probs == NULL || losses == NULL || logits == NULL || targets == NULL || n < 0 || v <= 0)
		return DG_ERR_INVALID;
	if (!targets_ok(targets, n, v))
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
	if (!targets_ok(targets, n, v))
		return DG_ERR_INVALID;
	xent_job j = {.dlogits = dlogits, .cprobs = probs, .dlosses = dlosses, .targets = targets, .v = v};
	dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * v * 2, xent_bwd_task, &j);
	return DG_OK;
}
