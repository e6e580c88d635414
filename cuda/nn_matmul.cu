/*
 * nn_matmul.cu — the Linear layer's products (dg_cuda_nn_matmul_*) on
 * cuBLAS, and cuBLAS itself: loaded with dlopen, one handle per context.
 *
 * Why dlopen and not a link: the toolchain wheels ship libcublas.so.13 but
 * no libcublas_static.a, and a dynamic link would make every binary that
 * uses package cuda (all of them, cuda.test and gpucheck included) need
 * libcublas.so.13 at start-up, found through an rpath into this machine's
 * .cuda folder that the GPU machine does not have. Loading on the first
 * matmul, as package nccl loads libnccl, keeps the rest of the library
 * free of cuBLAS, lets the GPU machine use its own CUDA's cuBLAS, and turns
 * a missing cuBLAS into a clear error from the matmul instead of a loader
 * failure. The function table is typed with decltype of cublas_api.h's own
 * prototypes, so a signature cannot drift from the header compiled against.
 * RTLD_LOCAL: libcublas carries its own static CUDA runtime; its symbols
 * must not interpose on ours (streams are driver objects, shared by both).
 *
 * Numerics: CUBLAS_PEDANTIC_MATH, i.e. CUBLAS_COMPUTE_32F_PEDANTIC: plain
 * float32 multiply-adds, never TF32 tensor cores nor the BF16x9 emulation
 * that cuBLAS 12.9+ may pick in the default mode (CUBLAS_EMULATE_* env), so
 * the products stay comparable with OpenBLAS's within float32 rounding of a
 * different summation order (~1e-6 relative). cuBLAS is deterministic for a
 * given handle, stream, GPU model and cuBLAS version.
 *
 * Row-major to cuBLAS's column-major: a row-major [R,K] matrix is the
 * column-major [K,R] one, so out[N,OC] = inp[N,C] @ w[OC,C]^T is, column-
 * major, out^T[OC,N] = op_T(w as [C,OC]) @ inp^T[C,N] (llm.c's mapping).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>

#include "nn.cuh"

/* the soname of the cuBLAS whose headers we compile against: a CUDA 12
 * toolkit's cuBLAS is libcublas.so.12, and its prototypes are what the
 * function table below is typed with */
#define DG_CUBLAS_STR_(x) #x
#define DG_CUBLAS_STR(x) DG_CUBLAS_STR_(x)
#define DG_CUBLAS_SONAME "libcublas.so." DG_CUBLAS_STR(CUBLAS_VER_MAJOR)

#define DG_CUBLAS_SYMBOLS(X)                                                                                   \
	X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasSetMathMode) X(cublasSgemm_v2)      \
		X(cublasGetStatusString)

#define DG_CUBLAS_FIELD(name) decltype(&::name) name;
static struct {
	DG_CUBLAS_SYMBOLS(DG_CUBLAS_FIELD)
} blas_api;
static void *blas_lib;
static char blas_loaded_path[4096];
static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;

/* blas_try opens one file; called with blas_mu held. */
static int blas_try(const char *path, char *err, size_t errlen)
{
	/* a file path is resolved first: libcublas finds libcublasLt through
	 * its RUNPATH $ORIGIN, which the loader takes from the path as given,
	 * so through a link it would look next to the link */
	char real[4096];
	if (strchr(path, '/') != NULL && realpath(path, real) != NULL)
		path = real;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		if (err && errlen)
			snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
#define DG_CUBLAS_LOOKUP(name)                                                                                 \
	blas_api.name = (decltype(&::name))dlsym(h, #name);                                                    \
	if (blas_api.name == NULL) {                                                                           \
		if (err && errlen)                                                                             \
			snprintf(err, errlen, "%s: symbol %s missing (cuBLAS older than %d?)", path, #name,    \
				 CUBLAS_VER_MAJOR);                                                            \
		dlclose(h);                                                                                    \
		return -1;                                                                                     \
	}
	DG_CUBLAS_SYMBOLS(DG_CUBLAS_LOOKUP)
#undef DG_CUBLAS_LOOKUP
	blas_lib = h;
	snprintf(blas_loaded_path, sizeof blas_loaded_path, "%s", path);
	return 0;
}

/* blas_try_dir tries dir/DG_CUBLAS_SONAME; errors are appended to err. */
static int blas_try_dir(const char *dir, char *err, size_t errlen)
{
	char p[2048], e[512];
	int pl = snprintf(p, sizeof p, "%s/%s", dir, DG_CUBLAS_SONAME);
	if (pl < 0 || (size_t)pl >= sizeof p || access(p, F_OK) != 0)
		return -1;
	if (blas_try(p, e, sizeof e) == 0)
		return 0;
	if (err && errlen) {
		size_t l = strlen(err);
		snprintf(err + l, errlen - l, "; %s", e);
	}
	return -1;
}

static int blas_load_default(char *err, size_t errlen)
{
	char e[512];
	if (err && errlen)
		err[0] = 0;
	const char *env = getenv("DEEPGO_CUBLAS_LIB");
	if (env && *env) { /* the user's choice is the only one tried */
		if (blas_try_dir(env, err, errlen) == 0)
			return 0;
		if (blas_try(env, e, sizeof e) == 0)
			return 0;
		if (err && errlen)
			snprintf(err, errlen, "DEEPGO_CUBLAS_LIB=%s: %s", env, e);
		return -1;
	}
	/* next to the executable: build/cuda/lib for build/cuda/{gpucheck,cuda.test} */
	char exe[1024];
	ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 8);
	if (l > 0) {
		exe[l] = 0;
		char *slash = strrchr(exe, '/');
		if (slash) {
			strcpy(slash, "/lib");
			if (blas_try_dir(exe, err, errlen) == 0)
				return 0;
		}
	}
	if (blas_try(DG_CUBLAS_SONAME, e, sizeof e) == 0)
		return 0;
	const char *home = getenv("CUDA_HOME");
	if (home && *home) {
		char d[1024];
		snprintf(d, sizeof d, "%s/lib64", home);
		if (blas_try_dir(d, err, errlen) == 0)
			return 0;
	}
	if (blas_try_dir("/usr/local/cuda/lib64", err, errlen) == 0)
		return 0;
	if (err && errlen) {
		char tail[512];
		snprintf(tail, sizeof tail, "%s", err);
		snprintf(err, errlen, "cannot load %s (set DEEPGO_CUBLAS_LIB): %s%s", DG_CUBLAS_SONAME, e, tail);
	}
	return -1;
}

