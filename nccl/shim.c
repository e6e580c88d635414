//go:build cuda

/* shim.c — see shim.h. The function table is declared with __typeof__ of
 * nccl.h's own prototypes, so a signature can never drift from the header
 * the package was compiled against. */
#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <cuda_runtime.h>

#include "dg_cuda_err.h" /* package cuda's: a handled error must not linger */

#define DG_NCCL_SYMBOLS(X) \
	X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) \
	X(ncclCommSplit) X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort) \
	X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGetLastError) \
	X(ncclGroupStart) X(ncclGroupEnd) X(ncclAllReduce) X(ncclReduceScatter) \
	X(ncclAllGather) X(ncclBroadcast) X(ncclReduce) X(ncclSend) X(ncclRecv)

#define DG_FIELD(name) __typeof__(name) *name;
static struct { DG_NCCL_SYMBOLS(DG_FIELD) } api;
static void *lib;

int dg_nccl_load(const char *path, char *err, size_t errlen) {
	if (lib) return 0;
	/* RTLD_LOCAL: libnccl carries its own static CUDA runtime; keep its
	 * symbols from interposing on ours. RTLD_NOW: fail here, not mid-run. */
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
#define DG_LOOKUP(name) \
	api.name = (__typeof__(name) *)dlsym(h, #name); \
	if (!api.name) { \
		snprintf(err, errlen, "%s: symbol %s missing (NCCL too old?)", path, #name); \
		dlclose(h); \
		return -1; \
	}
	DG_NCCL_SYMBOLS(DG_LOOKUP)
	lib = h;
	return 0;
}

int dg_nccl_version(void) {
	int v = 0;
	return api.ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

const char *dg_nccl_error_string(ncclResult_t r) { return api.ncclGetErrorString(r); }
const char *dg_nccl_last_error(ncclComm_t comm) { return api.ncclGetLastError(comm); }
ncclResult_t dg_nccl_unique_id(ncclUniqueId *id) { return api.ncclGetUniqueId(id); }

static ncclConfig_t nonblocking(void) {
	ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
	/* Non-blocking: init, split and group ends return ncclInProgress
	 * instead of blocking the thread, so Go can enforce deadlines. */
	c.blocking = 0;
	return c;
}

#define SET_DEVICE(dev) do { \
	cudaError_t e_ = dg_cu_handled(cudaSetDevice(dev)); \
	if (e_ != cudaSuccess) { if (cuerr) *cuerr = (int)e_; return ncclUnhandledCudaError; } \
} while (0)

ncclResult_t dg_nccl_init(int dev, ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank, int *cuerr) {
	SET_DEVICE(dev); /* the communicator binds to the current device */
	ncclConfig_t c = nonblocking();
	return api.ncclCommInitRankConfig(out, nranks, *id, rank, &c);
}

ncclResult_t dg_nccl_split(int dev, ncclComm_t parent, int color, int key, ncclComm_t *out, int *cuerr) {
	SET_DEVICE(dev);
	ncclConfig_t c = nonblocking();
	return api.ncclCommSplit(parent, color, key, out, &c);
}

ncclResult_t dg_nccl_async_error(ncclComm_t comm, ncclResult_t *state) {
	return api.ncclCommGetAsyncError(comm, state);
}

ncclResult_t dg_nccl_finalize(int dev, ncclComm_t comm) {
	int *cuerr = NULL;
	SET_DEVICE(dev);
	return api.ncclCommFinalize(comm);
}

ncclResult_t dg_nccl_destroy(int dev, ncclComm_t comm) {
	int *cuerr = NULL;
	SET_DEVICE(dev);
	return api.ncclCommDestroy(comm);
}

ncclResult_t dg_nccl_abort(int dev, ncclComm_t comm) {
	int *cuerr = NULL;
	SET_DEVICE(dev);
	return api.ncclCommAbort(comm);
}

ncclResult_t dg_nccl_launch(int dev, ncclComm_t comm, void *stream, int kind,
	const void *send, void *recv, size_t count, int dtype, int redop, int peer,
	int nranks, size_t chunk_bytes, int *cuerr) {
	SET_DEVICE(dev);
	cudaStream_t s = (cudaStream_t)stream;
	ncclDataType_t dt = (ncclDataType_t)dtype;
	ncclRedOp_t op = (ncclRedOp_t)redop;
	switch (kind) {
	case DG_NCCL_ALLREDUCE: return api.ncclAllReduce(send, recv, count, dt, op, comm, s);
	case DG_NCCL_REDUCESCATTER: return api.ncclReduceScatter(send, recv, count, dt, op, comm, s);
	case DG_NCCL_ALLGATHER: return api.ncclAllGather(send, recv, count, dt, comm, s);
	case DG_NCCL_BROADCAST: return api.ncclBroadcast(send, recv, count, dt, peer, comm, s);
	case DG_NCCL_REDUCE: return api.ncclReduce(send, recv, count, dt, op, peer, comm, s);
	case DG_NCCL_SEND: return api.ncclSend(send, count, dt, peer, comm, s);
	case DG_NCCL_RECV: return api.ncclRecv(recv, count, dt, peer, comm, s);
	case DG_NCCL_ALLTOALL: {
		/* One group: every pair's send and receive progress together. */
		ncclResult_t r = api.ncclGroupStart();
		if (r != ncclSuccess) return r;
		for (int j = 0; j < nranks && r == ncclSuccess; j++) {
			r = api.ncclSend((const char *)send + j * chunk_bytes, count, dt, j, comm, s);
			if (r == ncclSuccess) r = api.ncclRecv((char *)recv + j * chunk_bytes, count, dt, j, comm, s);
		}
		ncclResult_t e = api.ncclGroupEnd(); /* always close the group */
		return r != ncclSuccess ? r : e;
	}
	}
	return ncclInvalidArgument;
}

/* The event calls return their cudaError_t; each is handled by the caller,
 * so none may stay behind as this thread's last error (dg_cuda_err.h). */
int dg_nccl_event_create(int dev, void **ev) {
	cudaError_t e = cudaSetDevice(dev);
	if (e == cudaSuccess) e = cudaEventCreateWithFlags((cudaEvent_t *)ev, cudaEventDisableTiming);
	return (int)dg_cu_handled(e);
}

int dg_nccl_event_record(int dev, void *ev, void *stream) {
	cudaError_t e = cudaSetDevice(dev);
	if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream);
	return (int)dg_cu_handled(e);
}

int dg_nccl_event_query(void *ev, int *done) {
	return (int)dg_cu_query(cudaEventQuery((cudaEvent_t)ev), done);
}

int dg_nccl_event_destroy(int dev, void *ev) {
	cudaError_t e = cudaSetDevice(dev);
	if (e == cudaSuccess) e = cudaEventDestroy((cudaEvent_t)ev);
	return (int)dg_cu_handled(e);
}

int dg_nccl_stream_wait(int dev, void *stream, void *ev) {
	cudaError_t e = cudaSetDevice(dev);
	if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, 0);
	return (int)dg_cu_handled(e);
}

const char *dg_nccl_cuda_error(int cuerr) { return cudaGetErrorString((cudaError_t)cuerr); }
