/*
 * internal.cuh — what the .cu files share: the context layout, error
 * recording, argument checks and the per-dtype element load/store built on
 * dg_math.h (so every kernel rounds exactly like the CPU core).
 *
 * Defines: struct dg_cuda_ctx, DG_CU_CTX, DG_CU, dg_cu_fail, dg_cu_invalid,
 * DG_CU_ENTER, dg_cu_check_list, dg_cu_scratch, dg_cu_copy_lists, Elem<dtype>,
 * dg_cu_is_float, dg_cu_dtype_size, DG_CU_FLOAT_DISPATCH, DG_CU_BLOCK,
 * dg_cu_nn_release. (The nn kernels' own helpers are in nn.cuh.)
 */
#ifndef DG_CUDA_INTERNAL_CUH
#define DG_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "deepgo_cuda.h"
#include "dg_math.h"

/* Threads per block of every kernel. Fixed, because the sum-of-squares tree
 * inside a block has this shape and its bits must not depend on anything. */
#define DG_CU_BLOCK 512

struct dg_cuda_ctx {
	int device;
	cudaStream_t stream;
	int owns_stream;
	void *scratch; /* stream-ordered (cudaMallocAsync) partials buffer */
	size_t scratch_bytes;
	int last_cuerr;
	char last_msg[256];
	void *blas;   /* cublasHandle_t, made on the first matmul (nn_matmul.cu) */
	int *nn_flag; /* device int for the nn kernels' token checks (nn_layers.cu) */
};

/* dg_cu_nn_release frees what the nn kernels made lazily on ctx (the cuBLAS
 * handle, the flag); dg_cuda_ctx_destroy calls it after the last sync. */
void dg_cu_nn_release(dg_cuda_ctx *ctx);

/* dg_cu_fail records a failed CUDA call on ctx and returns DG_ERR_CUDA. */
dg_status dg_cu_fail(dg_cuda_ctx *ctx, cudaError_t e, const char *call, const char *file, int line);
/* dg_cu_invalid records a non-CUDA failure (bad argument) and returns s. */
dg_status dg_cu_invalid(dg_cuda_ctx *ctx, dg_status s, const char *fn, const char *what);

/* DG_CU_CTX evaluates a CUDA call and returns from the caller on failure. */
#define DG_CU_CTX(ctx, call)                                                                                   \
	do {                                                                                                   \
		cudaError_t dg_e_ = (call);                                                                    \
		if (dg_e_ != cudaSuccess)                                                                      \
			return dg_cu_fail((ctx), dg_e_, #call, __FILE__, __LINE__);                            \
	} while (0)

/* DG_CU is the same for context-free functions: the code goes to *cuerr. */
#define DG_CU(cuerr, call)                                                                                     \
	do {                                                                                                   \
		cudaError_t dg_e_ = (call);                                                                    \
		if (dg_e_ != cudaSuccess) {                                                                    \
			if (cuerr)                                                                             \
				*(cuerr) = (int)dg_e_;                                                         \
			return DG_ERR_CUDA;                                                                    \
		}                                                                                              \
	} while (0)

/* dg_cu_check_list mirrors the CPU core's list rules (see deepgo.h). */
dg_status dg_cu_check_list(dg_cuda_ctx *ctx, const char *fn, const void *const *ptrs, const int64_t *ns, int count);

/* dg_cu_scratch makes ctx->scratch at least bytes, stream-ordered. */
dg_status dg_cu_scratch(dg_cuda_ctx *ctx, size_t bytes);

/* DG_CU_ENTER makes ctx's device current on this thread (see deepgo_cuda.h). */
#define DG_CU_ENTER(ctx) DG_CU_CTX(ctx, cudaSetDevice((ctx)->device))

/* dg_cu_copy_lists bit-copies srcs[i] to dsts[i], elements of esize bytes. */
dg_status dg_cu_copy_lists(dg_cuda_ctx *ctx, size_t esize, const void *const *srcs, void *const *dsts,
			   const int64_t *ns, int count);

static inline int dg_cu_is_float(dg_dtype t) { return t == DG_F32 || t == DG_F16 || t == DG_BF16; }

/* dg_cu_dtype_size is deepgo.h's dg_dtype_size, kept here so this library
 * does not need the CPU core to link. */
static inline size_t dg_cu_dtype_size(dg_dtype t)
{
	switch (t) {
	case DG_F32: case DG_I32: return 4;
	case DG_F16: case DG_BF16: return 2;
	case DG_I64: case DG_F64: return 8;
	case DG_U8: case DG_BOOL: return 1;
	}
	return 0;
}

/* Elem<T> is one dtype's storage type S, its float32 view (load/store,
 * rounding to nearest even) and the Inf/NaN bit test. */
template <dg_dtype T> struct Elem;
template <> struct Elem<DG_F32> {
	typedef float S;
	static __device__ __forceinline__ float load(S v) { return v; }
	static __device__ __forceinline__ S store(float f) { return f; }
	static __device__ __forceinline__ int finite(S v) { return dg_isfinite_f32(v); }
};
template <> struct Elem<DG_F16> {
	typedef uint16_t S;
	static __device__ __forceinline__ float load(S v) { return dg_f16_to_f32(v); }
	static __device__ __forceinline__ S store(float f) { return dg_f32_to_f16(f); }
	static __device__ __forceinline__ int finite(S v) { return dg_isfinite_f16(v); }
};
template <> struct Elem<DG_BF16> {
	typedef uint16_t S;
	static __device__ __forceinline__ float load(S v) { return dg_bf16_to_f32(v); }
	static __device__ __forceinline__ S store(float f) { return dg_f32_to_bf16(f); }
	static __device__ __forceinline__ int finite(S v) { return dg_isfinite_bf16(v); }
};

/* DG_CU_FLOAT_DISPATCH calls FN<dtype>(args) for a floating dtype t. */
#define DG_CU_FLOAT_DISPATCH(t, FN, ...)                                                                       \
	((t) == DG_F32    ? FN<DG_F32>(__VA_ARGS__)                                                            \
	 : (t) == DG_F16  ? FN<DG_F16>(__VA_ARGS__)                                                            \
			  : FN<DG_BF16>(__VA_ARGS__))

#endif /* DG_CUDA_INTERNAL_CUH */
