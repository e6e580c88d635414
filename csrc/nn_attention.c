/* nn_attention.c — causal multi-head self-attention with an optional
 * sliding window, flash-attention's tiling on OpenBLAS sgemm: a tile of
 * DG_NN_ATT_TILE queries of one (batch, head) meets the keys any of them
 * sees in one score product, so a thread's working set is a tile x keys
 * block, never a head's T x T scores, and the products run at sgemm's rate
 * instead of one scalar dot product per (query, key).
 *
 * The saved softmax weights are rows of span = min(W, T) floats
 * (dg_nn_att_span), key k of query q at slot k - first_key(q), so memory and
 * work both grow as T*W; without a window the rows are T long, slot k: a
 * tile's scores are computed into its rows and turned into weights there,
 * and the backward reads them in place (no copies). They are the layer's
 * saved activation (deepgo.h), so they stay: the backward
 * reads them back one tile at a time rather than recomputing them from a
 * row's max and sum as flash attention does. The tiles depend on T and the
 * window alone, not on the thread count, so the results do not either. */
#include <cblas.h>

#include "nn_internal.h"

/* Queries per tile: the diagonal tile computes (tile - 1) / 2 masked scores
 * per query for nothing, and a smaller tile makes sgemm calls too thin. */
#define DG_NN_ATT_TILE ((int64_t)32)

/* Scratch up to this many floats (32 KiB) lives on the task's stack. The
 * full layout's forward takes none and its backward one tile (dp): no
 * allocation per call up to T = 256; a window's tiles (span + tile - 1 keys,
 * two in the backward) fit to a span of about 100; longer rows take one
 * dg_scratch_alloc per task. */
#define DG_NN_ATT_STACK_FLOATS ((size_t)8192)

typedef struct att_job {
	dg_ctx *ctx;
	float *out, *att, *dqkv;
	const float *qkv, *catt, *dout;
	int64_t t, nh, hs, window, span;
	int write; /* backward: clear each head's dqkv slices first (dg_nn_attention_backward_write) */
	int failed;
} att_job;

/* keys_of: the tile [q0, q1)'s keys [*kbeg, q1), the union of its queries'. */
static inline int64_t keys_of(const att_job *j, int64_t q0, int64_t q1, int64_t *kbeg)
{
	*kbeg = dg_nn_first_key(q0, j->window);
	return q1 - *kbeg;
}

/* tile_floats: one tile x keys block: a tile sees at most span + tile - 1
 * keys (a window's worth before its first query, plus the tile) */
static inline size_t tile_floats(const att_job *j)
{
	int64_t keys = j->span + DG_NN_ATT_TILE - 1;
	return (size_t)(DG_NN_ATT_TILE * (keys < j->t ? keys : j->t));
}

/* tile_scratch: n floats for a task, from stack (DG_NN_ATT_STACK_FLOATS of
 * them) when they fit, else allocated (free with tile_scratch_free); NULL,
 * recorded in j, when out of memory */
static float *tile_scratch(att_job *j, float *stack, size_t n)
{
	if (n <= DG_NN_ATT_STACK_FLOATS)
		return stack;
	float *p = dg_scratch_alloc(j->ctx, n * sizeof(float));
	if (p == NULL)
		dg_nn_failed(&j->failed);
	return p;
}

static void tile_scratch_free(att_job *j, float *p, const float *stack, size_t n)
{
	if (p != stack)
		dg_scratch_free(j->ctx, p, n * sizeof(float));
}

/* Row sums of a tile, eight rows side by side: each row's float sum runs
 * in its own element order, as one row at a time did, so the bits are
 * the same, but the adder's latency is paid once per eight rows (alone,
 * the chains were a fifth of the attention's time outside sgemm).
 * rows_sum sets out[k] = sum of a[k][i] (b NULL) or of a[k][i] * b[k][i]
 * over i < n[k], for k < m. */
