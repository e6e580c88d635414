/*
 * deepgo_cuda.h — the C ABI of deepgo's CUDA kernels: the multi-tensor
 * kernels of deepgo.h, on device memory, ordered on a CUDA stream.
 *
 * Plain C (no CUDA headers needed to include it): streams and events are
 * void*, statuses are deepgo.h's dg_status. A failing CUDA call returns
 * DG_ERR_CUDA; the cudaError_t value is written to *cuerr (functions without
 * a context) or kept in the context with a message naming the call and its
 * file:line (dg_cuda_ctx_error). No error these functions handle or return
 * stays behind as the calling thread's cudaGetLastError (dg_cuda_err.h), so
 * a later call on that thread never reports it.
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
 * without a driver or device gives *n = 0 and DG_OK, one whose driver is
 * older than this CUDA runtime DG_ERR_CUDA with cudaErrorInsufficientDriver
 * (dg_cuda_driver_version then says what the driver supports). */
dg_status dg_cuda_device_count(int *n, int *cuerr);
/* DG_CUDA_ERR_INSUFFICIENT_DRIVER is cudaErrorInsufficientDriver's value. */
#define DG_CUDA_ERR_INSUFFICIENT_DRIVER 35
/* dg_cuda_error_name / _string describe a cudaError_t value (static strings). */
const char *dg_cuda_error_name(int cuerr);
const char *dg_cuda_error_string(int cuerr);
/* dg_cuda_runtime_version / dg_cuda_driver_version: CUDA's 1000*major+10*minor. */
int dg_cuda_runtime_version(void);
int dg_cuda_driver_version(void);

/* dg_cuda_malloc allocates bytes (>= 0; 0 gives NULL) of zeroed memory on
 * device; the zeroing is complete when it returns, and it waits for no
 * other work on the device (collectives in flight included). */
dg_status dg_cuda_malloc(int device, size_t bytes, void **out, int *cuerr);
/* dg_cuda_free frees p after the work queued so far on the legacy default
 * stream and on every blocking stream (all the streams made here), and
 * returns without waiting for it. Work on a non-blocking stream of one's
 * own that uses p must be synchronized before. */
dg_status dg_cuda_free(int device, void *p, int *cuerr);
/* dg_cuda_memcpy copies bytes between any two of host and device memory
 * (unified addressing tells which is which) and returns when done. It is
 * ordered after all work on the legacy default stream, which contexts'
 * streams synchronize with. */
dg_status dg_cuda_memcpy(int device, void *dst, const void *src, size_t bytes, int *cuerr);

/* dg_cuda_host_alloc allocates bytes (>= 0) of zeroed page-locked host
 * memory, device current (cudaHostAlloc, portable: every device's DMA
 * engine reads it in stream order); dg_cuda_host_free releases it
 * (cudaFreeHost: only once the copies using it are known complete). */
dg_status dg_cuda_host_alloc(int device, size_t bytes, void **out, int *cuerr);
dg_status dg_cuda_host_free(void *p, int *cuerr);

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
/* dg_cuda_quantize_i8 / dg_cuda_dequantize_i8 are deepgo.h's
 * dg_quantize_i8 / dg_dequantize_i8 (ZeRO++ qwZ) on device memory, the same
 * bits (dg_quant_math.h). */
dg_status dg_cuda_quantize_i8(dg_cuda_ctx *ctx, dg_dtype t, const void *x, int8_t *q, float *scales, int64_t n,
			      int64_t groups);
dg_status dg_cuda_dequantize_i8(dg_cuda_ctx *ctx, dg_dtype t, const int8_t *q, const float *scales, void *y,
				int64_t n, int64_t groups);
dg_status dg_cuda_axpy(dg_cuda_ctx *ctx, dg_dtype t, float alpha, const void *const *xs, void *const *ys,
		       const int64_t *ns, int count);
/* dg_cuda_axpy_mixed: xs of dtype tx into ys of dtype ty, each y rounded to
 * ty once (deepgo.h's dg_axpy_mixed) */
dg_status dg_cuda_axpy_mixed(dg_cuda_ctx *ctx, dg_dtype tx, dg_dtype ty, float alpha, const void *const *xs,
			     void *const *ys, const int64_t *ns, int count);
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

/* dg_cuda_copy copies bytes between any two of host and device memory
 * (unified addressing tells which is which), queued on ctx's stream after
 * the work already there (cudaMemcpyAsync). It returns once src may be
 * reused: at once for device memory and pageable host memory (the driver
 * stages pageable memory before cudaMemcpyAsync returns), after the copy
 * for pinned host memory (DMA'd in stream order). With dst in host memory it
 * also waits for the copy, so the data is there when it returns. */
dg_status dg_cuda_copy(dg_cuda_ctx *ctx, void *dst, const void *src, size_t bytes);
/* dg_cuda_copy_async queues a copy of bytes (host and device memory in
 * any direction) on stream, a stream of the context's device, after the
 * work queued so far on ctx's stream (an event recorded there, waited for
 * on stream), and sets *done to a new event recorded after the copy: the
 * caller queries or synchronizes it, then destroys it. Neither side may be
 * touched before *done completes. */
