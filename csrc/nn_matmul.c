/* nn_matmul.c — the Linear layer's products on OpenBLAS sgemm, rows split
 * over the ctx pool (one single-threaded sgemm per part). */
#include <cblas.h>
#include <pthread.h>

#include "nn_internal.h"

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_setup(void) { openblas_set_num_threads(1); }

void dg_nn_blas_init(void) { pthread_once(&blas_once, blas_setup); }

typedef struct mm_job {
	float *out;
	const float *inp, *w, *bias, *dout;
	float *dinp, *dw, *dbias;
	int64_t n, c, oc;
} mm_job;

/* out[lo:hi, :] = inp[lo:hi, :] @ w^T (+ bias) */
static void fwd_task(void *v, int64_t lo, int64_t hi)
{
	const mm_job *j = v;
	float beta = 0.0f;
	if (j->bias != NULL) {
		for (int64_t r = lo; r < hi; r++)
			memcpy(j->out + r * j->oc, j->bias, (size_t)j->oc * sizeof(float));
		beta = 1.0f;
	} else if (j->c == 0) {
		memset(j->out + lo * j->oc, 0, (size_t)((hi - lo) * j->oc) * sizeof(float));
	}
	if (j->c == 0) /* an empty sum; sgemm rejects leading dimensions of 0 */
		return;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(hi - lo), (int)j->oc, (int)j->c, 1.0f,
		    j->inp + lo * j->c, (int)j->c, j->w, (int)j->c, beta, j->out + lo * j->oc, (int)j->oc);
}

dg_status dg_nn_matmul_forward(dg_ctx *ctx, float *out, const float *inp, const float *w, const float *bias,
			       int64_t n, int64_t c, int64_t oc)
{
	if (ctx == NULL || out == NULL || inp == NULL || w == NULL || dg_nn_bad_dims(n, c) || oc < 0)
		return DG_ERR_INVALID;
	if (n > INT32_MAX || c > INT32_MAX || oc > INT32_MAX)
		return DG_ERR_SIZE;
	if (n == 0 || oc == 0)
		return DG_OK;
	dg_nn_blas_init();
	mm_job j = {.out = out, .inp = inp, .w = w, .bias = bias, .n = n, .c = c, .oc = oc};
	dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * c * oc, fwd_task, &j);
	return DG_OK;
}

/* dinp[lo:hi, :] += dout[lo:hi, :] @ w */
static void dinp_task(void *v, int64_t lo, int64_t hi)
{
	const mm_job *j = v;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(hi - lo), (int)j->c, (int)j->oc, 1.0f,
		    j->dout + lo * j->oc, (int)j->oc, j->w, (int)j->c, 1.0f, j->dinp + lo * j->c, (int)j->c);
}

/* dw[lo:hi, :] += dout[:, lo:hi]^T @ inp, and dbias[lo:hi] += column sums */
static void dw_task(void *v, int64_t lo, int64_t hi)
{
	const mm_job *j = v;
	if (j->dw != NULL && j->c > 0)
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(hi - lo), (int)j->c, (int)j->n, 1.0f,
			    j->dout + lo, (int)j->oc, j->inp, (int)j->c, 1.0f, j->dw + lo * j->c, (int)j->c);
	if (j->dbias != NULL) {
		/* rows in order, so the sum does not depend on the split */
		for (int64_t r = 0; r < j->n; r++) {
			const float *d = j->dout + r * j->oc;
			for (int64_t o = lo; o < hi; o++)
				j->dbias[o] += d[o];
		}
	}
}

dg_status dg_nn_matmul_backward(dg_ctx *ctx, float *dinp, float *dw, float *dbias, const float *dout,
				const float *inp, const float *w, int64_t n, int64_t c, int64_t oc)
{
	if (ctx == NULL || dout == NULL || dg_nn_bad_dims(n, c) || oc < 0)
		return DG_ERR_INVALID;
	if ((dinp != NULL && w == NULL) || (dw != NULL && inp == NULL))
		return DG_ERR_INVALID;
	if (n > INT32_MAX || c > INT32_MAX || oc > INT32_MAX)
		return DG_ERR_SIZE;
	if (n == 0 || oc == 0)
		return DG_OK;
	dg_nn_blas_init();
	mm_job j = {.inp = inp, .w = w, .dout = dout, .dinp = dinp, .dw = dw, .dbias = dbias, .n = n, .c = c, .oc = oc};
	if (dinp != NULL && c > 0)
		dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * c * oc, dinp_task, &j);
	if (dw != NULL || dbias != NULL)
		dg_parallel_for(ctx, oc, DG_NN_ROW_GRAIN, n * (c + 1) * oc, dw_task, &j);
	return DG_OK;
}
