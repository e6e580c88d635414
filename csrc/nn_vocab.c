/* nn_vocab.c — the vocabulary-parallel ends of a tensor-parallel GPT: the
 * cross-entropy over one rank's slice of the logits, in the three steps the
 * group's all-reduces separate, and the embedding's mask of the rows whose
 * token another rank holds. The element math is dg_nn_math.h's dg_nn_vxent_*
 * (the arithmetic of the Go loops these replaced); every row is one thread's,
 * in element order, so the bits do not depend on the threads. */
#if defined(__clang__)
#pragma clang fp contract(off) /* see nn_gelu.c */
#endif
#include "nn_internal.h"

typedef struct vocab_job {
	float *x, *maxes, *sums, *tlogits;
	const float *cx, *cmaxes, *csums;
	const int32_t *ids;
	int64_t v, lo, c;
	float d;
} vocab_job;

/* one row's max, a chain in element order */
static float vmax_row(const float *x, int64_t v)
{
	float m = -INFINITY;
	for (int64_t i = 0; i < v; i++)
		m = dg_nn_vxent_max(m, x[i]);
	return m;
}

/* The max of DG_NN_SUM_ROWS rows side by side, each its own chain in
 * element order (as dg_nn_row_sums does the sums): a chain waits on the
 * max's latency at every element, a block of them once per element. */
static DG_NO_SLP void vmax_task(void *vj, int64_t lo, int64_t hi)
{
	const vocab_job *j = vj;
	const int64_t V = j->v;
	int64_t r = lo;
	for (; r + DG_NN_SUM_ROWS <= hi; r += DG_NN_SUM_ROWS) {
		const float *p0 = j->cx + r * V, *p1 = p0 + V, *p2 = p1 + V, *p3 = p2 + V, *p4 = p3 + V, *p5 = p4 + V,
			    *p6 = p5 + V, *p7 = p6 + V;
		float m0 = -INFINITY, m1 = m0, m2 = m0, m3 = m0, m4 = m0, m5 = m0, m6 = m0, m7 = m0;
		for (int64_t i = 0; i < V; i++) {
			m0 = dg_nn_vxent_max(m0, p0[i]);
			m1 = dg_nn_vxent_max(m1, p1[i]);
			m2 = dg_nn_vxent_max(m2, p2[i]);
			m3 = dg_nn_vxent_max(m3, p3[i]);
			m4 = dg_nn_vxent_max(m4, p4[i]);
			m5 = dg_nn_vxent_max(m5, p5[i]);
			m6 = dg_nn_vxent_max(m6, p6[i]);
			m7 = dg_nn_vxent_max(m7, p7[i]);
		}
		float *o = j->maxes + r;
		o[0] = m0, o[1] = m1, o[2] = m2, o[3] = m3, o[4] = m4, o[5] = m5, o[6] = m6, o[7] = m7;
	}
	for (; r < hi; r++)
		j->maxes[r] = vmax_row(j->cx + r * V, V);
}

dg_status dg_nn_vocab_xent_max(dg_ctx *ctx, float *maxes, const float *logits, int64_t n, int64_t v)
{
	if (ctx == NULL || maxes == NULL || logits == NULL || n < 0 || v <= 0)
		return DG_ERR_INVALID;
	vocab_job j = {.cx = logits, .maxes = maxes, .v = v};
	dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * v, vmax_task, &j);
	return DG_OK;
}

static DG_VECTORISE void vexp_row(float *x, int64_t v, float mx)
{
	for (int64_t i = 0; i < v; i++)
		x[i] = dg_nn_vxent_exp(x[i] - mx);
}

/* the target's logit minus the max where this slice holds it, else 0 */
static float vtarget(const vocab_job *j, int64_t r, const float *x, float mx)
{
	int64_t t = (int64_t)j->ids[r] - j->lo;
	return t >= 0 && t < j->v ? x[t] - mx : 0.0f;
}

