/*
 * alloc.cu — device memory without waiting for other streams.
 *
 * cudaMalloc, cudaFree and a cudaDeviceSynchronize after the zeroing would
 * each wait for the whole device: an allocation would stall behind every
 * collective in flight. Instead each device gets, on first use, its own
 * stream-ordered pool (cudaMemPoolCreate) and a private non-blocking stream:
 *
 *   dg_cuda_malloc  allocates and zeroes on the private stream and waits for
 *                   that stream only; once it is synchronized the memory is
 *                   usable from every stream;
 *   dg_cuda_free    frees on the legacy default stream: after all the work
 *                   queued so far on it and on every blocking stream (all
 *                   the streams this library and package cuda make), without
 *                   the host waiting;
 *   context buffers (the scratch, the nn flag) come and go in the order of
 *                   the context's own stream.
 *
 * The pool reuses a block only after its free has run (opportunistic reuse)
 * or in the freeing stream; "internal dependencies", which would make an
 * allocation wait for another stream's free, are switched off. Peer devices
 * that can reach this one get read-write access to the pool, as NCCL's
 * enabling of peer access gives them to cudaMalloc memory. A device without
 * pool support falls back to cudaMalloc/cudaFree.
 */
#include <pthread.h>
#include <string.h>

#include "internal.cuh"

#define DG_CU_MAX_DEVICES 64

typedef struct {
	int ready;          /* set up; pool is NULL without pool support */
	cudaMemPool_t pool; /* stream-ordered allocations of this device */
	cudaStream_t zero;  /* non-blocking: zeroing waits for nothing else */
} dev_alloc;

static dev_alloc devs[DG_CU_MAX_DEVICES];
static pthread_mutex_t devs_mu = PTHREAD_MUTEX_INITIALIZER;

/* make_pool creates device's pool, opened to the peers that can reach it. */
static cudaError_t make_pool(int device, cudaMemPool_t *out)
{
	cudaMemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = device;
	cudaMemPool_t pool;
	cudaError_t e = cudaMemPoolCreate(&pool, &props);
	if (e != cudaSuccess)
		return e;
	int no = 0, n = 0;
	e = cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no);
	if (e == cudaSuccess)
		e = cudaGetDeviceCount(&n);
	for (int peer = 0; e == cudaSuccess && peer < n; peer++) {
		int can = 0;
		if (peer == device || cudaDeviceCanAccessPeer(&can, peer, device) != cudaSuccess || !can)
			continue;
		cudaMemAccessDesc d;
		memset(&d, 0, sizeof d);
		d.location.type = cudaMemLocationTypeDevice;
		d.location.id = peer;
		d.flags = cudaMemAccessFlagsProtReadWrite;
		e = cudaMemPoolSetAccess(pool, &d, 1);
	}
	if (e != cudaSuccess) {
		cudaMemPoolDestroy(pool);
		return e;
	}
	*out = pool;
	return cudaSuccess;
}

/* device_alloc returns device's allocator, set up on first use; device is
 * current on the calling thread. */
static cudaError_t device_alloc(int device, dev_alloc **out)
{
	if (device < 0 || device >= DG_CU_MAX_DEVICES)
		return cudaErrorInvalidDevice;
	dev_alloc *d = &devs[device];
	cudaError_t e = cudaSuccess;
	pthread_mutex_lock(&devs_mu);
	if (!d->ready) {
		int pools = 0;
		e = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device);
		if (e == cudaSuccess && pools)
			e = make_pool(device, &d->pool);
		if (e == cudaSuccess)
			e = cudaStreamCreateWithFlags(&d->zero, cudaStreamNonBlocking);
		if (e == cudaSuccess) {
			d->ready = 1;
		} else if (d->pool) {
			cudaMemPoolDestroy(d->pool);
			d->pool = NULL;
		}
	}
	pthread_mutex_unlock(&devs_mu);
	*out = d;
	return e;
}

static cudaError_t alloc_on(dev_alloc *d, void **p, size_t bytes, cudaStream_t s)
{
	return d->pool ? cudaMallocFromPoolAsync(p, bytes, d->pool, s) : cudaMalloc(p, bytes);
}

static cudaError_t free_on(dev_alloc *d, void *p, cudaStream_t s)
{
	return d->pool ? cudaFreeAsync(p, s) : cudaFree(p);
}

dg_status dg_cuda_malloc(int device, size_t bytes, void **out, int *cuerr)
{
	*out = NULL;
	if (bytes == 0)
		return DG_OK;
	DG_CU(cuerr, cudaSetDevice(device));
	dev_alloc *d;
	DG_CU(cuerr, device_alloc(device, &d));
	void *p = NULL;
	DG_CU(cuerr, alloc_on(d, &p, bytes, d->zero));
	cudaError_t e = cudaMemsetAsync(p, 0, bytes, d->zero);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(d->zero); /* zeroed, and usable from every stream */
	if (e != cudaSuccess) {
		dg_cu_handled(free_on(d, p, d->zero));
		DG_CU(cuerr, e);
	}
	*out = p;
	return DG_OK;
}

dg_status dg_cuda_host_alloc(int device, size_t bytes, void **out, int *cuerr)
{
	void *p = NULL;
	DG_CU(cuerr, cudaSetDevice(device));
	/* a 0-byte tensor still gets a distinct pointer, as the C allocator's */
	DG_CU(cuerr, cudaHostAlloc(&p, bytes > 0 ? bytes : 1, cudaHostAllocPortable));
	memset(p, 0, bytes > 0 ? bytes : 1);
	*out = p;
	return DG_OK;
}

dg_status dg_cuda_host_free(void *p, int *cuerr)
{
	if (p == NULL)
		return DG_OK;
	DG_CU(cuerr, cudaFreeHost(p));
	return DG_OK;
}

dg_status dg_cuda_free(int device, void *p, int *cuerr)
{
	if (p == NULL)
		return DG_OK;
	DG_CU(cuerr, cudaSetDevice(device));
	dev_alloc *d;
	DG_CU(cuerr, device_alloc(device, &d));
	DG_CU(cuerr, free_on(d, p, cudaStreamLegacy));
	return DG_OK;
}

dg_status dg_cu_ctx_alloc(dg_cuda_ctx *ctx, void **p, size_t bytes)
{
	dev_alloc *d;
	DG_CU_CTX(ctx, device_alloc(ctx->device, &d));
	DG_CU_CTX(ctx, alloc_on(d, p, bytes, ctx->stream));
	return DG_OK;
}

void dg_cu_ctx_free(dg_cuda_ctx *ctx, void *p)
{
	dev_alloc *d;
	if (p != NULL && dg_cu_handled(device_alloc(ctx->device, &d)) == cudaSuccess)
		dg_cu_handled(free_on(d, p, ctx->stream));
}

dg_status dg_cu_grow(dg_cuda_ctx *ctx, void **buf, size_t *have, size_t bytes)
{
	if (bytes <= *have)
		return DG_OK;
	/* grow to the next power of two so a slowly growing list reallocates
	 * O(log n) times; the old buffer is freed in stream order, after the
	 * kernels already queued that read it */
	size_t want = 4096;
	while (want < bytes)
		want *= 2;
	dg_cu_ctx_free(ctx, *buf);
	*buf = NULL;
	*have = 0;
	dg_status s = dg_cu_ctx_alloc(ctx, buf, want);
	if (s != DG_OK)
		return s;
	*have = want;
	return DG_OK;
}

dg_status dg_cu_scratch(dg_cuda_ctx *ctx, size_t bytes) { return dg_cu_grow(ctx, &ctx->scratch, &ctx->scratch_bytes, bytes); }
