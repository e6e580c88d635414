/*
 * quant.cu — dg_cuda_quantize_i8 / dg_cuda_dequantize_i8: device twins of
 * csrc/quant.c (ZeRO++ qwZ's symmetric int8 weight quantizer), element
 * math from dg_quant_math.h, so the bits equal the CPU's. A group's
 * absolute maximum is a max, exact in any order; one block per group.
 */
#include "internal.cuh"
#include "dg_quant_math.h"

#define QUANT_BLOCK 256

__global__ void __launch_bounds__(QUANT_BLOCK)
	quant_i8(dg_dtype t, const void *x, int8_t *q, float *scales, int64_t g)
{
	__shared__ float red[QUANT_BLOCK];
	const int64_t base = (int64_t)blockIdx.x * g;
	float m = 0.0f;
	for (int64_t i = threadIdx.x; i < g; i += QUANT_BLOCK)
		m = dg_q8_absmax(m, dg_q8_half(t, x, base + i));
	red[threadIdx.x] = m;
	__syncthreads();
	for (int s = QUANT_BLOCK / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s)
			red[threadIdx.x] = dg_q8_absmax(red[threadIdx.x], red[threadIdx.x + s]);
		__syncthreads();
	}
	const float mult = dg_q8_mult(red[0]);
	for (int64_t i = threadIdx.x; i < g; i += QUANT_BLOCK)
		q[base + i] = dg_q8_quantize(dg_q8_half(t, x, base + i), mult);
	if (threadIdx.x == 0)
		scales[blockIdx.x] = 1.0f / mult;
}

__global__ void __launch_bounds__(QUANT_BLOCK)
	dequant_i8(dg_dtype t, const int8_t *q, const float *scales, void *y, int64_t n, int64_t g)
{
	for (int64_t i = blockIdx.x * (int64_t)QUANT_BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * QUANT_BLOCK)
		dg_q8_store(t, y, i, q[i], scales[i / g]);
}

static dg_status quant_check(dg_cuda_ctx *ctx, const char *fn, dg_dtype t, const void *a, const void *b,
			     const void *c, int64_t n, int64_t groups)
{
	if (n < 0 || groups < 1 || (n > 0 && (a == NULL || b == NULL || c == NULL)))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "NULL tensor, n < 0 or groups < 1");
	if (!dg_cu_is_float(t))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, fn, "dtype: allowed F32, F16, BF16");
	if (n % groups != 0)
		return dg_cu_invalid(ctx, DG_ERR_SIZE, fn, "groups do not split n evenly");
	return DG_OK;
}

dg_status dg_cuda_quantize_i8(dg_cuda_ctx *ctx, dg_dtype t, const void *x, int8_t *q, float *scales, int64_t n,
			      int64_t groups)
{
	DG_CU_ENTER(ctx);
	dg_status s = quant_check(ctx, "dg_cuda_quantize_i8", t, x, q, scales, n, groups);
	if (s != DG_OK || n == 0)
		return s;
	DG_CU_LAUNCH(ctx, quant_i8, groups, QUANT_BLOCK, t, x, q, scales, n / groups);
	return DG_OK;
}

dg_status dg_cuda_dequantize_i8(dg_cuda_ctx *ctx, dg_dtype t, const int8_t *q, const float *scales, void *y,
				int64_t n, int64_t groups)
{
	DG_CU_ENTER(ctx);
	dg_status s = quant_check(ctx, "dg_cuda_dequantize_i8", t, q, scales, y, n, groups);
	if (s != DG_OK || n == 0)
		return s;
	int64_t blocks = (n + QUANT_BLOCK - 1) / QUANT_BLOCK;
	DG_CU_LAUNCH(ctx, dequant_i8, blocks < 65536 ? blocks : 65536, QUANT_BLOCK, t, q, scales, y, n, n / groups);
	return DG_OK;
}
