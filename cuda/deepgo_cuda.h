/*
 * deepgo_cuda.h — the C ABI of deepgo's CUDA kernels: the multi-tensor
 * kernels of deepgo.h, on device memory, ordered on a CUDA stream.
 *
 * Plain C (no CUDA headers needed to include it): streams and events are
 * void*, statuses are deepgo.h's dg_status. A failing CUDA call returns
 * DG_ERR_CUDA; the cudaError_t value is written to *cuerr (functions without
 * a context) or kept in the context with a message naming the call and its
 * file:line (dg_cuda_ctx_error).
 *
 * Current device: every function that touches a device first makes that
 * device current on the calling thread (cudaSetDevice, a few ns when it
 * already is), so one call never depends on what an earlier call on another
 * thread left current. That is why the Go side needs no thread pinning for
 * these calls; it pins only around sequences of its own.
 *
 * Lists follow deepgo.h: xs[i] (DEVICE pointers, in a HOST array) holds
 * ns[i] >= 0 elements and may be NULL only when ns[i] == 0. Kernel calls
 * return once the work is queued on the context's stream; the host arrays may
 * be reused as soon as the call returns (their contents travel by value in
 * the kernel parameters).
 */
#ifndef DEEPGO_CUDA_H
#define DEEPGO_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "deepgo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices, memory, streams, events (no context) ----------------------- */

/* dg_cuda_device_count sets *n to the number of CUDA devices; a machine
 * without a driver or device gives *n = 0 and DG_OK. */
dg_status dg_cuda_device_count(int *n, int *cuerr);
/* dg_cuda_error_name / _string describe a cudaError_t value (static strings). */
const char *dg_cuda_error_name(int cuerr);
const char *dg_cuda_error_string(int cuerr);
/* dg_cuda_runtime_version / dg_cuda_driver_version: CUDA's 1000*major+10*minor. */
int dg_cuda_runtime_version(void);
int dg_cuda_driver_version(void);

/* dg_cuda_malloc allocates bytes (>= 0; 0 gives NULL) of zeroed memory on
 * device; the zeroing is complete when it returns. */
dg_status dg_cuda_malloc(int device, size_t bytes, void **out, int *cuerr);
dg_status dg_cuda_free(int device, void *p, int *cuerr);
/* dg_cuda_memcpy copies bytes between any two of host and device memory
 * (unified addressing tells which is which) and returns when done. It is
 * ordered after all work on the legacy default stream, which contexts'
 * streams synchronize with. */
dg_status dg_cuda_memcpy(int device, void *dst, const void *src, size_t bytes, int *cuerr);

/* Streams are created blocking (they synchronize with the legacy default
 * stream), so dg_cuda_malloc/memcpy need no extra ordering. */
dg_status dg_cuda_stream_create(int device, void **out, int *cuerr);
dg_status dg_cuda_stream_destroy(int device, void *s, int *cuerr);
dg_status dg_cuda_stream_synchronize(int device, void *s, int *cuerr);
/* dg_cuda_stream_query sets *done to 1 when all work on s is complete. */
dg_status dg_cuda_stream_query(int device, void *s, int *done, int *cuerr);

/* Events are created with timing enabled. */
dg_status dg_cuda_event_create(int device, void **out, int *cuerr);
dg_status dg_cuda_event_destroy(int device, void *e, int *cuerr);
dg_status dg_cuda_event_record(int device, void *e, void *s, int *cuerr);
dg_status dg_cuda_event_synchronize(int device, void *e, int *cuerr);
dg_status dg_cuda_event_query(int device, void *e, int *done, int *cuerr);
/* dg_cuda_event_elapsed sets *ms to the time between two completed events. */
dg_status dg_cuda_event_elapsed(void *start, void *end, float *ms, int *cuerr);

/* ---- context -------------------------------------------------------------
 * A dg_cuda_ctx holds a device, a stream, a stream-ordered scratch buffer for
 * reduction partials and the last error. One context serves one caller at a
 * time (the Go Backend holds a mutex around it). */

typedef struct dg_cuda_ctx dg_cuda_ctx;