const char *dg_cuda_blas_soname(void) { return DG_CUBLAS_SONAME; }

dg_status dg_cuda_blas_load(const char *path, char *err, size_t errlen)
{
	pthread_mutex_lock(&blas_mu);
	int rc = 0;
	if (blas_lib == NULL)
		rc = path ? blas_try(path, err, errlen) : blas_load_default(err, errlen);
	pthread_mutex_unlock(&blas_mu);
	return rc == 0 ? DG_OK : DG_ERR_UNSUPPORTED;
}

const char *dg_cuda_blas_path(void)
{
	pthread_mutex_lock(&blas_mu);
	const char *p = blas_lib ? blas_loaded_path : "";
	pthread_mutex_unlock(&blas_mu);
	return p;
}

static dg_status blas_fail(dg_cuda_ctx *ctx, cublasStatus_t st, const char *call, int line)
{
	ctx->last_cuerr = 0;
	snprintf(ctx->last_msg, sizeof ctx->last_msg, "nn_matmul.cu:%d: %s: %s (cublasStatus_t %d)", line, call,
		 blas_api.cublasGetStatusString ? blas_api.cublasGetStatusString(st) : "?", (int)st);
	return DG_ERR_CUDA;
}

#define DG_BLAS(ctx, call)                                                                                     \
	do {                                                                                                   \
		cublasStatus_t dg_st_ = (call);                                                                \
		if (dg_st_ != CUBLAS_STATUS_SUCCESS)                                                           \
			return blas_fail((ctx), dg_st_, #call, __LINE__);                                      \
	} while (0)

/* blas_handle returns ctx's handle, loading cuBLAS and making the handle
 * (on ctx's device, bound to its stream, pedantic math) on first use. */
static dg_status blas_handle(dg_cuda_ctx *ctx, cublasHandle_t *out)
{
	if (ctx->blas == NULL) {
		char err[1024];
		if (dg_cuda_blas_load(NULL, err, sizeof err) != DG_OK)
			return dg_cu_invalid(ctx, DG_ERR_UNSUPPORTED, "cuBLAS", err);
		cublasHandle_t h = NULL;
		DG_BLAS(ctx, blas_api.cublasCreate_v2(&h));
		cublasStatus_t st = blas_api.cublasSetStream_v2(h, ctx->stream);
		if (st == CUBLAS_STATUS_SUCCESS)
			st = blas_api.cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
		if (st != CUBLAS_STATUS_SUCCESS) {
			blas_api.cublasDestroy_v2(h);
			return blas_fail(ctx, st, "cublasSetStream/cublasSetMathMode", __LINE__);
		}
		ctx->blas = h;
	}
	*out = (cublasHandle_t)ctx->blas;
	return DG_OK;
}

dg_status nn_sgemm(dg_cuda_ctx *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
		   const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
	cublasHandle_t h;
	dg_status s = blas_handle(ctx, &h);
	if (s != DG_OK)
		return s;
	const float one = 1.0f;
	DG_BLAS(ctx, blas_api.cublasSgemm_v2(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, (int)m,
					     (int)n, (int)k, &one, a, (int)lda, b, (int)ldb, &beta, c, (int)ldc));
	return DG_OK;
}

void dg_cu_nn_release(dg_cuda_ctx *ctx)
{
	if (ctx->blas) {
		blas_api.cublasDestroy_v2((cublasHandle_t)ctx->blas);
		ctx->blas = NULL;
	}
	dg_cu_ctx_free(ctx, ctx->nn_flag);
	ctx->nn_flag = NULL;
}

/* out[r, :] = bias (or 0 when bias is NULL), every row */
__global__ void __launch_bounds__(NN_BLOCK) mm_fill_rows(float *out, const float *bias, int64_t n, int64_t oc)
{
	for (int64_t i = blockIdx.x * (int64_t)NN_BLOCK + threadIdx.x; i < n * oc; i += (int64_t)gridDim.x * NN_BLOCK)
		out[i] = bias ? bias[i % oc] : 0.0f;
}

/* dbias[o] += dout[0, o] + dout[1, o] + ... one row at a time, as the CPU:
 * one thread per column, so the bits match it exactly. */
__global__ void __launch_bounds__(NN_BLOCK)
	mm_dbias(float *__restrict__ dbias, const float *__restrict__ dout, int64_t n, int64_t oc)
{
	int64_t o = blockIdx.x * (int64_t)NN_BLOCK + threadIdx.x;
	if (o >= oc)
		return;
	float acc = dbias[o];
	for (int64_t r = 0; r < n; r++)
		acc += dout[r * oc + o];
	dbias[o] = acc;
}

dg_status dg_cuda_nn_matmul_forward(dg_cuda_ctx *ctx, float *out, const float *inp, const float *w,
				    const float *bias, int64_t n, int64_t c, int64_t oc)
{
	static const char fn[] = "dg_cuda_nn_matmul_forward";
	DG_CU_ENTER(ctx);
	if (out == NULL || inp == NULL || w == NULL || n < 0 || c < 0 || oc < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "NULL tensor or negative size");
	if (n > INT32_MAX || c > INT32_MAX || oc > INT32_MAX)
		return dg_cu_invalid(ctx, DG_ERR_SIZE, fn, "a size over INT32_MAX");
	if (n == 0 || oc == 0)
		return DG_OK;
	/* as the CPU: the bias first, then sgemm adds the product (beta 1) */
	if (bias != NULL || c == 0) {
		DG_CU_LAUNCH(ctx, mm_fill_rows, nn_blocks(n * oc), NN_BLOCK, out, bias, n, oc);
	}
	if (c == 0) /* an empty sum; cuBLAS rejects leading dimensions of 0 */
		return DG_OK;
	cublasHandle_t h;
	dg_status s = blas_handle(ctx, &h);
	if (s != DG_OK)
		return s;
	const float one = 1.0f, zero = 0.0f;
	DG_BLAS(ctx, blas_api.cublasSgemm_v2(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)oc, (int)n, (int)c, &one, w, (int)c,
					     inp, (int)c, bias ? &one : &zero, out, (int)oc));
	return DG_OK;
}

