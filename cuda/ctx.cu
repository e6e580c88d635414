/*
 * ctx.cu — contexts, errors, and the thin wrappers over the runtime API
 * (devices, copies, streams, events) that the Go side needs; allocation is
 * in alloc.cu. Only the CUDA
 * runtime is used: it loads the driver (libcuda) at run time, so everything
 * links on machines without one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.cuh"

static_assert(DG_CUDA_ERR_INSUFFICIENT_DRIVER == (int)cudaErrorInsufficientDriver, "deepgo_cuda.h's copy");

dg_status dg_cu_fail(dg_cuda_ctx *ctx, cudaError_t e, const char *call, const char *file, int line)
{
	const char *base = strrchr(file, '/');
	dg_cu_handled(e);
	ctx->last_cuerr = (int)e;
	snprintf(ctx->last_msg, sizeof ctx->last_msg, "%s:%d: %s: %s: %s", base ? base + 1 : file, line, call,
		 cudaGetErrorName(e), cudaGetErrorString(e));
	return DG_ERR_CUDA;
}

dg_status dg_cu_invalid(dg_cuda_ctx *ctx, dg_status s, const char *fn, const char *what)
{
	ctx->last_cuerr = 0;
	snprintf(ctx->last_msg, sizeof ctx->last_msg, "%s: %s", fn, what);
	return s;
}

dg_status dg_cu_bad_grid(dg_cuda_ctx *ctx, const char *kernel, int64_t grid)
{
	ctx->last_cuerr = 0;
	snprintf(ctx->last_msg, sizeof ctx->last_msg, "%s: a grid of %lld blocks: allowed 1..%lld (the sizes are too large)",
		 kernel, (long long)grid, (long long)DG_CU_MAX_GRID);
	return DG_ERR_SIZE;
}

dg_status dg_cu_check_list(dg_cuda_ctx *ctx, const char *fn, const void *const *ptrs, const int64_t *ns, int count)
{
	if (count < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "count < 0");
	if (count > 0 && (ptrs == NULL || ns == NULL))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "NULL list");
	for (int i = 0; i < count; i++) {
		if (ns[i] < 0 || (ns[i] > 0 && ptrs[i] == NULL))
			return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "a negative count or a NULL tensor");
	}
	return DG_OK;
}

/* ---- no context ---------------------------------------------------------- */

dg_status dg_cuda_device_count(int *n, int *cuerr)
{
	*n = 0;
	cudaError_t e = dg_cu_handled(cudaGetDeviceCount(n));
	/* No device, or no driver at all (the runtime says "insufficient
	 * driver" then too, with driver version 0): a CPU machine, not an
	 * error. A driver that is there but older than this runtime is one. */
	int driver = 0;
	if (e == cudaErrorInsufficientDriver && dg_cu_handled(cudaDriverGetVersion(&driver)) == cudaSuccess &&
	    driver == 0)
		e = cudaErrorNoDevice;
	if (e == cudaErrorNoDevice) {
		*n = 0;
		return DG_OK;
	}
	DG_CU(cuerr, e);
	return DG_OK;
}

const char *dg_cuda_error_name(int cuerr) { return cudaGetErrorName((cudaError_t)cuerr); }
const char *dg_cuda_error_string(int cuerr) { return cudaGetErrorString((cudaError_t)cuerr); }

int dg_cuda_runtime_version(void)
{
	int v = 0;
	return cudaRuntimeGetVersion(&v) == cudaSuccess ? v : 0;
}

int dg_cuda_driver_version(void)
{
	int v = 0;
	return cudaDriverGetVersion(&v) == cudaSuccess ? v : 0;
}