#define SUM_ROWS 8

static DG_NO_SLP void rows_sum(const float *const *a, const float *const *b, const int64_t *n, int64_t m,
			       float *out)
{
	int64_t k = 0;
	for (; k + SUM_ROWS <= m; k += SUM_ROWS) {
		int64_t nmin = n[k];
		for (int l = 1; l < SUM_ROWS; l++)
			nmin = n[k + l] < nmin ? n[k + l] : nmin;
		const float *a0 = a[k], *a1 = a[k + 1], *a2 = a[k + 2], *a3 = a[k + 3], *a4 = a[k + 4],
			    *a5 = a[k + 5], *a6 = a[k + 6], *a7 = a[k + 7];
		float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, s4 = 0.0f, s5 = 0.0f, s6 = 0.0f, s7 = 0.0f;
		if (b == NULL) {
			for (int64_t i = 0; i < nmin; i++) {
				s0 += a0[i], s1 += a1[i], s2 += a2[i], s3 += a3[i];
				s4 += a4[i], s5 += a5[i], s6 += a6[i], s7 += a7[i];
			}
		} else {
			const float *b0 = b[k], *b1 = b[k + 1], *b2 = b[k + 2], *b3 = b[k + 3], *b4 = b[k + 4],
				    *b5 = b[k + 5], *b6 = b[k + 6], *b7 = b[k + 7];
			for (int64_t i = 0; i < nmin; i++) {
				s0 += a0[i] * b0[i], s1 += a1[i] * b1[i], s2 += a2[i] * b2[i], s3 += a3[i] * b3[i];
				s4 += a4[i] * b4[i], s5 += a5[i] * b5[i], s6 += a6[i] * b6[i], s7 += a7[i] * b7[i];
			}
		}
		float s[SUM_ROWS] = {s0, s1, s2, s3, s4, s5, s6, s7};
		for (int l = 0; l < SUM_ROWS; l++) {
			const float *x = a[k + l], *y = b == NULL ? NULL : b[k + l];
			for (int64_t i = nmin; i < n[k + l]; i++)
				s[l] += y == NULL ? x[i] : x[i] * y[i];
			out[k + l] = s[l];
		}
	}
	for (; k < m; k++) {
		float t = 0.0f;
		for (int64_t i = 0; i < n[k]; i++)
			t += b == NULL ? a[k][i] : a[k][i] * b[k][i];
		out[k] = t;
	}
}

/* softmax_rows turns the scaled scores s[m x nk] (row stride ld) of queries
 * q0.. (keys kbeg..) into weights in place, zero where a query does not
 * look, and saves each query's row in att; att NULL means s is att's rows
 * already (the full layout, ld = span), zeroed to the end of the row */
static DG_VECTORISE void softmax_rows(const att_job *j, float *s, int64_t ld, float *att, int64_t q0, int64_t m,
				      int64_t kbeg, int64_t nk)
{
	float *x[DG_NN_ATT_TILE] = {0}, sum[DG_NN_ATT_TILE];
	int64_t n[DG_NN_ATT_TILE] = {0};
	for (int64_t r = 0; r < m; r++) {
		int64_t k0 = dg_nn_first_key(q0 + r, j->window);
		n[r] = q0 + r - k0 + 1;
		x[r] = s + r * ld + (k0 - kbeg); /* x[r][i]: key k0 + i */
		dg_nn_softmax_exps(j->ctx->isa, x[r], x[r], n[r], dg_nn_row_max(j->ctx->isa, x[r], n[r]));
	}
	rows_sum((const float *const *)x, NULL, n, m, sum);
	for (int64_t r = 0; r < m; r++) {
		float *row = s + r * ld, inv = 1.0f / sum[r];
		for (int64_t i = 0; i < n[r]; i++)
			x[r][i] *= inv;
		memset(row, 0, (size_t)(x[r] - row) * sizeof(float));
		if (att == NULL) {
			memset(x[r] + n[r], 0, (size_t)(j->span - (x[r] - row) - n[r]) * sizeof(float));
			continue;
		}
		memset(x[r] + n[r], 0, (size_t)(nk - (x[r] - row) - n[r]) * sizeof(float));
		float *a = att + r * j->span; /* slot k - k0 */
		memcpy(a, x[r], (size_t)n[r] * sizeof(float));
		memset(a + n[r], 0, (size_t)(j->span - n[r]) * sizeof(float));
	}
}

