/* nn_matmul.c — the Linear layer's products on the BLAS's sgemm (OpenBLAS, or MKL
 * when DEEPGO_BLAS asks: blas_core.c), split over
 * the ctx pool (one single-threaded sgemm per part). A float32 product
 * C[M x N] = A[M x K] B[K x N] splits the larger of M and N: each part packs
 * the whole of the other operand, so splitting M makes every thread pack
 * all of B (K x N) and splitting N all of A (M x K); with M = 512 tokens and
 * N = 1536 outputs the wrong choice packs three times the bytes per thread
 * and two threads ran the step only 1.7x faster than one. Half-precision
 * weights are widened into float32 tiles that sgemm reads; half-precision
 * gradients get each call's float32 tile added with one rounding. On Intel
 * CPUs with AVX-512 the float32 products run on nn_gemm.c instead
 * (dg_blas_linear_own), in the same splits; the forward splits output
 * columns, so a thread packs only its columns of the weights and the
 * threads read the activations in place. */
#include <cblas.h>

#include "nn_internal.h"


typedef struct mm_job {
	dg_ctx *ctx;
	float *out;
	const float *inp, *dout;
	float *dinp;
	dg_dtype wt, gt;
	const void *w, *bias;
	void *dw, *dbias;
	int64_t n, c, oc;
	int64_t rows; /* dg_nn_tile_rows(c): rows of w per tile */
	float dbeta;  /* dinp's beta: 1 adds to it, 0 writes it (dg_nn_matmul_backward_write) */
	int failed;
} mm_job;

/* own_gemm runs dg_nn_gemm on C[m x n] with scratch for a task (1 when it
 * ran, even out of memory, recorded in j; 0 when the BLAS runs the Linear
 * products here) */
static int own_gemm(mm_job *j, float *c, int64_t ldc, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
		    int trans_a, const float *b, int64_t ldb, int trans_b, dg_gemm_init init, const float *bias)
{
#if DG_HAVE_X86
	if (!dg_blas_linear_own())
		return 0;
	const size_t bytes = dg_nn_gemm_scratch(n, k);
	float *scratch = NULL;
	if (bytes > 0 && (scratch = dg_scratch_alloc(j->ctx, bytes)) == NULL) {
		dg_nn_failed(&j->failed);
		return 1;
	}
	dg_nn_gemm(c, ldc, m, n, k, a, lda, trans_a, b, ldb, trans_b, init, bias, scratch);
	dg_scratch_free(j->ctx, scratch, bytes);
	return 1;
#else
	(void)j, (void)c, (void)ldc, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)trans_a, (void)b, (void)ldb,
		(void)trans_b, (void)init, (void)bias;
	return 0;
#endif
}

/* row_tile allocates a task's float32 tile of rows x width (at most
 * DG_NN_TILE_FLOATS, or one row when a row is longer), or records the
 * failure and returns NULL */
static float *row_tile(mm_job *j, int64_t rows, int64_t width, size_t *bytes)
{
	*bytes = (size_t)(rows * width) * sizeof(float);
	float *t = dg_scratch_alloc(j->ctx, *bytes);
	if (t == NULL)
		dg_nn_failed(&j->failed);
	return t;
}

/* out[lo:hi, :] = inp[lo:hi, :] @ w^T (+ bias), float32 w */
static void fwd_task(void *v, int64_t lo, int64_t hi)
{
	const mm_job *j = v;
	const float *bias = j->bias;
	float beta = 0.0f;
	if (bias != NULL) {
		for (int64_t r = lo; r < hi; r++)
			memcpy(j->out + r * j->oc, bias, (size_t)j->oc * sizeof(float));
		beta = 1.0f;
	} else if (j->c == 0) {
		memset(j->out + lo * j->oc, 0, (size_t)((hi - lo) * j->oc) * sizeof(float));
	}
	if (j->c == 0) /* an empty sum; sgemm rejects leading dimensions of 0 */
		return;
	dg_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(hi - lo), (int)j->oc, (int)j->c, 1.0f,
		 j->inp + lo * j->c, (int)j->c, j->w, (int)j->c, beta, j->out + lo * j->oc, (int)j->oc);
}