dg_status dg_cuda_nn_matmul_backward(dg_cuda_ctx *ctx, float *dinp, float *dw, float *dbias, const float *dout,
				     const float *inp, const float *w, int64_t n, int64_t c, int64_t oc)
{
	static const char fn[] = "dg_cuda_nn_matmul_backward";
	DG_CU_ENTER(ctx);
	if (dout == NULL || n < 0 || c < 0 || oc < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "NULL dout or negative size");
	if ((dinp != NULL && w == NULL) || (dw != NULL && inp == NULL))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "dinp needs w, dw needs inp");
	if (n > INT32_MAX || c > INT32_MAX || oc > INT32_MAX)
		return dg_cu_invalid(ctx, DG_ERR_SIZE, fn, "a size over INT32_MAX");
	if (n == 0 || oc == 0)
		return DG_OK;
	const float one = 1.0f;
	if ((dinp != NULL || dw != NULL) && c > 0) {
		cublasHandle_t h;
		dg_status s = blas_handle(ctx, &h);
		if (s != DG_OK)
			return s;
		/* dinp[N,C] += dout[N,OC] @ w[OC,C]: column-major dinp^T[C,N] += w^T[C,OC] @ dout^T[OC,N] */
		if (dinp != NULL)
			DG_BLAS(ctx, blas_api.cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)c, (int)n, (int)oc, &one,
							     w, (int)c, dout, (int)oc, &one, dinp, (int)c));
		/* dw[OC,C] += dout^T @ inp: column-major dw^T[C,OC] += inp^T[C,N] @ op_T(dout^T[OC,N]) */
		if (dw != NULL)
			DG_BLAS(ctx, blas_api.cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)c, (int)oc, (int)n, &one,
							     inp, (int)c, dout, (int)oc, &one, dw, (int)c));
	}
	if (dbias != NULL) {
		DG_CU_LAUNCH(ctx, mm_dbias, (oc + NN_BLOCK - 1) / NN_BLOCK, NN_BLOCK, dbias, dout, n, oc);
	}
	return DG_OK;
}