/* unit u = (b*NH + h) * tiles + tile */
static void att_fwd_task(void *v, int64_t lo, int64_t hi)
{
	att_job *j = v;
	const int64_t T = j->t, NH = j->nh, HS = j->hs, C = NH * HS, C3 = 3 * C;
	const int64_t tiles = (T + DG_NN_ATT_TILE - 1) / DG_NN_ATT_TILE;
	const int full = j->span == T;
	float stack[DG_NN_ATT_STACK_FLOATS];
	/* the full layout scores into att itself: no tile */
	size_t n = full ? 0 : tile_floats(j);
	float *s = tile_scratch(j, stack, n);
	if (s == NULL)
		return;
	for (int64_t u = lo; u < hi; u++) {
		int64_t bh = u / tiles, q0 = (u % tiles) * DG_NN_ATT_TILE, h = bh % NH, b = bh / NH;
		int64_t q1 = q0 + DG_NN_ATT_TILE < T ? q0 + DG_NN_ATT_TILE : T, m = q1 - q0, kbeg;
		int64_t nk = keys_of(j, q0, q1, &kbeg);
		const float *base = j->qkv + b * T * C3 + h * HS;
		float *att = j->att + (bh * T + q0) * j->span;
		/* the full layout's rows are the tile's: score into them */
		float *sc = full ? att : s;
		int64_t ld = full ? T : nk;
		dg_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nk, (int)HS, dg_nn_att_scale(HS),
			 base + q0 * C3, (int)C3, base + kbeg * C3 + C, (int)C3, 0.0f, sc, (int)ld);
		softmax_rows(j, sc, ld, full ? NULL : att, q0, m, kbeg, nk);
		dg_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)HS, (int)nk, 1.0f, sc, (int)ld,
			 base + kbeg * C3 + 2 * C, (int)C3, 0.0f, j->out + (b * T + q0) * C + h * HS, (int)C);
	}
	tile_scratch_free(j, s, stack, n);
}

/* att_args: what both directions check; sgemm takes int dimensions (the
 * keys of a tile, at most t, and the row stride 3*nh*hs) */
static dg_status att_args(int64_t b, int64_t t, int64_t nh, int64_t hs)
{
	if (b < 0 || t < 0 || nh <= 0 || hs <= 0)
		return DG_ERR_INVALID;
	return t > INT32_MAX || nh > INT32_MAX / 3 / hs ? DG_ERR_SIZE : DG_OK;
}

dg_status dg_nn_attention_forward(dg_ctx *ctx, float *out, float *att, const float *qkv, int64_t b, int64_t t,
				  int64_t nh, int64_t hs, int64_t window)
{
	if (ctx == NULL || out == NULL || att == NULL || qkv == NULL)
		return DG_ERR_INVALID;
	dg_status st = att_args(b, t, nh, hs);
	if (st != DG_OK)
		return st;
	dg_blas_init();
	int64_t span = dg_nn_att_span(t, window);
	att_job j = {.ctx = ctx, .out = out, .att = att, .qkv = qkv, .t = t, .nh = nh, .hs = hs, .window = window,
		     .span = span};
	int64_t units = b * nh * ((t + DG_NN_ATT_TILE - 1) / DG_NN_ATT_TILE);
	dg_parallel_for(ctx, units, 1, b * nh * t * span * hs * 2, att_fwd_task, &j);
	return j.failed ? DG_ERR_NOMEM : DG_OK;
}