/* out[:, lo:hi] = inp @ w[lo:hi, :]^T (+ bias[lo:hi]) on nn_gemm.c */
static void fwd_own_task(void *v, int64_t lo, int64_t hi)
{
	mm_job *j = v;
	const float *bias = j->bias;
	own_gemm(j, j->out + lo, j->oc, j->n, hi - lo, j->c, j->inp, j->c, 0, (const float *)j->w + lo * j->c, j->c, 1,
		 bias != NULL ? DG_GEMM_BIAS : DG_GEMM_ZERO, bias != NULL ? bias + lo : NULL);
}

/* out[:, lo:hi] = inp @ w[lo:hi, :]^T (+ bias[lo:hi]), float32 w: the
 * split for outputs wider than the batch */
static void fwd_col_task(void *v, int64_t lo, int64_t hi)
{
	const mm_job *j = v;
	const float *bias = j->bias;
	float beta = 0.0f;
	if (bias != NULL) {
		for (int64_t r = 0; r < j->n; r++)
			memcpy(j->out + r * j->oc + lo, bias + lo, (size_t)(hi - lo) * sizeof(float));
		beta = 1.0f;
	} else if (j->c == 0) {
		for (int64_t r = 0; r < j->n; r++)
			memset(j->out + r * j->oc + lo, 0, (size_t)(hi - lo) * sizeof(float));
	}
	if (j->c == 0)
		return;
	dg_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->n, (int)(hi - lo), (int)j->c, 1.0f, j->inp,
		 (int)j->c, (const float *)j->w + lo * j->c, (int)j->c, beta, j->out + lo, (int)j->oc);
}

/* over_weight_rows runs block over the weight rows [lo, hi) in blocks of at
 * most j->rows, with one task-wide tile of rows x c floats (tile) and rows
 * floats (btile, for the bias) */
static void over_weight_rows(mm_job *j, int64_t lo, int64_t hi,
			     void (*block)(mm_job *j, float *tile, float *btile, int64_t o0, int64_t m))
{
	const int64_t rows = min64(j->rows, hi - lo);
	size_t bytes;
	float *tile = row_tile(j, rows, j->c + 1, &bytes);
	if (tile == NULL)
		return;
	for (int64_t o0 = lo; o0 < hi; o0 += rows)
		block(j, tile, tile + rows * j->c, o0, min64(rows, hi - o0));
	dg_scratch_free(j->ctx, tile, bytes);
}

/* out[:, o0:o0+m] = inp @ w[o0:o0+m, :]^T (+ bias), half w widened into the
 * tile; the thread owns output columns, so each weight row is widened once
 * per call */
static void fwd_half_block(mm_job *j, float *tile, float *btile, int64_t o0, int64_t m)
{
	const int64_t c = j->c;
	float beta = 0.0f;
	if (j->bias != NULL) {
		dg_nn_widen(j->ctx->k, j->wt, j->bias, o0, btile, m);
		for (int64_t r = 0; r < j->n; r++)
			memcpy(j->out + r * j->oc + o0, btile, (size_t)m * sizeof(float));
		beta = 1.0f;
	} else if (c == 0) {
		for (int64_t r = 0; r < j->n; r++)
			memset(j->out + r * j->oc + o0, 0, (size_t)m * sizeof(float));
	}
	if (c == 0)
		return;
	dg_nn_widen(j->ctx->k, j->wt, j->w, o0 * c, tile, m * c);
	dg_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->n, (int)m, (int)c, 1.0f, j->inp, (int)c, tile,
		 (int)c, beta, j->out + o0, (int)j->oc);
}

static void fwd_half_task(void *v, int64_t lo, int64_t hi) { over_weight_rows(v, lo, hi, fwd_half_block); }

dg_status dg_nn_matmul_forward(dg_ctx *ctx, float *out, const float *inp, const float *w, const float *bias,
			       int64_t n, int64_t c, int64_t oc)
{
	return dg_nn_matmul_forward_mixed(ctx, out, inp, DG_F32, w, bias, n, c, oc);
}

