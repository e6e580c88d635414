/*
 * reduce.cu — dg_cuda_reduce_into: dst[k] = srcs[0][k] op srcs[1][k] op ...
 * for the in-process collectives. One thread owns element k: it reads every
 * source in list order before writing dst[k], which keeps dst == srcs[j]
 * safe and the bits a function of the list order alone. Floats combine in
 * float32 (halves widened, rounded once at the end), integers wrap in two's
 * complement: both exactly as csrc/reduce.c does.
 */
#include "internal.cuh"

/* The source pointers ride in the kernel parameters: 256 x 8 B = 2 KiB, well
 * inside the 4 KiB limit; 256 ranks in one process is beyond any node. */
struct ReduceArgs {
	const void *src[DG_CUDA_MAX_REDUCE_SRCS];
};

/* red_f32 is csrc's: MAX/MIN keep the first NaN met (acc if it already is
 * one), quieted as the CPU quiets it (a signalling payload would otherwise
 * survive on the GPU alone), and ties keep acc, so max(-0, +0) with -0
 * first is -0. SUM is left to the hardware: gpucheck accepts any NaN there,
 * since the GPU's adder returns its canonical NaN. */
template <int OP> static __device__ __forceinline__ float red_f32(float acc, float v)
{
	if (OP == DG_SUM)
		return acc + v;
	if (acc != acc)
		return dg_bits_f32(dg_f32_bits(acc) | 0x400000u);
	if (v != v)
		return dg_bits_f32(dg_f32_bits(v) | 0x400000u);
	if (OP == DG_MAX)
		return v > acc ? v : acc;
	return v < acc ? v : acc;
}

template <typename T, typename UT, int OP> static __device__ __forceinline__ T red_int(T acc, T v)
{
	if (OP == DG_SUM)
		return (T)((UT)acc + (UT)v);
	if (OP == DG_MAX)
		return v > acc ? v : acc;
	return v < acc ? v : acc;
}

template <dg_dtype D, int OP>
__global__ void __launch_bounds__(DG_CU_BLOCK)
	reduce_float(const __grid_constant__ ReduceArgs a, int nsrc, typename Elem<D>::S *dst, int64_t n)
{
	typedef typename Elem<D>::S S;
	for (int64_t k = blockIdx.x * (int64_t)DG_CU_BLOCK + threadIdx.x; k < n; k += (int64_t)gridDim.x * DG_CU_BLOCK) {
		float acc = Elem<D>::load(((const S *)a.src[0])[k]);
		for (int q = 1; q < nsrc; q++)
			acc = red_f32<OP>(acc, Elem<D>::load(((const S *)a.src[q])[k]));
		dst[k] = Elem<D>::store(acc);
	}
}

template <typename T, typename UT, int OP>
__global__ void __launch_bounds__(DG_CU_BLOCK)
	reduce_int(const __grid_constant__ ReduceArgs a, int nsrc, T *dst, int64_t n)
{
	for (int64_t k = blockIdx.x * (int64_t)DG_CU_BLOCK + threadIdx.x; k < n; k += (int64_t)gridDim.x * DG_CU_BLOCK) {
		T acc = ((const T *)a.src[0])[k];
		for (int q = 1; q < nsrc; q++)
			acc = red_int<T, UT, OP>(acc, ((const T *)a.src[q])[k]);
		dst[k] = acc;
	}
}

/* A grid-stride loop over at most this many blocks: enough to fill an H200
 * (132 SMs x 4 blocks of 512) several times over, while huge n still needs
 * only one launch. */
#define DG_REDUCE_MAX_BLOCKS 4096

template <int OP>
static dg_status launch(dg_cuda_ctx *ctx, dg_dtype t, const ReduceArgs &a, int nsrc, void *dst, int64_t n,
			int64_t blocks)
{
	switch (t) {
	case DG_F32: DG_CU_LAUNCH(ctx, (reduce_float<DG_F32, OP>), blocks, DG_CU_BLOCK, a, nsrc, (float *)dst, n); break;
	case DG_F16: DG_CU_LAUNCH(ctx, (reduce_float<DG_F16, OP>), blocks, DG_CU_BLOCK, a, nsrc, (uint16_t *)dst, n); break;
	case DG_BF16:
		DG_CU_LAUNCH(ctx, (reduce_float<DG_BF16, OP>), blocks, DG_CU_BLOCK, a, nsrc, (uint16_t *)dst, n);
		break;
	case DG_I32:
		DG_CU_LAUNCH(ctx, (reduce_int<int32_t, uint32_t, OP>), blocks, DG_CU_BLOCK, a, nsrc, (int32_t *)dst, n);
		break;
	default:
		DG_CU_LAUNCH(ctx, (reduce_int<int64_t, uint64_t, OP>), blocks, DG_CU_BLOCK, a, nsrc, (int64_t *)dst, n);
		break;
	}
	return DG_OK;
}

dg_status dg_cuda_reduce_into(dg_cuda_ctx *ctx, dg_dtype t, dg_redop op, const void *const *srcs, int nsrc,
			      void *dst, int64_t n)
{
	const char *fn = "dg_cuda_reduce_into";
	DG_CU_ENTER(ctx);
	if (n < 0 || nsrc < 0 || (op != DG_SUM && op != DG_MAX && op != DG_MIN))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "n < 0, nsrc < 0 or an unknown op");
	if (!dg_cu_is_float(t) && t != DG_I32 && t != DG_I64)
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, fn, "dtype: allowed F32, F16, BF16, I32, I64");
	if (n == 0)
		return DG_OK;
	if (nsrc == 0 || srcs == NULL || dst == NULL)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "no sources or a NULL dst");
	if (nsrc > DG_CUDA_MAX_REDUCE_SRCS)
		return dg_cu_invalid(ctx, DG_ERR_SIZE, fn, "more than DG_CUDA_MAX_REDUCE_SRCS sources");
	ReduceArgs a;
	for (int q = 0; q < nsrc; q++) {
		if (srcs[q] == NULL)
			return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "a NULL source");
		a.src[q] = srcs[q];
	}
	int64_t need = (n + DG_CU_BLOCK - 1) / DG_CU_BLOCK;
	int64_t blocks = need < DG_REDUCE_MAX_BLOCKS ? need : DG_REDUCE_MAX_BLOCKS;
	switch (op) {
	case DG_SUM: return launch<DG_SUM>(ctx, t, a, nsrc, dst, n, blocks);
	case DG_MAX: return launch<DG_MAX>(ctx, t, a, nsrc, dst, n, blocks);
	default: return launch<DG_MIN>(ctx, t, a, nsrc, dst, n, blocks);
	}
}