static void vexp_task(void *vj, int64_t lo, int64_t hi)
{
	const vocab_job *j = vj;
	const int64_t V = j->v;
	for (int64_t r0 = lo; r0 < hi; r0 += DG_NN_SUM_ROWS) {
		const int64_t m = hi - r0 < DG_NN_SUM_ROWS ? hi - r0 : DG_NN_SUM_ROWS;
		double sum[DG_NN_SUM_ROWS];
		for (int64_t k = 0; k < m; k++) {
			float *x = j->x + (r0 + k) * V, mx = j->cmaxes[r0 + k];
			/* read before the row becomes its weights */
			j->tlogits[r0 + k] = vtarget(j, r0 + k, x, mx);
			vexp_row(x, V, mx);
		}
		/* the sum in double, in element order, rounded once */
		dg_nn_row_sums(j->x + r0 * V, V, m, sum);
		for (int64_t k = 0; k < m; k++)
			j->sums[r0 + k] = (float)sum[k];
	}
}

dg_status dg_nn_vocab_xent_exp(dg_ctx *ctx, float *logits, float *sums, float *tlogits, const float *maxes,
			       const int32_t *targets, int64_t n, int64_t v, int64_t lo, int64_t vocab)
{
	if (ctx == NULL || logits == NULL || sums == NULL || tlogits == NULL || maxes == NULL || targets == NULL ||
	    n < 0 || v <= 0 || lo < 0 || lo > vocab - v)
		return DG_ERR_INVALID;
	if (!dg_nn_ids_ok(targets, n, vocab))
		return DG_ERR_INVALID;
	vocab_job j = {.x = logits, .sums = sums, .tlogits = tlogits, .cmaxes = maxes, .ids = targets, .v = v, .lo = lo};
	dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * v * 8, vexp_task, &j);
	return DG_OK;
}

static DG_VECTORISE void vgrad_row(float *x, int64_t v, float inv, float d)
{
	for (int64_t i = 0; i < v; i++)
		x[i] = dg_nn_vxent_grad(x[i], inv, 0, d);
}

static void vgrad_task(void *vj, int64_t lo, int64_t hi)
{
	const vocab_job *j = vj;
	const int64_t V = j->v;
	for (int64_t r = lo; r < hi; r++) {
		float *x = j->x + r * V, inv = 1.0f / j->csums[r];
		int64_t t = (int64_t)j->ids[r] - j->lo;
		/* the target apart, so the loop vectorises; its weight read
		 * first */
		float w = t >= 0 && t < V ? x[t] : 0.0f;
		vgrad_row(x, V, inv, j->d);
		if (t >= 0 && t < V)
			x[t] = dg_nn_vxent_grad(w, inv, 1, j->d);
	}
}

dg_status dg_nn_vocab_xent_grad(dg_ctx *ctx, float *logits, const float *sums, const int32_t *targets, float d,
				int64_t n, int64_t v, int64_t lo)
{
	if (ctx == NULL || logits == NULL || sums == NULL || targets == NULL || n < 0 || v <= 0 || lo < 0)
		return DG_ERR_INVALID;
	vocab_job j = {.x = logits, .csums = sums, .ids = targets, .v = v, .lo = lo, .d = d};
	dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * v * 2, vgrad_task, &j);
	return DG_OK;
}

static void vclear_task(void *vj, int64_t lo, int64_t hi)
{
	const vocab_job *j = vj;
	for (int64_t r = lo; r < hi; r++) {
		int64_t t = (int64_t)j->ids[r] - j->lo;
		if (t < 0 || t >= j->v)
			memset(j->x + r * j->c, 0, (size_t)j->c * sizeof(float));
	}
}

dg_status dg_nn_vocab_clear_rows(dg_ctx *ctx, float *x, const int32_t *ids, int64_t n, int64_t c, int64_t lo,
				 int64_t v)
{
	if (ctx == NULL || x == NULL || ids == NULL || n < 0 || c < 0 || lo < 0 || v < 0)
		return DG_ERR_INVALID;
	vocab_job j = {.x = x, .ids = ids, .c = c, .lo = lo, .v = v};
	dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * c, vclear_task, &j);
	return DG_OK;
}