/* dg_cuda_ctx_create makes a context on device. stream NULL: the context
 * creates (and later destroys) its own blocking stream; otherwise it uses
 * the caller's stream and never destroys it. */
dg_status dg_cuda_ctx_create(int device, void *stream, dg_cuda_ctx **out, int *cuerr);
void dg_cuda_ctx_destroy(dg_cuda_ctx *ctx);
int dg_cuda_ctx_device(const dg_cuda_ctx *ctx);
void *dg_cuda_ctx_stream(const dg_cuda_ctx *ctx);
/* dg_cuda_ctx_error returns the message of the last failed call on ctx ("" if
 * none) and, when cuerr != NULL, its cudaError_t (0 for a non-CUDA failure). */
const char *dg_cuda_ctx_error(const dg_cuda_ctx *ctx, int *cuerr);
/* dg_cuda_ctx_synchronize waits for the stream. */
dg_status dg_cuda_ctx_synchronize(dg_cuda_ctx *ctx);

/* ---- multi-tensor kernels (device memory, stream-ordered) ----------------
 * Same meaning, dtypes and bits as the deepgo.h function of the same name. */

dg_status dg_cuda_cast(dg_cuda_ctx *ctx, dg_dtype src, dg_dtype dst, const void *const *srcs, void *const *dsts,
		       const int64_t *ns, int count);
dg_status dg_cuda_scale(dg_cuda_ctx *ctx, dg_dtype t, void *const *xs, const int64_t *ns, int count, float alpha);
dg_status dg_cuda_axpy(dg_cuda_ctx *ctx, dg_dtype t, float alpha, const void *const *xs, void *const *ys,
		       const int64_t *ns, int count);
/* dg_cuda_sumsq writes, in DEVICE memory, the total to *total and (per !=
 * NULL) each tensor's sum to per[i]. Deterministic: fixed chunks of
 * DG_CUDA_CHUNK elements, a fixed-shape tree inside each chunk, then the
 * chunk partials and the per-tensor sums added in a fixed order. The bits
 * can differ from the CPU's (a different fixed order), by ~1e-15 relative. */
dg_status dg_cuda_sumsq(dg_cuda_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count,
			double *per, double *total);
/* dg_cuda_nonfinite sets the DEVICE int *found to 1 if any element is Inf or
 * NaN, else 0. */
dg_status dg_cuda_nonfinite(dg_cuda_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count,
			    int *found);
dg_status dg_cuda_pack(dg_cuda_ctx *ctx, dg_dtype t, const void *const *srcs, const int64_t *ns,
		       const int64_t *offs, int count, void *flat, int64_t flat_n);
dg_status dg_cuda_unpack(dg_cuda_ctx *ctx, dg_dtype t, const void *flat, int64_t flat_n, const int64_t *offs,
			 const int64_t *ns, void *const *dsts, int count);

/* dg_cuda_reduce_into takes at most DG_CUDA_MAX_REDUCE_SRCS sources (their
 * pointers ride in the kernel parameters); more is DG_ERR_SIZE. */
#define DG_CUDA_MAX_REDUCE_SRCS 256
dg_status dg_cuda_reduce_into(dg_cuda_ctx *ctx, dg_dtype t, dg_redop op, const void *const *srcs, int nsrc,
			      void *dst, int64_t n);

/* ---- optimizers (deepgo.h's dg_optim_step, dg_unscale_check) -------------
 * Same checks, dtypes and result bits as the CPU core, Lamb's trust ratios
 * included (its norms are summed in the CPU's exact order). trust (count
 * entries, may be NULL) and *found are DEVICE memory, written on the stream:
 * read them after a synchronize. */
dg_status dg_cuda_optim_step(dg_cuda_ctx *ctx, const dg_optim_hparams *hp, const dg_optim_lists *l, double *trust);
dg_status dg_cuda_unscale_check(dg_cuda_ctx *ctx, dg_dtype t, void *const *xs, const int64_t *ns, int count,
				float inv_scale, int *found);

#ifdef __cplusplus
}
#endif
#endif /* DEEPGO_CUDA_H */