dg_status dg_nn_matmul_forward_mixed(dg_ctx *ctx, float *out, const float *inp, dg_dtype wt, const void *w,
				     const void *bias, int64_t n, int64_t c, int64_t oc)
{
	if (ctx == NULL || out == NULL || inp == NULL || w == NULL || dg_nn_bad_dims(n, c) || oc < 0)
		return DG_ERR_INVALID;
	if (!dg_is_float(wt))
		return DG_ERR_DTYPE;
	if (n > INT32_MAX || c > INT32_MAX || oc > INT32_MAX)
		return DG_ERR_SIZE;
	if (n == 0 || oc == 0)
		return DG_OK;
	dg_blas_init();
	mm_job j = {.ctx = ctx, .out = out, .inp = inp, .wt = wt, .w = w, .bias = bias, .n = n, .c = c, .oc = oc,
		    .rows = dg_nn_tile_rows(c)};
	if (wt == DG_F32 && dg_blas_linear_own()) /* panels of 32 columns */
		dg_parallel_for(ctx, oc, 32, n * c * oc, fwd_own_task, &j);
	else if (wt == DG_F32 && oc > n)
		dg_parallel_for(ctx, oc, DG_NN_COL_GRAIN, n * c * oc, fwd_col_task, &j);
	else if (wt == DG_F32)
		dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * c * oc, fwd_task, &j);
	else
		dg_parallel_for(ctx, oc, DG_NN_ROW_GRAIN, n * c * oc, fwd_half_task, &j);
	return j.failed ? DG_ERR_NOMEM : DG_OK;
}

/* dinp[lo:hi, :] += dout[lo:hi, :] @ w (= with dbeta 0), float32 w */
static void dinp_task(void *v, int64_t lo, int64_t hi)
{
	mm_job *j = v;
	if (own_gemm(j, j->dinp + lo * j->c, j->c, hi - lo, j->c, j->oc, j->dout + lo * j->oc, j->oc, 0, j->w, j->c, 0,
		     j->dbeta == 0.0f ? DG_GEMM_ZERO : DG_GEMM_ADD, NULL))
		return;
	dg_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(hi - lo), (int)j->c, (int)j->oc, 1.0f,
		 j->dout + lo * j->oc, (int)j->oc, j->w, (int)j->c, j->dbeta, j->dinp + lo * j->c, (int)j->c);
}

/* dinp[:, lo:hi] += dout @ w[:, lo:hi], float32 w: the split for inputs
 * wider than the batch */
static void dinp_col_task(void *v, int64_t lo, int64_t hi)
{
	mm_job *j = v;
	if (own_gemm(j, j->dinp + lo, j->c, j->n, hi - lo, j->oc, j->dout, j->oc, 0, (const float *)j->w + lo, j->c, 0,
		     j->dbeta == 0.0f ? DG_GEMM_ZERO : DG_GEMM_ADD, NULL))
		return;
	dg_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->n, (int)(hi - lo), (int)j->oc, 1.0f, j->dout,
		 (int)j->oc, (const float *)j->w + lo, (int)j->c, j->dbeta, j->dinp + lo, (int)j->c);
}

/* dinp[:, lo:hi] += dout @ w[:, lo:hi], half w: the thread owns input
 * columns and runs over the rows of w in blocks of j->rows (fixed by c, so
 * the partial sums do not depend on the split), widening each block's
 * columns lo..hi into a tile of at most DG_NN_TILE_FLOATS */
static void dinp_half_task(void *v, int64_t lo, int64_t hi)
{
	mm_job *j = v;
	const int64_t width = hi - lo, rows = min64(j->rows, j->oc);
	size_t bytes;
	float *tile = row_tile(j, rows, width, &bytes);
	if (tile == NULL)
		return;
	for (int64_t o0 = 0; o0 < j->oc; o0 += rows) {
		const int64_t m = min64(rows, j->oc - o0);
		for (int64_t o = 0; o < m; o++)
			dg_nn_widen(j->ctx->k, j->wt, j->w, (o0 + o) * j->c + lo, tile + o * width, width);
		/* the first block writes when dbeta is 0; the rest add */
		dg_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->n, (int)width, (int)m, 1.0f,
			 j->dout + o0, (int)j->oc, tile, (int)width, o0 == 0 ? j->dbeta : 1.0f, j->dinp + lo, (int)j->c);
	}
	dg_scratch_free(j->ctx, tile, bytes);
}

