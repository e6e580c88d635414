/*
 * internal.cuh — what the .cu files share: the context layout, error
 * recording, argument checks and the per-dtype element load/store built on
 * dg_math.h (so every kernel rounds exactly like the CPU core).
 *
 * Defines: struct dg_cuda_ctx, DG_CU_CTX, DG_CU, dg_cu_fail, dg_cu_invalid,
 * DG_CU_ENTER, DG_CU_LAUNCH, DG_CU_MAX_GRID, dg_cu_check_list, dg_cu_check_optim_lists, dg_cu_scratch, dg_cu_copy_lists, Elem<dtype>,
 * dg_cu_is_float, dg_cu_dtype_size, DG_CU_FLOAT_DISPATCH, DG_CU_BLOCK,
 * dg_cu_nn_release. (The nn kernels' own helpers are in nn.cuh.)
 */
#ifndef DG_CUDA_INTERNAL_CUH
#define DG_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "deepgo_cuda.h"
#include "dg_cuda_err.h"
#include "dg_math.h"

/* Threads per block of every kernel. Fixed, because the sum-of-squares tree
 * inside a block has this shape and its bits must not depend on anything. */
#define DG_CU_BLOCK 512

struct dg_cuda_ctx {
	int device;
	cudaStream_t stream;
	int owns_stream;
	void *scratch; /* partials buffer, allocated in the stream's order (alloc.cu) */
	size_t scratch_bytes;
	int last_cuerr;
	char last_msg[256];
	void *blas;   /* cublasHandle_t, made on the first matmul (nn_matmul.cu) */
	int *nn_flag; /* device int for the nn kernels' token checks (nn_layers.cu) */
	void *lin;    /* the Linear layer's tiles (nn_linear.cu), stream-ordered */
	size_t lin_bytes;
};

/* dg_cu_nn_release frees what the nn kernels made lazily on ctx (the cuBLAS
 * handle, the flag); dg_cuda_ctx_destroy calls it after the last sync. */
void dg_cu_nn_release(dg_cuda_ctx *ctx);

/* dg_cu_fail records a failed CUDA call on ctx, clears the thread's last
 * error (dg_cuda_err.h) and returns DG_ERR_CUDA. */
dg_status dg_cu_fail(dg_cuda_ctx *ctx, cudaError_t e, const char *call, const char *file, int line);
/* dg_cu_invalid records a non-CUDA failure (bad argument) and returns s. */
dg_status dg_cu_invalid(dg_cuda_ctx *ctx, dg_status s, const char *fn, const char *what);
/* dg_cu_check_optim_lists is csrc/optim.c's dg_optim_check_lists with
 * messages naming fn (need_m, need_v: the moments the step reads). */
dg_status dg_cu_check_optim_lists(dg_cuda_ctx *ctx, const char *fn, const dg_optim_lists *l, int need_m, int need_v);

/* DG_CU_CTX evaluates a CUDA call and returns from the caller on failure. */
#define DG_CU_CTX(ctx, call)                                                                                   \
	do {                                                                                                   \
		cudaError_t dg_e_ = (call);                                                                    \
		if (dg_e_ != cudaSuccess)                                                                      \
			return dg_cu_fail((ctx), dg_e_, #call, __FILE__, __LINE__);                            \
	} while (0)

/* DG_CU is the same for context-free functions: the code goes to *cuerr,
 * and the thread's last error is cleared (dg_cuda_err.h). */
#define DG_CU(cuerr, call)                                                                                     \
	do {                                                                                                   \
		cudaError_t dg_e_ = dg_cu_handled(call);                                                       \
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

/* dg_cu_grow makes *buf (of *have bytes, owned by ctx) at least bytes,
 * stream-ordered: the old buffer is freed after the work queued on it. */
dg_status dg_cu_grow(dg_cuda_ctx *ctx, void **buf, size_t *have, size_t bytes);

/* dg_cu_ctx_alloc / dg_cu_ctx_free allocate and free device memory in the
 * order of ctx's stream, for buffers only its kernels use (alloc.cu). */
dg_status dg_cu_ctx_alloc(dg_cuda_ctx *ctx, void **p, size_t bytes);
void dg_cu_ctx_free(dg_cuda_ctx *ctx, void *p);

/* DG_CU_ENTER makes ctx's device current on this thread (see deepgo_cuda.h). */
#define DG_CU_ENTER(ctx) DG_CU_CTX(ctx, cudaSetDevice((ctx)->device))

/* DG_CU_MAX_GRID is the most blocks a launch may have (gridDim.x <= 2^31 - 1). */
#define DG_CU_MAX_GRID ((int64_t)INT32_MAX)

/* dg_cu_bad_grid records a grid outside 1..DG_CU_MAX_GRID on ctx (DG_ERR_SIZE). */
dg_status dg_cu_bad_grid(dg_cuda_ctx *ctx, const char *kernel, int64_t grid);

/* dg_cu_launch is DG_CU_LAUNCH's body: check the grid, clear an error some
 * earlier call left on this thread (a launch is checked with
 * cudaGetLastError, which would report it; dg_cuda_err.h), launch, check. */
template <typename... P, typename... A>
static dg_status dg_cu_launch(dg_cuda_ctx *ctx, const char *name, const char *file, int line, void (*kernel)(P...),
			      int64_t grid, unsigned block, const A &...args)
{
	if (grid < 1 || grid > DG_CU_MAX_GRID)
		return dg_cu_bad_grid(ctx, name, grid);
	(void)cudaGetLastError();
	kernel<<<(unsigned)grid, block, 0, ctx->stream>>>(args...);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return dg_cu_fail(ctx, e, name, file, line);
	return DG_OK;
}

/* DG_CU_LAUNCH(ctx, kernel, grid, block, args...) launches kernel on ctx's
 * stream, grid blocks (an int64_t, checked) of block threads, and returns
 * from the caller on failure. Every launch goes through it. A template
 * kernel goes in parentheses: DG_CU_LAUNCH(ctx, (k<A, B>), ...). */
#define DG_CU_LAUNCH(ctx, kernel, grid, block, ...)                                                            \
	do {                                                                                                   \
		dg_status dg_ls_ = dg_cu_launch((ctx), #kernel, __FILE__, __LINE__, kernel, (int64_t)(grid),   \
						(unsigned)(block), __VA_ARGS__);                               \
		if (dg_ls_ != DG_OK)                                                                           \
			return dg_ls_;                                                                         \
	} while (0)

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