dg_status dg_cuda_copy_async(dg_cuda_ctx *ctx, void *stream, void *dst, const void *src, size_t bytes, void **done);
/* dg_cuda_zero clears bytes[i] bytes at DEVICE xs[i] for each i, queued on
 * ctx's stream (cudaMemsetAsync). */
dg_status dg_cuda_zero(dg_cuda_ctx *ctx, void *const *xs, const size_t *bytes, int count);
/* dg_cuda_add_f32 sets y[i] = t(y[i] + x[i]) for n elements: a float32
 * contribution x added to y of floating dtype t, with one rounding to t. */
dg_status dg_cuda_add_f32(dg_cuda_ctx *ctx, dg_dtype t, void *y, const float *x, int64_t n);

/* ---- optimizers (deepgo.h's dg_optim_step, dg_unscale_check) -------------
 * Same checks, dtypes and result bits as the CPU core, Lamb's trust ratios
 * included (its norms are summed in the CPU's exact order). trust (count
 * entries, may be NULL) and *found are DEVICE memory, written on the stream:
 * read them after a synchronize. */
dg_status dg_cuda_optim_step(dg_cuda_ctx *ctx, const dg_optim_hparams *hp, const dg_optim_lists *l, double *trust);
/* dg_cuda_adam_bf16_step is deepgo.h's dg_adam_bf16_step (DeepSpeedCPUAdam
 * on bf16 master weights, moments F32 or BF16) on device lists: same checks
 * and result bits (optim_bf16.cu). */
dg_status dg_cuda_adam_bf16_step(dg_cuda_ctx *ctx, const dg_optim_hparams *hp, const dg_optim_lists *l,
				 dg_dtype state_dtype);
dg_status dg_cuda_unscale_check(dg_cuda_ctx *ctx, dg_dtype t, void *const *xs, const int64_t *ns, int count,
				float inv_scale, int *found);

/* ---- nn ops (deepgo.h's "nn ops", on device memory) ---------------------
 * Same arguments, layouts, checks and accumulate-vs-write rules as the
 * dg_nn_* function of the same name; every float, token and target pointer
 * is DEVICE memory and the work is queued on the context's stream.
 *
 * Matrix products run on cuBLAS (cublasSgemm in CUBLAS_PEDANTIC_MATH: plain
 * float32, never TF32 or BF16x9 emulation), with a handle the context makes
 * on first use, bound to its stream. cuBLAS is loaded at run time (dlopen
 * of dg_cuda_blas_soname(), see dg_cuda_blas_load): a binary linked here
 * runs where the GPU machine has its own CUDA, and links without one.
 *
 * Everything else is hand-written kernels whose every sum runs in the CPU
 * twin's exact order (warp-cooperative loads, then the adds in sequence; no
 * float atomics), on dg_nn_math.h's element math, so results are
 * deterministic and match the CPU bit for bit except where log (CUDA's vs
 * glibc's, a few ulp) or a BLAS's summation order enter (cuBLAS here;
 * OpenBLAS in the CPU's matmuls and attention tiles, so attention agrees
 * to ~1e-6 relative, not bit for bit); tanh and exp are dg_nn_math.h's own
 * arithmetic on both sides.
 *
 * Tokens and targets live on the device, so their range check cannot return
 * a status without a wait: a kernel checks them on the stream first, and if
 * one is outside [0, V) nothing is written and the DEVICE int *invalid (may
 * be NULL) is set to 1, else to 0. */

/* dg_cuda_blas_soname is the cuBLAS library the matmuls load:
 * libcublas.so.<major version of the cuBLAS headers this library was
 * compiled with>, e.g. libcublas.so.13 (CUDA 13), libcublas.so.12 (CUDA 12). */
const char *dg_cuda_blas_soname(void);
/* dg_cuda_blas_load loads cuBLAS once per process. path NULL tries, in
 * order: $DEEPGO_CUBLAS_LIB (a file, or a folder holding the soname above),
 * lib/<soname> next to the executable (build/cuda/lib, linked by
 * scripts/build-cuda.sh), the soname on the loader's search path,
 * $CUDA_HOME/lib64 and /usr/local/cuda/lib64. A path tries that file only.
 * DG_OK once loaded (later calls: DG_OK at once); otherwise
 * DG_ERR_UNSUPPORTED and err (errlen bytes, may be NULL) says why. The
 * matmuls call it with NULL when nothing is loaded yet. */
dg_status dg_cuda_blas_load(const char *path, char *err, size_t errlen);
/* dg_cuda_blas_path is the file loaded ("" when none). */
const char *dg_cuda_blas_path(void);

dg_status dg_cuda_nn_matmul_forward(dg_cuda_ctx *ctx, float *out, const float *inp, const float *w,
				    const float *bias, int64_t n, int64_t c, int64_t oc);
dg_status dg_cuda_nn_matmul_backward(dg_cuda_ctx *ctx, float *dinp, float *dw, float *dbias, const float *dout,
				     const float *inp, const float *w, int64_t n, int64_t c, int64_t oc);
