/*
 * nn.cuh — what the nn_*.cu kernels share: launch shapes, the warp-ordered
 * sums that reproduce the CPU loops' exact summation order, and the device
 * check of tokens and targets.
 *
 * Ordered sums: a warp loads 32 consecutive elements at once (coalesced),
 * each lane computes its term, then every lane adds the 32 terms one by one
 * in index order, reading them with __shfl_sync. The chain of adds is
 * exactly the CPU's `acc += term[i]` for i = 0, 1, 2, ...: same operands,
 * same order, same roundings (no FMA: -fmad=false), so the sum has the CPU's
 * bits and every lane holds it. The adds are serial, as on the CPU; rows,
 * heads and queries give the parallelism.
 */
#ifndef DG_CUDA_NN_CUH
#define DG_CUDA_NN_CUH

#include "dg_nn_math.h"
#include "internal.cuh"

#define NN_BLOCK 256                  /* threads per block of the nn kernels */
#define NN_WARPS (NN_BLOCK / 32)      /* warps per block of the row kernels */
#define NN_FULL 0xffffffffu

/* nn_blocks: blocks for a grid-stride loop over n elements (capped; the
 * loops stride). */
static inline int64_t nn_blocks(int64_t n)
{
	int64_t b = (n + NN_BLOCK - 1) / NN_BLOCK;
	return b < 65536 * 16 ? b : 65536 * 16;
}

/* NN_GRID_STRIDE(i, n) loops i over [0, n) across the grid (nn_blocks). */
#define NN_GRID_STRIDE(i, n)                                                                                   \
	for (int64_t i = blockIdx.x * (int64_t)NN_BLOCK + threadIdx.x; i < (n); i += (int64_t)gridDim.x * NN_BLOCK)

/* nn_warp_blocks: blocks for one warp per unit (DG_CU_LAUNCH checks the
 * grid limit). */
static inline int64_t nn_warp_blocks(int64_t units) { return (units + NN_WARPS - 1) / NN_WARPS; }

/* nn_seq_add returns acc + v(lane 0) + v(lane 1) + ... + v(lane m-1), added
 * in that order, to every lane. m (1..32) must be the same on all lanes and
 * all 32 lanes must call it. */
template <typename T> static __device__ __forceinline__ T nn_seq_add(T acc, T v, int m)
{
	for (int j = 0; j < m; j++)
		acc += __shfl_sync(NN_FULL, v, j);
	return acc;
}

/* NN_LANES is csrc/nn_layernorm.c's LN_LANES: a LayerNorm row sums in 16
 * interleaved partial sums, element i into partial i % 16 in index order,
 * then a fixed pairwise tree (partial l += partial l + w, w = 8, 4, 2, 1).
 * A warp holds partial l in lane l: a 32-element chunk's elements l and
 * l + 16 both belong to it, added in that order. */
#define NN_LANES 16

/* nn_lanes_add adds the chunk base..base+m (base a multiple of 32, m 1..32,
 * lane j holding v for element base + j) into the partials of lanes
 * 0..15; lanes 16..31 hold nothing. All 32 lanes must call it. */
template <typename T> static __device__ __forceinline__ T nn_lanes_add(T acc, T v, int m)
{
	int lane = threadIdx.x % 32;
	T hi = __shfl_down_sync(NN_FULL, v, NN_LANES);
	if (lane < NN_LANES && lane < m)
		acc += v;
	if (lane < NN_LANES && lane + NN_LANES < m)
		acc += hi;
	return acc;
}

/* nn_lanes_sum folds lanes 0..15's partials in the CPU's tree and returns
 * the sum to every lane. All 32 lanes must call it. */
template <typename T> static __device__ __forceinline__ T nn_lanes_sum(T acc)
{
	int lane = threadIdx.x % 32;
	for (int w = NN_LANES / 2; w >= 1; w /= 2) {
		T o = __shfl_down_sync(NN_FULL, acc, w);
		if (lane < w)
			acc += o;
	}
	return __shfl_sync(NN_FULL, acc, 0);
}

/* nn_warp_max combines the lanes' running maxima as the CPU's
 * `if (x > mx) mx = x` does: NaNs never win. The value does not depend on
 * the order (only a tie of +0 and -0 could pick either sign, and every use
 * below, x - max, rounds both alike). */
static __device__ __forceinline__ float nn_warp_max(float mx)
{
	for (int off = 16; off > 0; off >>= 1) {
		float o = __shfl_xor_sync(NN_FULL, mx, off);
		if (o > mx)
			mx = o;
	}
	return mx;
}

/* nn_ids_flag queues on ctx's stream: *flag = 0, then *flag = 1 if any of
 * ids[0..n) is outside [0, v); it sets *flag to that device int (the
 * caller's invalid, or ctx's own when invalid is NULL), which the kernels
 * that follow test before writing anything. */
dg_status nn_ids_flag(dg_cuda_ctx *ctx, const int32_t *ids, int64_t n, int64_t v, int *invalid, int **flag);

/* nn_sgemm is cublasSgemm on ctx's handle (nn_matmul.cu; loads cuBLAS on
 * first use): column-major C[m,n] = alpha op(A) op(B) + beta C with alpha
 * 1, op transposing when ta / tb is nonzero. Sizes must fit an int. */
dg_status nn_sgemm(dg_cuda_ctx *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
		   const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

#endif /* DG_CUDA_NN_CUH */