/* dw[:, lo:hi] += dout^T @ inp[:, lo:hi], float32 gradients: the split for
 * weights with more input than output channels (dbias: dbias_task) */
static void dw_col_task(void *v, int64_t lo, int64_t hi)
{
	mm_job *j = v;
	if (own_gemm(j, (float *)j->dw + lo, j->c, j->oc, hi - lo, j->n, j->dout, j->oc, 1, j->inp + lo, j->c, 0,
		     DG_GEMM_ADD, NULL))
		return;
	dg_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)j->oc, (int)(hi - lo), (int)j->n, 1.0f, j->dout,
		 (int)j->oc, j->inp + lo, (int)j->c, 1.0f, (float *)j->dw + lo, (int)j->c);
}

/* dbias[lo:hi] += column sums of dout, rows in order */
static DG_VECTORISE void dbias_task(void *v, int64_t lo, int64_t hi)
{
	const mm_job *j = v;
	float *dbias = j->dbias;
	for (int64_t r = 0; r < j->n; r++) {
		const float *d = j->dout + r * j->oc;
		for (int64_t o = lo; o < hi; o++)
			dbias[o] += d[o];
	}
}

/* dw[lo:hi, :] += dout[:, lo:hi]^T @ inp, and dbias[lo:hi] += column sums,
 * float32 gradients */
static DG_VECTORISE void dw_task(void *v, int64_t lo, int64_t hi)
{
	mm_job *j = v;
	float *dw = j->dw, *dbias = j->dbias;
	if (dw != NULL && j->c > 0 &&
	    !own_gemm(j, dw + lo * j->c, j->c, hi - lo, j->c, j->n, j->dout + lo, j->oc, 1, j->inp, j->c, 0, DG_GEMM_ADD,
		      NULL))
		dg_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(hi - lo), (int)j->c, (int)j->n, 1.0f,
			 j->dout + lo, (int)j->oc, j->inp, (int)j->c, 1.0f, dw + lo * j->c, (int)j->c);
	if (dbias != NULL) /* rows in order, so the sum does not depend on the split */
		dbias_task(v, lo, hi);
}

/* the same for half gradients: each block's float32 contribution is
 * computed into the tile, then added into the gradient with one rounding */
static DG_VECTORISE void dw_half_block(mm_job *j, float *tile, float *btile, int64_t o0, int64_t m)
{
	const int64_t c = j->c;
	if (j->dw != NULL && c > 0) {
		dg_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m, (int)c, (int)j->n, 1.0f, j->dout + o0,
			 (int)j->oc, j->inp, (int)c, 0.0f, tile, (int)c);
		dg_nn_grad_add(j->ctx->k, j->gt, j->dw, o0 * c, tile, m * c);
	}
	if (j->dbias != NULL) {
		memset(btile, 0, (size_t)m * sizeof(float));
		for (int64_t r = 0; r < j->n; r++) {
			const float *d = j->dout + r * j->oc + o0;
			for (int64_t o = 0; o < m; o++)
				btile[o] += d[o];
		}
		dg_nn_grad_add(j->ctx->k, j->gt, j->dbias, o0, btile, m);
	}
}

static void dw_half_task(void *v, int64_t lo, int64_t hi) { over_weight_rows(v, lo, hi, dw_half_block); }

/* The float32 backward as one region over 2c column units: [0, c) are
 * dinp's columns, [c, 2c) dw's, and each part also sums dbias's columns in
 * the same proportion (rows in order, so the sums do not depend on the
 * split). dinp and dw are products of the same size (n c oc), so two
 * threads each run one whole single-threaded sgemm, neither packing the
 * other's operands, with one wait instead of two or three; more threads
 * split each product by columns. */
static void bwd_task(void *v, int64_t lo, int64_t hi)
{
	const mm_job *j = v;
	const int64_t c = j->c;
	if (lo < c)
		dinp_col_task(v, lo, min64(hi, c));
	if (hi > c)
		dw_col_task(v, (lo > c ? lo : c) - c, hi - c);
	if (j->dbias != NULL) {
		const int64_t b0 = (int64_t)((__int128)lo * j->oc / (2 * c));
		const int64_t b1 = (int64_t)((__int128)hi * j->oc / (2 * c));
		if (b0 < b1)
			dbias_task(v, b0, b1);
	}
}

