/*
 * nn_vocab.cu — device twins of csrc/nn_vocab.c: the vocabulary-parallel
 * cross-entropy of tensor parallelism in its three steps, and the
 * embedding's mask of the rows whose token another rank holds. Same checks
 * and layouts; element math from dg_nn_math.h (dg_nn_vxent_*: Go's max, the
 * exponential of Go's math.Exp in plain double arithmetic); each row's sum
 * in the CPU's order (nn.cuh). So the bits are the CPU's, every one: no log
 * enters here (the caller takes it on the host), only a NaN row's NaN may
 * differ (deepgo_cuda.h).
 *
 * Parallel shapes: the max and the exponentials one warp per row (the
 * ordered warp sum); the gradient and the mask grid-stride, one thread per
 * element.
 */
#include <math.h>

#include "nn.cuh"

/* one warp per row: each lane's max of its elements, then the lanes' (a
 * max of numbers does not depend on the order, +0 over -0 included) */
__global__ void __launch_bounds__(NN_BLOCK)
	vx_max(float *__restrict__ maxes, const float *__restrict__ logits, int64_t n, int64_t v)
{
	int64_t r = blockIdx.x * (int64_t)NN_WARPS + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (r >= n) /* the whole warp */
		return;
	const float *x = logits + r * v;
	float m = -INFINITY;
	for (int64_t i = lane; i < v; i += 32)
		m = dg_nn_vxent_max(m, x[i]);
	for (int off = 16; off > 0; off >>= 1)
		m = dg_nn_vxent_max(m, __shfl_xor_sync(NN_FULL, m, off));
	if (lane == 0)
		maxes[r] = m;
}

/* one warp per row; each lane writes only the weights of the elements it
 * read, after lane 0 has read the target's logit */
__global__ void __launch_bounds__(NN_BLOCK)
	vx_exp(float *logits, float *__restrict__ sums, float *__restrict__ tlogits, const float *__restrict__ maxes,
	       const int32_t *__restrict__ targets, int64_t n, int64_t v, int64_t lo, const int *flag)
{
	int64_t r = blockIdx.x * (int64_t)NN_WARPS + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (r >= n || *flag)
		return;
	float *x = logits + r * v;
	const float mx = maxes[r];
	const int64_t t = (int64_t)targets[r] - lo;
	float tl = 0.0f;
	if (lane == 0 && t >= 0 && t < v)
		tl = x[t] - mx;
	__syncwarp();
	double sum = 0.0;
	for (int64_t base = 0; base < v; base += 32) {
		int64_t i = base + lane;
		float e = 0.0f;
		if (i < v) {
			e = dg_nn_vxent_exp(x[i] - mx);
			x[i] = e;
		}
		sum = nn_seq_add(sum, (double)e, (int)min((int64_t)32, v - base));
	}
	if (lane == 0) {
		sums[r] = (float)sum;
		tlogits[r] = tl;
	}
}

__global__ void __launch_bounds__(NN_BLOCK) vx_grad(float *logits, const float *__restrict__ sums,
						    const int32_t *__restrict__ targets, float d, int64_t n,
						    int64_t v, int64_t lo)
{
	NN_GRID_STRIDE(e, n * v)
	{
		int64_t r = e / v, i = e % v;
		float inv = 1.0f / sums[r];
		logits[e] = dg_nn_vxent_grad(logits[e], inv, i == (int64_t)targets[r] - lo, d);
	}
}

__global__ void __launch_bounds__(NN_BLOCK)
	vx_clear(float *x, const int32_t *__restrict__ ids, int64_t n, int64_t c, int64_t lo, int64_t v)
{
	NN_GRID_STRIDE(e, n * c)
	{
		int64_t t = (int64_t)ids[e / c] - lo;
		if (t < 0 || t >= v)
			x[e] = 0.0f;
	}
}

dg_status dg_cuda_nn_vocab_xent_max(dg_cuda_ctx *ctx, float *maxes, const float *logits, int64_t n, int64_t v)
{
	DG_CU_ENTER(ctx);
	if (maxes == NULL || logits == NULL || n < 0 || v <= 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_vocab_xent_max", "NULL tensor, n < 0 or v <= 0");
	if (n == 0)
		return DG_OK;
	DG_CU_LAUNCH(ctx, vx_max, nn_warp_blocks(n), NN_BLOCK, maxes, logits, n, v);
	return DG_OK;
}

dg_status dg_cuda_nn_vocab_xent_exp(dg_cuda_ctx *ctx, float *logits, float *sums, float *tlogits, const float *maxes,
				    const int32_t *targets, int64_t n, int64_t v, int64_t lo, int64_t vocab,
				    int *invalid)
{
	DG_CU_ENTER(ctx);
	if (logits == NULL || sums == NULL || tlogits == NULL || maxes == NULL || targets == NULL || n < 0 || v <= 0 ||
	    lo < 0 || lo > vocab - v)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_vocab_xent_exp",
				     "NULL tensor, n < 0, v <= 0 or [lo, lo+v) outside [0, vocab)");
	int *flag;
	dg_status s = nn_ids_flag(ctx, targets, n, vocab, invalid, &flag);
	if (s != DG_OK || n == 0)
		return s;
	DG_CU_LAUNCH(ctx, vx_exp, nn_warp_blocks(n), NN_BLOCK, logits, sums, tlogits, maxes, targets, n, v, lo, flag);
	return DG_OK;
}

dg_status dg_cuda_nn_vocab_xent_grad(dg_cuda_ctx *ctx, float *logits, const float *sums, const int32_t *targets,
				     float d, int64_t n, int64_t v, int64_t lo)
{
	DG_CU_ENTER(ctx);
	if (logits == NULL || sums == NULL || targets == NULL || n < 0 || v <= 0 || lo < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_vocab_xent_grad", "NULL tensor, n < 0, v <= 0 or lo < 0");
	if (n == 0)
		return DG_OK;
	DG_CU_LAUNCH(ctx, vx_grad, nn_blocks(n * v), NN_BLOCK, logits, sums, targets, d, n, v, lo);
	return DG_OK;
}

dg_status dg_cuda_nn_vocab_clear_rows(dg_cuda_ctx *ctx, float *x, const int32_t *ids, int64_t n, int64_t c,
				      int64_t lo, int64_t v)
{
	DG_CU_ENTER(ctx);
	if (x == NULL || ids == NULL || n < 0 || c < 0 || lo < 0 || v < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_vocab_clear_rows", "NULL tensor or negative size");
	if (n * c == 0)
		return DG_OK;
	DG_CU_LAUNCH(ctx, vx_clear, nn_blocks(n * c), NN_BLOCK, x, ids, n, c, lo, v);
	return DG_OK;
}