/* dscore_rows turns dp = dout . v (the weights' gradient, m x nk) into the
 * scores' gradient in place, from the saved weights p (row stride ldp, keys
 * from kbeg, zero where a query does not look) */
static DG_VECTORISE void dscore_rows(const att_job *j, float *dp, const float *p, int64_t ldp, int64_t q0,
				     int64_t m, int64_t kbeg, int64_t nk)
{
	const float scale = dg_nn_att_scale(j->hs);
	const float *a[DG_NN_ATT_TILE] = {0};
	float *dx[DG_NN_ATT_TILE] = {0}, dot[DG_NN_ATT_TILE];
	int64_t n[DG_NN_ATT_TILE] = {0};
	for (int64_t r = 0; r < m; r++) {
		int64_t k0 = dg_nn_first_key(q0 + r, j->window);
		n[r] = q0 + r - k0 + 1;
		dx[r] = dp + r * nk + (k0 - kbeg);
		a[r] = p + r * ldp + (k0 - kbeg);
	}
	rows_sum(a, (const float *const *)dx, n, m, dot);
	for (int64_t r = 0; r < m; r++) {
		float *d = dp + r * nk;
		for (int64_t i = 0; i < n[r]; i++)
			dx[r][i] = dg_nn_att_dscore(a[r][i], dx[r][i], dot[r], scale);
		memset(d, 0, (size_t)(dx[r] - d) * sizeof(float));
		memset(dx[r] + n[r], 0, (size_t)(nk - (dx[r] - d) - n[r]) * sizeof(float));
	}
}

/* load_rows copies the saved weights of queries q0..q0+m into p (m x nk,
 * keys kbeg..), zero where a query does not look */
static void load_rows(const att_job *j, float *p, const float *att, int64_t q0, int64_t m, int64_t kbeg, int64_t nk)
{
	for (int64_t r = 0; r < m; r++) {
		int64_t q = q0 + r, k0 = dg_nn_first_key(q, j->window), n = q - k0 + 1;
		float *row = p + r * nk;
		memset(row, 0, (size_t)(k0 - kbeg) * sizeof(float));
		memcpy(row + (k0 - kbeg), att + r * j->span, (size_t)n * sizeof(float));
		memset(row + (k0 - kbeg) + n, 0, (size_t)(nk - (k0 - kbeg) - n) * sizeof(float));
	}
}

/* unit u = b*NH + h: a thread owns one head of one sequence, so the key and
 * value gradients, summed over query tiles, never race. Each tile's saved
 * weights p are read in place in the full layout (the tile's rows of att)
 * and otherwise copied into a tile x keys block; dp (dout . v, then the
 * scores' gradient) is a tile x keys block. The tiles run last to first:
 * in the full layout the last sees every key, so when writing
 * (dg_nn_attention_backward_write) its products write the head's key and
 * value gradients and each tile's write its query rows, with no clearing
 * pass; with a window the head's slices are cleared first. */