dg_status dg_cuda_memcpy(int device, void *dst, const void *src, size_t bytes, int *cuerr)
{
	if (bytes == 0)
		return DG_OK;
	DG_CU(cuerr, cudaSetDevice(device));
	DG_CU(cuerr, cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
	/* cudaMemcpy from pageable host memory to the device may return before
	 * the DMA lands; callers expect the copy complete */
	DG_CU(cuerr, cudaStreamSynchronize(0));
	return DG_OK;
}

/* is_host reports whether p is host memory and, if so, whether pinned
 * (page-locked or registered: the DMA engine reads it in stream order). */
static cudaError_t is_host(const void *p, int *host, int *pinned)
{
	cudaPointerAttributes a;
	cudaError_t e = cudaPointerGetAttributes(&a, p);
	if (e != cudaSuccess)
		return e;
	*host = a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
	*pinned = a.type == cudaMemoryTypeHost;
	return cudaSuccess;
}

/* Why each direction is done the way it is (CUDA Runtime API, "API
 * synchronization behavior"): the synchronous cudaMemcpy from pageable host
 * memory "will return once the pageable buffer has been copied to the
 * staging memory for DMA transfer", which is what lets the caller reuse src.
 * cudaMemcpyAsync promises no such thing: the 11.x text says pageable
 * memory staged for it "will be handled asynchronously with a worker
 * thread", the 12.x/13.x text that it "might be synchronous". So pageable
 * sources go through cudaMemcpy on the legacy default stream, which ctx's
 * blocking stream waits for and is waited for by; pinned sources and host
 * destinations queue on ctx's stream and wait for it. */
dg_status dg_cuda_copy(dg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	DG_CU_ENTER(ctx);
	if (bytes == 0)
		return DG_OK;
	if (dst == NULL || src == NULL)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_copy", "NULL dst or src");
	int dst_host, dst_pinned, src_host, src_pinned;
	DG_CU_CTX(ctx, is_host(dst, &dst_host, &dst_pinned));
	DG_CU_CTX(ctx, is_host(src, &src_host, &src_pinned));
	if (src_host && !src_pinned && !dst_host) {
		DG_CU_CTX(ctx, cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
		return DG_OK;
	}
	DG_CU_CTX(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx->stream));
	if (src_host || dst_host)
		DG_CU_CTX(ctx, cudaStreamSynchronize(ctx->stream));
	return DG_OK;
}

/* The copy stream waits for ctx's stream through an event rather than the
 * legacy default stream, so kernels issued on ctx's stream after the copy
 * run alongside it. A pageable host side makes cudaMemcpyAsync staged or
 * synchronous (CUDA Runtime API, "API synchronization behavior"): still
 * correct, only not overlapped; HostEmpty's page-locked memory is what
 * overlaps. */
dg_status dg_cuda_copy_async(dg_cuda_ctx *ctx, void *stream, void *dst, const void *src, size_t bytes, void **done)
{
	DG_CU_ENTER(ctx);
	*done = NULL;
	if (bytes > 0 && (dst == NULL || src == NULL))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_copy_async", "NULL dst or src");
	cudaStream_t s = (cudaStream_t)stream;
	cudaEvent_t after, fin;
	DG_CU_CTX(ctx, cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
	cudaError_t e = cudaEventRecord(after, ctx->stream);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(s, after, 0);
	/* released once the recorded work completes */
	dg_cu_handled(cudaEventDestroy(after));
	DG_CU_CTX(ctx, e);
	DG_CU_CTX(ctx, cudaEventCreateWithFlags(&fin, cudaEventDisableTiming));
	e = bytes > 0 ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s) : cudaSuccess;
	if (e == cudaSuccess)
		e = cudaEventRecord(fin, s);
	if (e != cudaSuccess) {
		dg_cu_handled(cudaEventDestroy(fin));
		DG_CU_CTX(ctx, e);
	}
	*done = fin;
	return DG_OK;
}

dg_status dg_cuda_zero(dg_cuda_ctx *ctx, void *const *xs, const size_t *bytes, int count)
{
	DG_CU_ENTER(ctx);
	if (count < 0 || (count > 0 && (xs == NULL || bytes == NULL)))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_zero", "negative count or NULL lists");
	for (int i = 0; i < count; i++) {
		if (bytes[i] == 0)
			continue;
		if (xs[i] == NULL)
			return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_zero", "NULL tensor with bytes > 0");
		DG_CU_CTX(ctx, cudaMemsetAsync(xs[i], 0, bytes[i], ctx->stream));
	}
	return DG_OK;
}

dg_status dg_cuda_stream_create(int device, void **out, int *cuerr)
{
	DG_CU(cuerr, cudaSetDevice(device));
	cudaStream_t s;
	DG_CU(cuerr, cudaStreamCreateWithFlags(&s, cudaStreamDefault));
	*out = s;
	return DG_OK;
}

dg_status dg_cuda_stream_destroy(int device, void *s, int *cuerr)
{
	DG_CU(cuerr, cudaSetDevice(device));
	DG_CU(cuerr, cudaStreamDestroy((cudaStream_t)s));
	return DG_OK;
}

dg_status dg_cuda_stream_synchronize(int device, void *s, int *cuerr)
{
	DG_CU(cuerr, cudaSetDevice(device));
	DG_CU(cuerr, cudaStreamSynchronize((cudaStream_t)s));
	return DG_OK;
}

/* query_result: cudaErrorNotReady is "not done", not a failure, and must
 * not linger as the thread's last error (dg_cuda_err.h) */
static dg_status query_result(cudaError_t e, int *done, int *cuerr)
{
	DG_CU(cuerr, dg_cu_query(e, done));
	return DG_OK;
}

dg_status dg_cuda_stream_query(int device, void *s, int *done, int *cuerr)
{
	DG_CU(cuerr, cudaSetDevice(device));
	return query_result(cudaStreamQuery((cudaStream_t)s), done, cuerr);
}

dg_status dg_cuda_event_create(int device, void **out, int *cuerr)
{
	DG_CU(cuerr, cudaSetDevice(device));
	cudaEvent_t e;
	DG_CU(cuerr, cudaEventCreate(&e));
	*out = e;
	return DG_OK;
}

dg_status dg_cuda_event_destroy(int device, void *e, int *cuerr)
{
	DG_CU(cuerr, cudaSetDevice(device));
	DG_CU(cuerr, cudaEventDestroy((cudaEvent_t)e));
	return DG_OK;
}

dg_status dg_cuda_event_record(int device, void *e, void *s, int *cuerr)
{
	DG_CU(cuerr, cudaSetDevice(device));
	DG_CU(cuerr, cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s));
	return DG_OK;
}

