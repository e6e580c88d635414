/*
 * norm.cu — the list reductions: dg_cuda_sumsq (float64 sum of squares,
 * deterministic) and dg_cuda_nonfinite.
 *
 * Sum of squares, in three fixed-order stages, no atomics:
 *   1. mta pass: each block sums the squares of one DG_CUDA_CHUNK chunk in
 *      double (each thread in its fixed element order, then a fixed tree) and
 *      writes partials[chunk], chunk counted over the whole call;
 *   2. sumsq_tensors: one block per tensor adds its chunks' partials (fixed
 *      thread order, fixed tree) into per[i];
 *   3. sumsq_total: one block adds per[0..count) the same way into *total.
 * Nothing depends on launch grouping or timing, so reruns give the same bits.
 * Squares of float32 values are exact in double; only the adds round.
 */
#include <stdlib.h>

#include "mta.cuh"

/* block_sum_f64 returns, to every thread, the block's sum of v added in a
 * fixed tree whose shape depends only on DG_CU_BLOCK. Once per kernel. */
static __device__ __forceinline__ double block_sum_f64(double v)
{
	__shared__ double sh[DG_CU_BLOCK];
	sh[threadIdx.x] = v;
	__syncthreads();
#pragma unroll
	for (int s = DG_CU_BLOCK / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			sh[threadIdx.x] += sh[threadIdx.x + s];
		__syncthreads();
	}
	return sh[0];
}

template <dg_dtype T> struct SumsqOp {
	double *partials;
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t chunk) const
	{
		const typename Elem<T>::S *x = (const typename Elem<T>::S *)p[0];
		double acc = 0;
		DG_FOR_STEPS(lo, hi, b)
		{
			typename Elem<T>::S r[DG_CU_ILP];
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi)
					r[k] = x[i];
			}
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				if (DG_STEP_INDEX(b, k) < hi) {
					double v = Elem<T>::load(r[k]);
					acc += v * v;
				}
			}
		}
		double s = block_sum_f64(acc);
		if (threadIdx.x == 0)
			partials[chunk] = s;
	}
};

/* Tensors per sumsq_tensors launch: start[] must fit the 4 KiB parameters. */
#define DG_FIN_TENSORS 400
struct FinTable {
	int64_t start[DG_FIN_TENSORS + 1]; /* tensor b's chunks are [start[b], start[b+1]) */
};

__global__ void __launch_bounds__(DG_CU_BLOCK)
	sumsq_tensors(const __grid_constant__ FinTable tab, const double *partials, double *out)
{
	double acc = 0;
	for (int64_t c = tab.start[blockIdx.x] + threadIdx.x; c < tab.start[blockIdx.x + 1]; c += DG_CU_BLOCK)
		acc += partials[c];
	double s = block_sum_f64(acc);
	if (threadIdx.x == 0)
		out[blockIdx.x] = s;
}

__global__ void __launch_bounds__(DG_CU_BLOCK) sumsq_total(const double *per, int count, double *total)
{
	double acc = 0;
	for (int i = threadIdx.x; i < count; i += DG_CU_BLOCK)
		acc += per[i];
	double s = block_sum_f64(acc);
	if (threadIdx.x == 0)
		*total = s;
}

template <dg_dtype T>
static dg_status sumsq_chunks(dg_cuda_ctx *ctx, const void *const *xs, const int64_t *ns, int count, double *partials)
{
	const void *const *lists[1] = {xs};
	SumsqOp<T> op = {partials};
	return mta_apply<1>(ctx, lists, ns, count, op, NULL);
}

static dg_status sumsq_run(dg_cuda_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count,
			   const int64_t *start, double *per, double *total)
{
	int64_t nchunks = start[count];
	size_t need = (size_t)nchunks + (per ? 0 : (size_t)count);
	dg_status s = dg_cu_scratch(ctx, need * sizeof(double));
	if (s != DG_OK)
		return s;
	double *partials = (double *)ctx->scratch;
	if (per == NULL)
		per = partials + nchunks;
	s = DG_CU_FLOAT_DISPATCH(t, sumsq_chunks, ctx, xs, ns, count, partials);
	if (s != DG_OK)
		return s;
	FinTable tab;
	for (int first = 0; first < count; first += DG_FIN_TENSORS) {
		int m = count - first < DG_FIN_TENSORS ? count - first : DG_FIN_TENSORS;
		for (int b = 0; b <= m; b++)
			tab.start[b] = start[first + b];
		DG_CU_LAUNCH(ctx, sumsq_tensors, m, DG_CU_BLOCK, tab, partials, per + first);
	}
	DG_CU_LAUNCH(ctx, sumsq_total, 1, DG_CU_BLOCK, per, count, total);
	return DG_OK;
}

dg_status dg_cuda_sumsq(dg_cuda_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count,
			double *per, double *total)
{
	DG_CU_ENTER(ctx);
	if (!dg_cu_is_float(t))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, "dg_cuda_sumsq", "dtype: allowed F32, F16, BF16");
	if (total == NULL)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_sumsq", "total is NULL");
	dg_status s = dg_cu_check_list(ctx, "dg_cuda_sumsq", xs, ns, count);
	if (s != DG_OK)
		return s;
	/* start[i]: call-wide index of tensor i's first chunk, as mta_apply counts */
	int64_t *start = (int64_t *)malloc(sizeof(int64_t) * ((size_t)count + 1));
	if (start == NULL)
		return DG_ERR_NOMEM;
	start[0] = 0;
	for (int i = 0; i < count; i++)
		start[i + 1] = start[i] + (ns[i] + DG_CUDA_CHUNK - 1) / DG_CUDA_CHUNK;
	s = sumsq_run(ctx, t, xs, ns, count, start, per, total);
	free(start);
	return s;
}

template <dg_dtype T> struct NonfiniteOp {
	int *found;
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t) const
	{
		const typename Elem<T>::S *x = (const typename Elem<T>::S *)p[0];
		int bad = 0;
		DG_FOR_STEPS(lo, hi, b)
		{
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				/* dg_math.h's exponent-bits test, on the storage word */
				if (i < hi)
					bad |= !Elem<T>::finite(x[i]);
			}
		}
		/* every writer stores the same 1: a benign race, no atomics needed */
		if (__syncthreads_or(bad) && threadIdx.x == 0)
			*found = 1;
	}
};

template <dg_dtype T>
static dg_status nonfinite_as(dg_cuda_ctx *ctx, const void *const *xs, const int64_t *ns, int count, int *found)
{
	const void *const *lists[1] = {xs};
	NonfiniteOp<T> op = {found};
	return mta_apply<1>(ctx, lists, ns, count, op, NULL);
}

dg_status dg_cuda_nonfinite(dg_cuda_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count,
			    int *found)
{
	DG_CU_ENTER(ctx);
	if (!dg_cu_is_float(t))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, "dg_cuda_nonfinite", "dtype: allowed F32, F16, BF16");
	if (found == NULL)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nonfinite", "found is NULL");
	dg_status s = dg_cu_check_list(ctx, "dg_cuda_nonfinite", xs, ns, count);
	if (s != DG_OK)
		return s;
	DG_CU_CTX(ctx, cudaMemsetAsync(found, 0, sizeof(int), ctx->stream));
	return DG_CU_FLOAT_DISPATCH(t, nonfinite_as, ctx, xs, ns, count, found);
}
