/* shim.h — the C side of package nccl: NCCL reached through dlopen (no
 * link-time dependency on libnccl), plus the few CUDA runtime calls the
 * package needs (device selection and completion events).
 *
 * Every entry point that touches a device makes it current on the calling
 * thread first: one cgo call runs on one OS thread, so no Go-side thread
 * pinning is needed. */
#ifndef DG_NCCL_SHIM_H
#define DG_NCCL_SHIM_H

#include <stddef.h>
#include <nccl.h>

/* Operation kinds of dg_nccl_launch. */
enum {
	DG_NCCL_ALLREDUCE = 1,
	DG_NCCL_REDUCESCATTER,
	DG_NCCL_ALLGATHER,
	DG_NCCL_BROADCAST,
	DG_NCCL_REDUCE,
	DG_NCCL_SEND,
	DG_NCCL_RECV,
	DG_NCCL_ALLTOALL
};

/* ncclUnhandledCudaError is returned, with *cuerr set, when the CUDA call
 * before or after NCCL fails. */

/* dg_nccl_load opens path (a file or a soname for the loader's search) and
 * resolves every symbol; on failure it returns -1 with a message in err. */
int dg_nccl_load(const char *path, char *err, size_t errlen);
int dg_nccl_version(void);
const char *dg_nccl_error_string(ncclResult_t r);
const char *dg_nccl_last_error(ncclComm_t comm);

ncclResult_t dg_nccl_unique_id(ncclUniqueId *id);
/* dg_nccl_init starts a non-blocking (config.blocking = 0) communicator on
 * device dev; poll dg_nccl_async_error on *out while it is ncclInProgress. */
ncclResult_t dg_nccl_init(int dev, ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank, int *cuerr);
ncclResult_t dg_nccl_split(int dev, ncclComm_t parent, int color, int key, ncclComm_t *out, int *cuerr);
ncclResult_t dg_nccl_async_error(ncclComm_t comm, ncclResult_t *state);
ncclResult_t dg_nccl_finalize(int dev, ncclComm_t comm);
ncclResult_t dg_nccl_destroy(int dev, ncclComm_t comm);
ncclResult_t dg_nccl_abort(int dev, ncclComm_t comm);

/* dg_nccl_launch queues one operation on stream. count is in elements of
 * dtype; for ALLTOALL it is one chunk, and chunk_bytes its size. */
ncclResult_t dg_nccl_launch(int dev, ncclComm_t comm, void *stream, int kind,
	const void *send, void *recv, size_t count, int dtype, int redop, int peer,
	int nranks, size_t chunk_bytes, int *cuerr);

/* Completion events (cudaEventDisableTiming): the return is a cudaError_t. */
int dg_nccl_event_create(int dev, void **ev);
int dg_nccl_event_record(int dev, void *ev, void *stream);
/* dg_nccl_event_query sets *done to 1 when the recorded work is complete. */
int dg_nccl_event_query(void *ev, int *done);
int dg_nccl_event_destroy(int dev, void *ev);
/* dg_nccl_stream_wait makes work queued on stream after it wait for the
 * work ev recorded (cudaStreamWaitEvent; the host does not wait). */
int dg_nccl_stream_wait(int dev, void *stream, void *ev);
const char *dg_nccl_cuda_error(int cuerr);

#endif