/* dg_cuda_nn_linear_forward / _backward are dg_cuda_nn_matmul_* with w and
 * bias of dtype wt, dw and dbias of dtype gt (F32, F16 or BF16 each). A half
 * w is widened in tiles of at most DG_CUDA_LINEAR_TILE elements (whole rows)
 * into a buffer of the context, never whole; a half dw or dbias receives the
 * call's float32 contribution, computed per tile, with one rounding per
 * element (dg_cuda_add_f32). All float32: the dg_cuda_nn_matmul_* path. */
#define DG_CUDA_LINEAR_TILE (1 << 22)
dg_status dg_cuda_nn_linear_forward(dg_cuda_ctx *ctx, float *out, const float *inp, dg_dtype wt, const void *w,
				    const void *bias, int64_t n, int64_t c, int64_t oc);
dg_status dg_cuda_nn_linear_backward(dg_cuda_ctx *ctx, float *dinp, dg_dtype gt, void *dw, void *dbias,
				     const float *dout, const float *inp, dg_dtype wt, const void *w, int64_t n,
				     int64_t c, int64_t oc);
dg_status dg_cuda_nn_layernorm_forward(dg_cuda_ctx *ctx, float *out, float *mean, float *rstd, const float *inp,
				       const float *w, const float *b, float eps, int64_t n, int64_t c);
dg_status dg_cuda_nn_layernorm_backward(dg_cuda_ctx *ctx, float *dinp, float *dw, float *db, const float *dout,
					const float *inp, const float *w, const float *mean, const float *rstd,
					int64_t n, int64_t c);
dg_status dg_cuda_nn_gelu_forward(dg_cuda_ctx *ctx, float *out, const float *inp, int64_t n);
dg_status dg_cuda_nn_gelu_backward(dg_cuda_ctx *ctx, float *dinp, const float *inp, const float *dout, int64_t n);
dg_status dg_cuda_nn_add(dg_cuda_ctx *ctx, float *out, const float *a, const float *b, int64_t n);
dg_status dg_cuda_nn_encoder_forward(dg_cuda_ctx *ctx, float *out, const int32_t *tok, const float *wte,
				     const float *wpe, int64_t b, int64_t t, int64_t c, int64_t v, int *invalid);
dg_status dg_cuda_nn_encoder_backward(dg_cuda_ctx *ctx, float *dwte, float *dwpe, const float *dout,
				      const int32_t *tok, int64_t b, int64_t t, int64_t c, int64_t v, int *invalid);
/* The attention backward uses B*NH*T floats of the context's scratch. */
dg_status dg_cuda_nn_attention_forward(dg_cuda_ctx *ctx, float *out, float *att, const float *qkv, int64_t b,
				       int64_t t, int64_t nh, int64_t hs, int64_t window);
dg_status dg_cuda_nn_attention_backward(dg_cuda_ctx *ctx, float *dqkv, const float *dout, const float *qkv,
					const float *att, int64_t b, int64_t t, int64_t nh, int64_t hs,
					int64_t window);
dg_status dg_cuda_nn_softmax_xent_forward(dg_cuda_ctx *ctx, float *probs, float *losses, const float *logits,
					  const int32_t *targets, int64_t n, int64_t v, int *invalid);
dg_status dg_cuda_nn_softmax_xent_backward(dg_cuda_ctx *ctx, float *dlogits, const float *probs,
					   const int32_t *targets, const float *dlosses, int64_t n, int64_t v,
					   int *invalid);
/* The block transpose of Ulysses's all-to-alls (deepgo.h's
 * dg_nn_transpose_blocks; nn_transpose.cu): a copy, the CPU's bits. */
dg_status dg_cuda_nn_transpose_blocks(dg_cuda_ctx *ctx, float *dst, const float *src, int64_t a, int64_t b, int64_t w);
/* The vocabulary-parallel cross-entropy and row mask (deepgo.h's
 * dg_nn_vocab_*; nn_vocab.cu). No log enters: the bits are the CPU's, but
 * for which NaN a NaN row holds. The target check of _exp sets *invalid
 * as above (targets outside [0, vocab)). */
dg_status dg_cuda_nn_vocab_xent_max(dg_cuda_ctx *ctx, float *maxes, const float *logits, int64_t n, int64_t v);
dg_status dg_cuda_nn_vocab_xent_exp(dg_cuda_ctx *ctx, float *logits, float *sums, float *tlogits, const float *maxes,
				    const int32_t *targets, int64_t n, int64_t v, int64_t lo, int64_t vocab,
				    int *invalid);
dg_status dg_cuda_nn_vocab_xent_grad(dg_cuda_ctx *ctx, float *logits, const float *sums, const int32_t *targets,
				     float d, int64_t n, int64_t v, int64_t lo);
dg_status dg_cuda_nn_vocab_clear_rows(dg_cuda_ctx *ctx, float *x, const int32_t *ids, int64_t n, int64_t c,
				      int64_t lo, int64_t v);

#ifdef __cplusplus
}
#endif
#endif /* DEEPGO_CUDA_H */