dg_status dg_cuda_event_synchronize(int device, void *e, int *cuerr)
{
	DG_CU(cuerr, cudaSetDevice(device));
	DG_CU(cuerr, cudaEventSynchronize((cudaEvent_t)e));
	return DG_OK;
}

dg_status dg_cuda_event_query(int device, void *e, int *done, int *cuerr)
{
	DG_CU(cuerr, cudaSetDevice(device));
	return query_result(cudaEventQuery((cudaEvent_t)e), done, cuerr);
}

dg_status dg_cuda_event_elapsed(void *start, void *end, float *ms, int *cuerr)
{
	DG_CU(cuerr, cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
	return DG_OK;
}

/* ---- context ------------------------------------------------------------- */

dg_status dg_cuda_ctx_create(int device, void *stream, dg_cuda_ctx **out, int *cuerr)
{
	*out = NULL;
	DG_CU(cuerr, cudaSetDevice(device));
	dg_cuda_ctx *c = (dg_cuda_ctx *)calloc(1, sizeof *c);
	if (c == NULL)
		return DG_ERR_NOMEM;
	c->device = device;
	if (stream) {
		c->stream = (cudaStream_t)stream;
	} else {
		cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamDefault);
		if (e != cudaSuccess) {
			free(c);
			DG_CU(cuerr, e);
		}
		c->owns_stream = 1;
	}
	*out = c;
	return DG_OK;
}

void dg_cuda_ctx_destroy(dg_cuda_ctx *ctx)
{
	if (ctx == NULL)
		return;
	/* errors here have nowhere to go: the context is gone either way (and
	 * they must not linger as this thread's last error) */
	dg_cu_handled(cudaSetDevice(ctx->device));
	dg_cu_handled(cudaStreamSynchronize(ctx->stream));
	dg_cu_nn_release(ctx);
	dg_cu_ctx_free(ctx, ctx->scratch);
	dg_cu_ctx_free(ctx, ctx->lin);
	if (ctx->owns_stream)
		dg_cu_handled(cudaStreamDestroy(ctx->stream));
	free(ctx);
}

int dg_cuda_ctx_device(const dg_cuda_ctx *ctx) { return ctx->device; }
void *dg_cuda_ctx_stream(const dg_cuda_ctx *ctx) { return ctx->stream; }

const char *dg_cuda_ctx_error(const dg_cuda_ctx *ctx, int *cuerr)
{
	if (cuerr)
		*cuerr = ctx->last_cuerr;
	return ctx->last_msg;
}

dg_status dg_cuda_ctx_synchronize(dg_cuda_ctx *ctx)
{
	DG_CU_CTX(ctx, cudaSetDevice(ctx->device));
	DG_CU_CTX(ctx, cudaStreamSynchronize(ctx->stream));
	return DG_OK;
}