static void att_bwd_task(void *v, int64_t lo, int64_t hi)
{
	att_job *j = v;
	const int64_t T = j->t, NH = j->nh, HS = j->hs, C = NH * HS, C3 = 3 * C;
	const int full = j->span == T;
	float stack[DG_NN_ATT_STACK_FLOATS];
	/* dp, and with a window the tile p loads into (buf) */
	size_t n = tile_floats(j), need = full ? n : 2 * n;
	float *buf = tile_scratch(j, stack, need);
	if (buf == NULL)
		return;
	float *dp = full ? buf : buf + n;
	const int64_t last = T > 0 ? (T - 1) / DG_NN_ATT_TILE * DG_NN_ATT_TILE : 0;
	for (int64_t u = lo; u < hi; u++) {
		int64_t h = u % NH, b = u / NH;
		const float *base = j->qkv + b * T * C3 + h * HS;
		float *dbase = j->dqkv + b * T * C3 + h * HS;
		if (j->write && !full) /* this head's q, k and v columns, every row */
			for (int64_t r = 0; r < T; r++)
				for (int64_t part = 0; part < 3; part++)
					memset(dbase + r * C3 + part * C, 0, (size_t)HS * sizeof(float));
		for (int64_t q0 = last; q0 >= 0 && T > 0; q0 -= DG_NN_ATT_TILE) {
			int64_t q1 = q0 + DG_NN_ATT_TILE < T ? q0 + DG_NN_ATT_TILE : T, m = q1 - q0, kbeg;
			int64_t nk = keys_of(j, q0, q1, &kbeg);
			const float *att = j->catt + (u * T + q0) * j->span, *p = att;
			int64_t ldp = T;
			if (!full) {
				load_rows(j, buf, att, q0, m, kbeg, nk);
				p = buf, ldp = nk;
			}
			/* writing: dq's rows are this tile's alone; the first tile
			 * (the last queries) covers every key in the full layout */
			const float qbeta = j->write && full ? 0.0f : 1.0f;
			const float kvbeta = j->write && full && q0 == last ? 0.0f : 1.0f;
			const float *d = j->dout + (b * T + q0) * C + h * HS;
			dg_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nk, (int)HS, 1.0f, d, (int)C,
				 base + kbeg * C3 + 2 * C, (int)C3, 0.0f, dp, (int)nk);
			dscore_rows(j, dp, p, ldp, q0, m, kbeg, nk);
			/* dq += ds k, dk += ds^T q, dv += p^T dout */
			dg_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)HS, (int)nk, 1.0f, dp,
				 (int)nk, base + kbeg * C3 + C, (int)C3, qbeta, dbase + q0 * C3, (int)C3);
			dg_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk, (int)HS, (int)m, 1.0f, dp,
				 (int)nk, base + q0 * C3, (int)C3, kvbeta, dbase + kbeg * C3 + C, (int)C3);
			dg_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk, (int)HS, (int)m, 1.0f, p, (int)ldp,
				 d, (int)C, kvbeta, dbase + kbeg * C3 + 2 * C, (int)C3);
		}
	}
	tile_scratch_free(j, buf, stack, need);
}

static dg_status attention_backward(dg_ctx *ctx, int write, float *dqkv, const float *dout, const float *qkv,
				     const float *att, int64_t b, int64_t t, int64_t nh, int64_t hs, int64_t window)
{
	if (ctx == NULL || dqkv == NULL || dout == NULL || qkv == NULL || att == NULL)
		return DG_ERR_INVALID;
	dg_status st = att_args(b, t, nh, hs);
	if (st != DG_OK)
		return st;
	dg_blas_init();
	int64_t span = dg_nn_att_span(t, window);
	att_job j = {.ctx = ctx,
		     .dqkv = dqkv,
		     .dout = dout,
		     .qkv = qkv,
		     .catt = att,
		     .t = t,
		     .nh = nh,
		     .hs = hs,
		     .window = window,
		     .span = span,
		     .write = write};
	int64_t units = b * nh;
	dg_parallel_for(ctx, units, 1, units * t * span * hs * 4, att_bwd_task, &j);
	return j.failed ? DG_ERR_NOMEM : DG_OK;
}

dg_status dg_nn_attention_backward(dg_ctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *att,
				   int64_t b, int64_t t, int64_t nh, int64_t hs, int64_t window)
{
	return attention_backward(ctx, 0, dqkv, dout, qkv, att, b, t, nh, hs, window);
}

dg_status dg_nn_attention_backward_write(dg_ctx *ctx, float *dqkv, const float *dout, const float *qkv,
					 const float *att, int64_t b, int64_t t, int64_t nh, int64_t hs, int64_t window)
{
	return attention_backward(ctx, 1, dqkv, dout, qkv, att, b, t, nh, hs, window);
}