dg_status dg_nn_matmul_backward(dg_ctx *ctx, float *dinp, float *dw, float *dbias, const float *dout,
				const float *inp, const float *w, int64_t n, int64_t c, int64_t oc)
{
	return dg_nn_matmul_backward_mixed(ctx, dinp, DG_F32, dw, dbias, dout, inp, DG_F32, w, n, c, oc);
}

/* matmul_backward is both entries: dinp's beta is dbeta (1 adds, 0 writes) */
static dg_status matmul_backward(dg_ctx *ctx, float dbeta, float *dinp, dg_dtype gt, void *dw, void *dbias,
				 const float *dout, const float *inp, dg_dtype wt, const void *w, int64_t n, int64_t c,
				 int64_t oc)
{
	if (ctx == NULL || dout == NULL || dg_nn_bad_dims(n, c) || oc < 0)
		return DG_ERR_INVALID;
	if ((dinp != NULL && w == NULL) || (dw != NULL && inp == NULL))
		return DG_ERR_INVALID;
	if (!dg_is_float(wt) || !dg_is_float(gt))
		return DG_ERR_DTYPE;
	if (n > INT32_MAX || c > INT32_MAX || oc > INT32_MAX)
		return DG_ERR_SIZE;
	if (n == 0)
		return DG_OK;
	if (oc == 0) { /* empty sums: written, dinp is 0 */
		if (dinp != NULL && dbeta == 0.0f && c > 0)
			memset(dinp, 0, (size_t)(n * c) * sizeof(float));
		return DG_OK;
	}
	dg_blas_init();
	mm_job j = {.ctx = ctx, .inp = inp, .wt = wt, .w = w, .gt = gt, .dout = dout, .dinp = dinp, .dw = dw,
		    .dbias = dbias, .n = n, .c = c, .oc = oc, .rows = dg_nn_tile_rows(c), .dbeta = dbeta};
	if (wt == DG_F32 && gt == DG_F32 && dinp != NULL && dw != NULL && c > 0) {
		dg_parallel_for(ctx, 2 * c, DG_NN_COL_GRAIN, 2 * n * c * oc, bwd_task, &j);
		return DG_OK;
	}
	if (dinp != NULL && c > 0) {
		if (wt == DG_F32 && c > n)
			dg_parallel_for(ctx, c, DG_NN_COL_GRAIN, n * c * oc, dinp_col_task, &j);
		else if (wt == DG_F32)
			dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * c * oc, dinp_task, &j);
		else
			dg_parallel_for(ctx, c, DG_NN_COL_GRAIN, n * c * oc, dinp_half_task, &j);
	}
	if (gt == DG_F32 && dw != NULL && c > oc) {
		dg_parallel_for(ctx, c, DG_NN_COL_GRAIN, n * c * oc, dw_col_task, &j);
		if (dbias != NULL)
			dg_parallel_for(ctx, oc, DG_NN_COL_GRAIN, n * oc, dbias_task, &j);
	} else if (dw != NULL || dbias != NULL) {
		dg_parallel_for(ctx, oc, DG_NN_ROW_GRAIN, n * (c + 1) * oc, gt == DG_F32 ? dw_task : dw_half_task, &j);
	}
	return j.failed ? DG_ERR_NOMEM : DG_OK;
}

dg_status dg_nn_matmul_backward_mixed(dg_ctx *ctx, float *dinp, dg_dtype gt, void *dw, void *dbias,
				      const float *dout, const float *inp, dg_dtype wt, const void *w, int64_t n,
				      int64_t c, int64_t oc)
{
	return matmul_backward(ctx, 1.0f, dinp, gt, dw, dbias, dout, inp, wt, w, n, c, oc);
}

dg_status dg_nn_matmul_backward_write(dg_ctx *ctx, float *dinp, dg_dtype gt, void *dw, void *dbias,
				      const float *dout, const float *inp, dg_dtype wt, const void *w, int64_t n,
				      int64_t c, int64_t oc)
{
	return matmul_backward(ctx, 0.0f, dinp, gt, dw, dbias, dout, inp, wt, w, n, c, oc);
}
