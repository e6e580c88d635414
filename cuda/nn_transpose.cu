/*
 * nn_transpose.cu — device twin of csrc/nn_transpose.c: the block transpose
 * that packs Ulysses sequence parallelism's all-to-alls. A copy, one thread
 * per element (reads in order, writes in runs of w), so the bits are the
 * CPU's.
 */
#include "nn.cuh"

__global__ void __launch_bounds__(NN_BLOCK)
	transpose_blocks(float *__restrict__ dst, const float *__restrict__ src, int64_t a, int64_t b, int64_t w)
{
	NN_GRID_STRIDE(e, a * b * w)
	{
		int64_t k = e / w, i = k / b, j = k % b;
		dst[(j * a + i) * w + e % w] = src[e];
	}
}

dg_status dg_cuda_nn_transpose_blocks(dg_cuda_ctx *ctx, float *dst, const float *src, int64_t a, int64_t b, int64_t w)
{
	DG_CU_ENTER(ctx);
	if (a < 0 || b < 0 || w < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_transpose_blocks", "negative size");
	int64_t n = a * b * w;
	if (n == 0)
		return DG_OK;
	uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src, bytes = (uintptr_t)n * sizeof(float);
	if (dst == NULL || src == NULL || (d < s + bytes && s < d + bytes))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_transpose_blocks", "NULL or overlapping tensors");
	DG_CU_LAUNCH(ctx, transpose_blocks, nn_blocks(n), NN_BLOCK, dst, src, a, b, w);
	return DG_OK;
}
