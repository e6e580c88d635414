/*
 * deepgo.h — the one C ABI of deepgo's native core.
 *
 * Every function takes explicit sizes and returns a dg_status. The core keeps
 * no global state: everything a call needs hangs off a dg_ctx handle (thread
 * pool, chosen instruction set). Buffers passed in are owned by the caller and
 * never retained after the call returns.
 *
 * Multi-tensor calls take a LIST of tensors (arrays of pointers and element
 * counts) so that one crossing from Go does a whole bucket or shard of work:
 * a cgo call costs ~40 ns, so each call should carry microseconds of work.
 *
 * Concurrency: a dg_ctx may be used from several threads at once. Its pool runs
 * one parallel region at a time; a call that finds the pool busy runs its work
 * on the calling thread instead of waiting, so concurrent callers (e.g. several
 * in-process ranks sharing one context) never deadlock and results do not
 * depend on which thread did the work.
 */
#ifndef DEEPGO_H
#define DEEPGO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DG_ABI_VERSION 1

typedef enum dg_status {
	DG_OK = 0,
	DG_ERR_INVALID = 1,     /* a NULL, negative or otherwise invalid argument */
	DG_ERR_NOMEM = 2,       /* allocation failed */
	DG_ERR_DTYPE = 3,       /* dtype not supported by this operation */
	DG_ERR_ALIGN = 4,       /* alignment not a power of two, or a misaligned buffer */
	DG_ERR_SIZE = 5,        /* sizes disagree (list lengths, offsets out of range) */
	DG_ERR_UNSUPPORTED = 6, /* feature not compiled in or not available here */
	DG_ERR_IO = 7,          /* an I/O call failed; errno-derived detail is logged by the caller */
	DG_ERR_CUDA = 8,        /* a CUDA runtime/driver call failed */
	DG_ERR_INTERNAL = 9     /* a bug: an invariant of the core did not hold */
} dg_status;

/* dg_strerror returns a static, human-readable name for a status. */
const char *dg_strerror(dg_status s);

/* Element types; values and sizes match torch's names. */
typedef enum dg_dtype {
	DG_F32 = 0,
	DG_F16 = 1,
	DG_BF16 = 2,
	DG_I32 = 3,
	DG_I64 = 4,
	DG_U8 = 5,
	DG_BOOL = 6,
	DG_F64 = 7
} dg_dtype;

/* dg_dtype_size returns the element size in bytes, or 0 for an unknown dtype. */
size_t dg_dtype_size(dg_dtype t);

/* Instruction sets the CPU kernels can be dispatched to. */
typedef enum dg_isa { DG_ISA_AUTO = 0, DG_ISA_SCALAR = 1, DG_ISA_AVX2 = 2, DG_ISA_AVX512 = 3 } dg_isa;

/* ---- context ------------------------------------------------------------ */

typedef struct dg_ctx dg_ctx;

/* dg_ctx_create makes a context whose pool has nthreads workers in total
 * (the calling thread counts as one); nthreads <= 0 means one per online CPU. */
dg_status dg_ctx_create(int nthreads, dg_ctx **out);
void dg_ctx_destroy(dg_ctx *ctx);
/* dg_ctx_set_threads resizes the pool; not to be called while another call on
 * ctx is in flight. */
dg_status dg_ctx_set_threads(dg_ctx *ctx, int nthreads);
int dg_ctx_threads(const dg_ctx *ctx);
/* dg_ctx_set_spin sets how long, in nanoseconds (0 to 1e9), the pool's
 * threads spin waiting for the next parallel region before they sleep; 0
 * sleeps at once (for a pool sharing its cores with other busy threads).
 * The default spins 500 us after a region that followed the previous one
 * within that time, 5 us otherwise. Not to be called while another call on
 * ctx is in flight. */
dg_status dg_ctx_set_spin(dg_ctx *ctx, int64_t ns);
/* dg_ctx_set_isa forces an instruction set (tests compare them); AUTO picks the
 * best the CPU supports. Asking for one the CPU lacks is DG_ERR_UNSUPPORTED. */
dg_status dg_ctx_set_isa(dg_ctx *ctx, dg_isa isa);
dg_isa dg_ctx_isa(const dg_ctx *ctx);
/* dg_cpu_best_isa reports the best instruction set of this CPU. */
dg_isa dg_cpu_best_isa(void);
/* dg_ctx_scratch_peak reports in *peak_bytes the most bytes of temporary
 * kernel scratch (the float32 tiles of the mixed-precision nn kernels) that
 * were allocated at once on ctx since it was created or last reset; reset
 * != 0 then restarts the count from what is allocated now. It is how a
 * caller checks that a half-precision weight is widened in bounded tiles,
 * never copied whole. */
dg_status dg_ctx_scratch_peak(dg_ctx *ctx, int reset, int64_t *peak_bytes);
/* dg_ctx_pool_balance reports, since ctx was created, resized or last
 * reset, the parallel regions its pool ran (*regions), the threads' summed
 * wall time in their parts (*busy_ns) and their summed wait, within each
 * region, for its slowest part (*idle_ns); all zero for one thread. A
 * region splits equal work, so idle time is threads running at unequal
 * speeds (or work split unevenly): the share of the pool's time a dynamic
 * split could win back. reset != 0 restarts the counts. Not to be called
 * while another call on ctx is in flight. */
dg_status dg_ctx_pool_balance(dg_ctx *ctx, int reset, int64_t *regions, int64_t *busy_ns, int64_t *idle_ns);

/* ---- host memory --------------------------------------------------------- */

/* Flags of dg_alloc. DG_ALLOC_HUGE asks, for buffers of 2 MiB or more, for
 * transparent huge pages: the buffer is aligned to 2 MiB and its whole 2 MiB
 * pages (not a partial last one) are advised MADV_HUGEPAGE before they are
 * touched (what the kernel gives depends on
 * /sys/kernel/mm/transparent_hugepage; with THP off it is a no-op). */
enum { DG_ALLOC_HUGE = 1 };

/* dg_alloc returns zeroed memory of at least bytes, aligned to align (a power
 * of two >= 64; 4096 for O_DIRECT I/O). bytes == 0 yields a valid unique
 * pointer. flags: 0 or DG_ALLOC_HUGE; others are DG_ERR_INVALID. Free with
 * dg_free. */
dg_status dg_alloc(size_t bytes, size_t align, int flags, void **out);
void dg_free(void *p);

/* ---- multi-tensor kernels ------------------------------------------------
 * Lists: xs[i] points to ns[i] elements (ns[i] >= 0; xs[i] may be NULL only
 * when ns[i] == 0); count >= 0 entries. Floating dtypes are F32, F16, BF16;
 * arithmetic on halves is done in float32 and rounded to nearest even. */

/* dg_cast converts srcs[i] (src dtype) into dsts[i] (dst dtype), ns[i]
 * elements each. F32<->F16<->BF16 in every direction (and same-type copy).
 * Rounding is to nearest even; NaN, Inf and subnormals are exact where
 * representable, NaN stays NaN (quiet). */
dg_status dg_cast(dg_ctx *ctx, dg_dtype src, dg_dtype dst, const void *const *srcs, void *const *dsts,
		  const int64_t *ns, int count);

/* dg_quantize_i8 is ZeRO++ qwZ's weight quantizer (DeepSpeed's symmetric
 * 8-bit CUDAQuantizer; the element math is dg_quant_math.h): x holds n
 * elements of dtype t (F32, F16, BF16), split into groups equal groups
 * (n % groups == 0, groups >= 1); q receives n int8 values and scales one
 * float32 per group (the dequantization scale, 1/multiplier). */
dg_status dg_quantize_i8(dg_ctx *ctx, dg_dtype t, const void *x, int8_t *q, float *scales, int64_t n,
			 int64_t groups);
/* dg_dequantize_i8 inverts it into y (n elements of dtype t): groups equal
 * groups of q, group k scaled by scales[k], rounded to float16 and then to
 * t. Any n divisible by groups: a gathered buffer is world_size partitions
 * of the same grouping back to back. */
dg_status dg_dequantize_i8(dg_ctx *ctx, dg_dtype t, const int8_t *q, const float *scales, void *y, int64_t n,
			   int64_t groups);

/* dg_scale multiplies xs[i] in place by alpha. */
dg_status dg_scale(dg_ctx *ctx, dg_dtype t, void *const *xs, const int64_t *ns, int count, float alpha);

/* dg_axpy does ys[i] += alpha * xs[i]; xs and ys share dtype t. */
dg_status dg_axpy(dg_ctx *ctx, dg_dtype t, float alpha, const void *const *xs, void *const *ys,
		  const int64_t *ns, int count);

/* dg_axpy_mixed is dg_axpy with xs of dtype xt and ys of dtype yt (any two
 * floating dtypes): each y = narrow(y + alpha * x) computed in float32 from
 * the widened operands, rounded to yt once, e.g. a float32 gradient added
 * into a bfloat16 one. xt == yt gives dg_axpy's bits. */
dg_status dg_axpy_mixed(dg_ctx *ctx, dg_dtype xt, dg_dtype yt, float alpha, const void *const *xs, void *const *ys,
			const int64_t *ns, int count);

/* dg_sumsq writes the sum of squares of all elements, accumulated in double,
 * to *total, and, when per != NULL, each tensor's own sum to per[i]. The
 * result is independent of the thread count (fixed blocking, fixed order). */
dg_status dg_sumsq(dg_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count, double *per,
		   double *total);

/* dg_nonfinite sets *found to 1 if any element is Inf or NaN, else 0. */
dg_status dg_nonfinite(dg_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count, int *found);

/* dg_zero sets bytes[i] bytes at xs[i] to zero for every i, on the pool. */
dg_status dg_zero(dg_ctx *ctx, void *const *xs, const int64_t *bytes, int count);

/* dg_pack copies srcs[i] (ns[i] elements) to flat + offs[i] elements; dg_unpack
 * is the reverse. Element size comes from t (any dtype). Regions must lie
 * within flat_n elements and must not overlap. */
dg_status dg_pack(dg_ctx *ctx, dg_dtype t, const void *const *srcs, const int64_t *ns, const int64_t *offs,
		  int count, void *flat, int64_t flat_n);
dg_status dg_unpack(dg_ctx *ctx, dg_dtype t, const void *flat, int64_t flat_n, const int64_t *offs,
		    const int64_t *ns, void *const *dsts, int count);

/* Reductions for the in-process collectives. */
typedef enum dg_redop { DG_SUM = 0, DG_MAX = 1, DG_MIN = 2 } dg_redop;

/* dg_reduce_into sets dst[k] = srcs[0][k] op srcs[1][k] op ... for k < n,
 * combining the sources in list order in float32 (halves widened, one
 * rounding at the end), so the bits depend only on the order of the list,
 * never on threads or timing. dst may alias any source (the same pointer).
 * A NaN anywhere makes the result the first NaN in list order, quieted, for
 * every op and ISA (hardware would otherwise pick either operand's payload).
 * Dtypes: F32, F16, BF16, and I32, I64 (exact, SUM wraps around). */
dg_status dg_reduce_into(dg_ctx *ctx, dg_dtype t, dg_redop op, const void *const *srcs, int nsrc, void *dst,
			 int64_t n);

/* dg_reduce_bcast is dg_reduce_into with several destinations, in one pass:
 * for k < n it computes r = srcs[0][k] op srcs[1][k] op ... exactly as
 * dg_reduce_into does (same list-order float32 combining, one rounding to t,
 * the same first-NaN rule, so the same bits) and stores r into dsts[0][k],
 * ..., dsts[ndst-1][k]. When scale != 1 (floating t only; an integer t with
 * scale != 1 is DG_ERR_DTYPE), r, once rounded to t, is then multiplied by
 * scale in float32 and rounded to t again: the bits of dg_reduce_into
 * followed by dg_scale(scale), e.g. an average with scale = 1/nsrc.
 * Dtypes as dg_reduce_into; n > 0 needs nsrc >= 1, ndst >= 1, no NULLs.
 * Aliasing: a dst may be the same pointer as any src (or as another dst);
 * every element's loads happen before any of its stores, so the in-process
 * all-reduce passes its ranks' buffers as both lists. Partial overlaps
 * (a dst pointing into a src at another offset) are not allowed. Built for
 * that all-reduce: each rank reduces its slice of every buffer and writes
 * it back into every buffer, reading and writing each byte once. */
dg_status dg_reduce_bcast(dg_ctx *ctx, dg_dtype t, dg_redop op, const void *const *srcs, int nsrc,
			  void *const *dsts, int ndst, int64_t n, float scale);

/* ---- bandwidth roofs ----------------------------------------------------
 * What the benchmarks compare kernels against, measured in the same run on
 * the same pool: a threaded memcpy, and a threaded read-and-sum that touches
 * every byte once with the widest loads of the ctx's ISA and no other work. */

/* dg_roof_copy copies bytes from src to dst (non-overlapping) on the pool. */
dg_status dg_roof_copy(dg_ctx *ctx, void *dst, const void *src, int64_t bytes);
/* dg_roof_cast moves a cast's bytes without converting: src_bytes read,
 * dst_bytes written, where dst_bytes is src_bytes (a copy), twice it (each
 * line written twice) or half of it (pairs of lines XORed); other sizes are
 * DG_ERR_INVALID, src_bytes past INT64_MAX/3 DG_ERR_SIZE. dst must not
 * overlap src. */
dg_status dg_roof_cast(dg_ctx *ctx, void *dst, int64_t dst_bytes, const void *src, int64_t src_bytes);
/* dg_roof_read sums src as 64-bit integers (bytes rounded down to 8) on the
 * pool and stores the sum so the loads cannot be optimised away. */
dg_status dg_roof_read(dg_ctx *ctx, const void *src, int64_t bytes, uint64_t *sum);
/* dg_roof_update does an optimizer step's memory traffic on n float32
 * elements without its math: p, m and v each get s*g added in place (reads
 * g, p, m, v; writes p, m, v: 28 bytes per element). */
dg_status dg_roof_update(dg_ctx *ctx, float *p, const float *g, float *m, float *v, int64_t n, float s);

/* ---- optimizers ----------------------------------------------------------
 * Fused multi-tensor optimizer steps: one call updates every tensor of a list
 * (a ZeRO shard or sub-group), reading each element's param, grad and state
 * once and writing them once, with the grad unscale folded in and an
 * optional 16-bit copy of the updated parameters written in the same pass.
 * Element math: dg_optim_math.h (shared with the CUDA kernels). Results do
 * not depend on the thread count; every ISA gives the scalar path's bits. */

typedef enum dg_optim_kind {
	DG_OPTIM_ADAM = 0, /* Adam / AdamW (adam_w_mode) */
	DG_OPTIM_SGD = 1,  /* SGD with momentum, dampening, Nesterov (torch.optim.SGD) */
	DG_OPTIM_LAMB = 2, /* Lamb: Adam direction scaled by a per-tensor trust ratio */
	DG_OPTIM_LION = 3  /* Lion: sign of an interpolated momentum */
} dg_optim_kind;

/* Hyperparameters of one step, in double; the kernels round the derived
 * coefficients to float once. Unused fields are ignored by other kinds. */
typedef struct dg_optim_hparams {
	dg_optim_kind kind;
	int64_t step;        /* 1-based index of this update (bias correction; SGD's first step) */
	double lr;           /* >= 0 */
	double beta1, beta2; /* in [0, 1): Adam, Lamb, Lion */
	double eps;          /* >= 0: Adam, Lamb */
	double weight_decay; /* >= 0 */
	int adam_w_mode;     /* Adam: 1 = decoupled decay (AdamW), 0 = L2 added to the grad */
	int bias_correction; /* Adam, Lamb: 1 = divide by 1 - beta^step */
	double momentum;     /* SGD: >= 0; 0 = no momentum buffer */
	double dampening;    /* SGD: in [0, 1] */
	int nesterov;        /* SGD: needs momentum > 0 and dampening == 0 */
	double max_coeff;    /* Lamb: trust ratio clamp, 0 <= min_coeff <= max_coeff */
	double min_coeff;
	double grad_scale;   /* > 0, finite: grads are multiplied by 1/grad_scale (loss scale x clip) */
} dg_optim_hparams;

/* The tensor lists of one step; entry i of every list has ns[i] elements.
 *   params: param_dtype F32 (master weights) or F16/BF16 (fp32 state kept);
 *   grads:  grad_dtype F32, F16 or BF16; read only;
 *   exp_avg: float32 first moment (Adam, Lamb, Lion) or momentum buffer (SGD;
 *            NULL allowed when momentum == 0);
 *   exp_avg_sq: float32 second moment (Adam, Lamb); ignored otherwise;
 *   copies: NULL, or (with F32 params only) copy_dtype F16/BF16 buffers that
 *           receive the updated parameters rounded to nearest even. */
typedef struct dg_optim_lists {
	int count;
	const int64_t *ns;
	dg_dtype param_dtype;
	void *const *params;
	dg_dtype grad_dtype;
	const void *const *grads;
	float *const *exp_avg;
	float *const *exp_avg_sq;
	dg_dtype copy_dtype;
	void *const *copies;
} dg_optim_lists;

/* dg_optim_step applies one update. For Lamb, trust (count entries, may be
 * NULL) receives each tensor's trust ratio. A bad hyperparameter is
 * DG_ERR_INVALID, a bad dtype combination DG_ERR_DTYPE; nothing is written
 * then. */
dg_status dg_optim_step(dg_ctx *ctx, const dg_optim_hparams *hp, const dg_optim_lists *l, double *trust);

/* dg_adam_bf16_step is Adam/AdamW (hp->kind DG_OPTIM_ADAM) on bfloat16
 * master weights with DeepSpeedCPUAdam's arithmetic (optim_bf16.c): params
 * and grads BF16, no copies; exp_avg and exp_avg_sq point at state_dtype
 * data, DG_F32 or DG_BF16 (bf16_optimizer_states). Same checks and errors as
 * dg_optim_step. */
dg_status dg_adam_bf16_step(dg_ctx *ctx, const dg_optim_hparams *hp, const dg_optim_lists *l, dg_dtype state_dtype);

/* dg_unscale_check multiplies xs[i] (dtype t: F32, F16, BF16) in place by
 * inv_scale and sets *found to 1 if any result is Inf or NaN, else 0: the
 * unscale and the overflow check in one read. */
dg_status dg_unscale_check(dg_ctx *ctx, dg_dtype t, void *const *xs, const int64_t *ns, int count, float inv_scale,
			   int *found);

/* dg_adamw_naive_ref is the benchmark's baseline: AdamW on one fp32 array
 * as a plain scalar loop (no SIMD, no threads), same element math. */
dg_status dg_adamw_naive_ref(const dg_optim_hparams *hp, float *p, const float *g, float *m, float *v, int64_t n);

/* ---- BLAS ------------------------------------------------------------------
 * The nn products run on OpenBLAS, or on Intel MKL when DEEPGO_BLAS asks
 * for it: DEEPGO_BLAS=mkl loads libmkl_rt (.so.3, .so.2, .so) from the
 * loader's search path, DEEPGO_BLAS=/path/to/libmkl_rt.so.3 that file
 * (`make mkl` unpacks PyPI's wheel into ~/.cache/deepgo/mkl and prints the
 * path); unset or "openblas" keeps
 * OpenBLAS. Unset, on an Intel CPU with AVX-512, the Linear layer's float32
 * products (dg_nn_matmul_*: forward, input and weight gradients) run on
 * deepgo's own AVX-512 sgemm instead (nn_gemm.c: each element one float32
 * FMA chain in k order, the same bits on any thread count); "openblas"
 * keeps every product on OpenBLAS, and dg_blas_info.linear says which runs
 * them and why. MKL runs sequential (its threading layer set before its first
 * call, the ctx pool being the only parallelism), LP64, and with
 * conditional numerical reproducibility (MKL_CBWR_AUTO) so its results do
 * not vary from run to run. A DEEPGO_BLAS that cannot be honoured is
 * reported in dg_blas_info.error (the Go backend refuses to start), never
 * silently replaced; but MKL itself ends the process when a library it
 * loads beside libmkl_rt (its core, sequential layer, per-ISA kernels) is
 * missing. Products differ from OpenBLAS's in the last bits.
 *
 * On first use the core OpenBLAS chose (its kernel set) is checked against
 * the CPU's features: when the library fell back below what the CPU
 * supports (a CPU newer than the library) it is reselected, once, before
 * any product runs. DEEPGO_BLAS_CORE=library keeps the library's choice,
 * =NAME forces an OpenBLAS core; a set OPENBLAS_CORETYPE is left alone. */
typedef struct dg_blas_info {
	char library[160];     /* the library that runs sgemm: "OpenBLAS" or MKL's version string */
	char error[256];       /* why DEEPGO_BLAS could not be honoured ("" when it was) */
	char config[256];      /* openblas_get_config() */
	char library_core[32]; /* the core the library chose when it loaded */
	char cpu_core[32];     /* the best core this CPU supports ("" if unknown) */
	char core[32];         /* the core in use */
	char reason[192];      /* why that core */
	int corrected;         /* core differs from library_core */
	char linear[96];       /* what runs the Linear layer's float32 products and why:
				* "deepgo AVX-512 (nn_gemm.c)" or "the BLAS: <reason>" */
} dg_blas_info;

/* dg_blas_init runs the check above and pins OpenBLAS to one thread per
 * call, once per process (idempotent, thread-safe). */
void dg_blas_init(void);
/* dg_blas_get_info: the outcome of dg_blas_init (which it runs). */
dg_status dg_blas_get_info(dg_blas_info *out);
/* dg_blas_sgemm_seconds: time of reps single-threaded n x n x n sgemms on
 * random data (on the library in use), after one warm-up call (n <= 16384). */
dg_status dg_blas_sgemm_seconds(int64_t n, int64_t reps, double *seconds);

/* ---- nn ops ---------------------------------------------------------------
 * Layer kernels of the reference transformer (package nn), llm.c style:
 * float32, row-major, contiguous; N rows (= B*T tokens), C channels, OC
 * output channels, V vocabulary, NH heads of HS channels. Work runs on the
 * ctx pool. Every *_backward ACCUMULATES (+=) into the gradients it writes
 * (inputs and parameters alike), so a weight used twice (tied embedding)
 * sums both uses; a NULL gradient pointer skips that gradient. Matrix
 * products go through the BLAS's sgemm (OpenBLAS or MKL, see BLAS above;
 * the float32 Linear products through nn_gemm.c where dg_blas_info.linear
 * says so) kept single-threaded per call (dg_blas_init): the pool splits
 * the rows or columns and every thread runs its own product, so the ctx's
 * thread count is the only knob. */

/* dg_nn_matmul_forward: out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC] (bias may be NULL). */
dg_status dg_nn_matmul_forward(dg_ctx *ctx, float *out, const float *inp, const float *w, const float *bias,
			       int64_t n, int64_t c, int64_t oc);
/* dg_nn_matmul_backward: dinp[N,C] += dout @ w; dw[OC,C] += dout^T @ inp;
 * dbias[OC] += column sums of dout. */
dg_status dg_nn_matmul_backward(dg_ctx *ctx, float *dinp, float *dw, float *dbias, const float *dout,
				const float *inp, const float *w, int64_t n, int64_t c, int64_t oc);

/* Mixed precision (the *_mixed variants): the parameters (a weight and its
 * bias, or the two embedding tables) have dtype wt and their gradients dtype
 * gt, each F32, F16 or BF16 (another is DG_ERR_DTYPE); activations and their
 * gradients stay float32. A half parameter is widened inside the kernel and
 * the arithmetic is float32, as with float32 parameters holding the widened
 * values (up to summation order). A large half weight is widened in tiles of
 * at most DG_NN_TILE_FLOATS floats per thread (C + 1 when one row is longer),
 * allocated per call and counted by dg_ctx_scratch_peak: never a whole
 * float32 copy. A half gradient receives each call's float32 contribution
 * with one rounding per element, g = narrow(widen(g) + sum). With wt = gt =
 * F32 they are the plain functions. If scratch cannot be allocated they
 * return DG_ERR_NOMEM, with the outputs possibly partly written. */
#define DG_NN_TILE_FLOATS 65536

dg_status dg_nn_matmul_forward_mixed(dg_ctx *ctx, float *out, const float *inp, dg_dtype wt, const void *w,
				     const void *bias, int64_t n, int64_t c, int64_t oc);
dg_status dg_nn_matmul_backward_mixed(dg_ctx *ctx, float *dinp, dg_dtype gt, void *dw, void *dbias,
				      const float *dout, const float *inp, dg_dtype wt, const void *w, int64_t n,
				      int64_t c, int64_t oc);

/* dg_nn_matmul_backward_write is dg_nn_matmul_backward_mixed with dinp
 * written, not added to: dinp = 0 + dout @ w, the bits of clearing dinp
 * and accumulating (the BLAS is called with beta 0, which ignores what
 * dinp held), without the clearing pass; dw and dbias accumulate as ever.
 * Backward passes that clear a scratch gradient only to accumulate into
 * it once call this instead. */
dg_status dg_nn_matmul_backward_write(dg_ctx *ctx, float *dinp, dg_dtype gt, void *dw, void *dbias,
				      const float *dout, const float *inp, dg_dtype wt, const void *w, int64_t n,
				      int64_t c, int64_t oc);

/* dg_nn_layernorm_forward: per row, out = (x - mean) * rstd * w + b with
 * rstd = 1/sqrt(var + eps) (biased variance); mean[N], rstd[N] are saved
 * for the backward pass. */
dg_status dg_nn_layernorm_forward(dg_ctx *ctx, float *out, float *mean, float *rstd, const float *inp,
				  const float *w, const float *b, float eps, int64_t n, int64_t c);
dg_status dg_nn_layernorm_backward(dg_ctx *ctx, float *dinp, float *dw, float *db, const float *dout,
				   const float *inp, const float *w, const float *mean, const float *rstd, int64_t n,
				   int64_t c);
/* LayerNorm with w, b of dtype wt and dw, db of dtype gt (see "Mixed precision"). */
dg_status dg_nn_layernorm_forward_mixed(dg_ctx *ctx, float *out, float *mean, float *rstd, const float *inp,
					dg_dtype wt, const void *w, const void *b, float eps, int64_t n, int64_t c);
dg_status dg_nn_layernorm_backward_mixed(dg_ctx *ctx, float *dinp, dg_dtype gt, void *dw, void *db,
					 const float *dout, const float *inp, dg_dtype wt, const void *w,
					 const float *mean, const float *rstd, int64_t n, int64_t c);

/* dg_nn_gelu_forward: out[n] = GELU(inp[n]), tanh approximation (GPT-2). */
dg_status dg_nn_gelu_forward(dg_ctx *ctx, float *out, const float *inp, int64_t n);
/* dg_nn_gelu_backward: dinp[n] += GELU'(inp[n]) * dout[n]. */
dg_status dg_nn_gelu_backward(dg_ctx *ctx, float *dinp, const float *inp, const float *dout, int64_t n);
/* dg_nn_gelu_backward_write: dinp[n] = 0 + GELU'(inp[n]) * dout[n], the
 * bits of clearing dinp and accumulating, in one pass (what dinp held is
 * not read). */
dg_status dg_nn_gelu_backward_write(dg_ctx *ctx, float *dinp, const float *inp, const float *dout, int64_t n);

/* dg_nn_add: out[n] = a[n] + b[n] (the residual connection; out may alias a or b). */
dg_status dg_nn_add(dg_ctx *ctx, float *out, const float *a, const float *b, int64_t n);

/* dg_nn_encoder_forward: out[B,T,C] = wte[tok[b,t]] + wpe[t]. A token outside
 * [0, V) is DG_ERR_INVALID and nothing is written. */
dg_status dg_nn_encoder_forward(dg_ctx *ctx, float *out, const int32_t *tok, const float *wte, const float *wpe,
				int64_t b, int64_t t, int64_t c, int64_t v);
/* dg_nn_encoder_backward: dwte[tok] += dout, dwpe[t] += dout (either may be
 * NULL). Threads own channel ranges, so repeated tokens never race and the
 * sums run in token order whatever the thread count. */
dg_status dg_nn_encoder_backward(dg_ctx *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tok,
				 int64_t b, int64_t t, int64_t c, int64_t v);
/* The encoder with wte, wpe of dtype wt and dwte, dwpe of dtype gt (see
 * "Mixed precision"). A half gradient row a token repeats still gets one
 * rounding: the rows are summed in float32 in token order first, in a
 * scratch of V + 2*B*T int32 and per thread at most DG_NN_TILE_FLOATS floats
 * (or one float per distinct token, or per position, when there are more). */
dg_status dg_nn_encoder_forward_mixed(dg_ctx *ctx, float *out, const int32_t *tok, dg_dtype wt, const void *wte,
				      const void *wpe, int64_t b, int64_t t, int64_t c, int64_t v);
dg_status dg_nn_encoder_backward_mixed(dg_ctx *ctx, dg_dtype gt, void *dwte, void *dwpe, const float *dout,
				       const int32_t *tok, int64_t b, int64_t t, int64_t c, int64_t v);

/* dg_nn_attention_forward: causal multi-head self-attention.
 *   qkv[B,T,3*NH*HS]: per token the queries of all heads, then keys, then
 *   values (head h at channels h*HS..h*HS+HS of each third);
 *   out[B,T,NH*HS]; att[B,NH,T,S] receives the softmax weights (the backward
 *   pass needs them), S = min(window, T) (dg_nn_att_span in dg_nn_math.h), or T
 *   when window <= 0.
 * Query q attends to keys k0..q, k0 = max(0, q-window+1) (window <= 0: all
 * of 0..q); its weight for key k is att[b,h,q,k-k0], and slots past q-k0 are
 * 0. Without a window (or window >= T) that is the full T x T layout, k at
 * slot k; with one, memory and work grow as T*W. Scores are scaled by
 * 1/sqrt(HS). Both directions run on sgemm over tiles of queries, so T and
 * 3*NH*HS past INT32_MAX are DG_ERR_SIZE; a tile's scratch (a few tiles x
 * keys floats per thread) that cannot be allocated is DG_ERR_NOMEM. */
dg_status dg_nn_attention_forward(dg_ctx *ctx, float *out, float *att, const float *qkv, int64_t b, int64_t t,
				  int64_t nh, int64_t hs, int64_t window);
/* dg_nn_attention_backward: dqkv += d(out)/d(qkv)^T dout, from the saved att. */
dg_status dg_nn_attention_backward(dg_ctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *att,
				   int64_t b, int64_t t, int64_t nh, int64_t hs, int64_t window);
/* dg_nn_attention_backward_write: the same with dqkv written, the bits of
 * clearing it and accumulating (each head's slices are cleared by the
 * thread that then accumulates into them; what dqkv held is not read). */
dg_status dg_nn_attention_backward_write(dg_ctx *ctx, float *dqkv, const float *dout, const float *qkv,
					 const float *att, int64_t b, int64_t t, int64_t nh, int64_t hs, int64_t window);

/* dg_nn_softmax_xent_forward: probs[N,V] = softmax(logits) per row and
 * losses[N] = -log probs[n, targets[n]]. probs may alias logits. A target
 * outside [0, V) is DG_ERR_INVALID and nothing is written. */
dg_status dg_nn_softmax_xent_forward(dg_ctx *ctx, float *probs, float *losses, const float *logits,
				     const int32_t *targets, int64_t n, int64_t v);
/* dg_nn_softmax_xent_backward: dlogits[n,:] = (probs[n,:] - onehot(targets[n]))
 * * dlosses[n] (written, not accumulated: it is the head's scratch); dlogits
 * may alias probs. */
dg_status dg_nn_softmax_xent_backward(dg_ctx *ctx, float *dlogits, const float *probs, const int32_t *targets,
				      const float *dlosses, int64_t n, int64_t v);

/* Vocabulary-parallel cross-entropy (tensor parallelism): logits[N,V] is
 * one rank's slice, token ids [lo, lo+V), of a vocabulary of `vocab` split
 * over a group, and the loss combines the slices through three all-reduces
 * of per-row scalars the caller runs between the steps: max of maxes, then
 * sum of sums and tlogits. Then row n's loss is log(sums[n]) - tlogits[n].
 * The arithmetic is that of the Go loops these replaced (dg_nn_math.h's
 * dg_nn_vxent_*), each row in element order.
 *
 * dg_nn_vocab_xent_max: maxes[n] = the largest logit of row n (Go's max: a
 * NaN wins, +0 beats -0). */
dg_status dg_nn_vocab_xent_max(dg_ctx *ctx, float *maxes, const float *logits, int64_t n, int64_t v);
/* dg_nn_vocab_xent_exp: logits[n,:] = e^(logits[n,:] - maxes[n]) in place,
 * sums[n] = their sum (in double, element order, rounded once), tlogits[n] =
 * the target's logit minus maxes[n] where targets[n] is in [lo, lo+V), else
 * 0. A target outside [0, vocab) (or lo + V > vocab) is DG_ERR_INVALID and
 * nothing is written. */
dg_status dg_nn_vocab_xent_exp(dg_ctx *ctx, float *logits, float *sums, float *tlogits, const float *maxes,
			       const int32_t *targets, int64_t n, int64_t v, int64_t lo, int64_t vocab);
/* dg_nn_vocab_xent_grad: logits[n,:] = (logits[n,:] / sums[n] - onehot) * d,
 * the weights becoming the gradient of d times the summed loss (d = the
 * mean's 1/N times the loss scale); onehot is 1 at targets[n] - lo when
 * this slice holds it. */
dg_status dg_nn_vocab_xent_grad(dg_ctx *ctx, float *logits, const float *sums, const int32_t *targets, float d,
				int64_t n, int64_t v, int64_t lo);
/* dg_nn_vocab_clear_rows zeroes row r of x[N,C] wherever ids[r] is outside
 * [lo, lo+V): the vocabulary-parallel embedding's rows of tokens another
 * rank holds. */
dg_status dg_nn_vocab_clear_rows(dg_ctx *ctx, float *x, const int32_t *ids, int64_t n, int64_t c, int64_t lo,
				 int64_t v);

/* dg_nn_transpose_blocks: dst[j,i,:] = src[i,j,:] for src[A,B,W] (dst is
 * [B,A,W]), a copy: the packing of Ulysses's all-to-alls (sequence shards to
 * head shards and back). dst and src must not overlap (DG_ERR_INVALID). */
dg_status dg_nn_transpose_blocks(dg_ctx *ctx, float *dst, const float *src, int64_t a, int64_t b, int64_t w);

/* ---- asynchronous file I/O ------------------------------------------------
 * A dg_aio engine moves whole requests (N bytes at an offset, to or from a
 * caller's buffer) between host memory and files opened O_DIRECT. Each
 * request is split into block_size pieces that the engine keeps queue_depth
 * deep per worker; a request's completion is reported once, through
 * dg_aio_reap, so a caller pays one call per request, never one per block.
 *
 * Two back ends, chosen when the engine opens: io_uring (one ring per
 * worker, files and buffers registered with the rings) and a pool of
 * threads calling pread/pwrite. AUTO takes io_uring and falls back to
 * threads when the kernel refuses a ring (old kernel, seccomp: ENOSYS,
 * EPERM). Both resume short transfers and retry EINTR/EAGAIN; any other
 * failure ends the request with the errno and the file offset of the piece
 * that failed, and the rest of the request is not issued.
 *
 * With O_DIRECT (the default) buffers must be 4096-aligned (dg_alloc with
 * align 4096) and sizes and offsets multiples of 4096; callers pad. The
 * engine is safe to use from several threads. */

#define DG_AIO_ALIGN 4096
#define DG_AIO_MAX_FILES 256
#define DG_AIO_MAX_BUFFERS 64

typedef enum dg_aio_backend { DG_AIO_AUTO = 0, DG_AIO_URING = 1, DG_AIO_THREADS = 2 } dg_aio_backend;

/* Fault injection, for tests only: the inject_at-th raw transfer result the
 * engine sees (0-based, counted over the engine's life, retries included)
 * is replaced. ERRNO reports -inject_errno; SHORT reports half the piece
 * (rounded down to 4096; pieces of 4096 bytes are left alone), which the
 * engine must resume; EOF reports 0 bytes. inject_op narrows the count to
 * reads or writes; dg_aio_inject arms a fault on a running engine. */
typedef enum dg_aio_fault { DG_AIO_FAULT_NONE = 0, DG_AIO_FAULT_ERRNO = 1, DG_AIO_FAULT_SHORT = 2, DG_AIO_FAULT_EOF = 3 } dg_aio_fault;
typedef enum dg_aio_op { DG_AIO_OP_ANY = 0, DG_AIO_OP_READ = 1, DG_AIO_OP_WRITE = 2 } dg_aio_op;

typedef struct dg_aio_config {
	int64_t block_size;    /* bytes per piece; a multiple of 4096 */
	int queue_depth;       /* pieces in flight per worker, >= 1 */
	int thread_count;      /* workers (intra_op_parallelism), >= 1 */
	int single_submit;     /* submit each piece on its own system call */
	int overlap_events;    /* refill the queue as pieces complete, not per batch */
	dg_aio_backend backend;
	dg_aio_fault inject;   /* tests only */
	int inject_errno;
	int64_t inject_at;
	dg_aio_op inject_op;   /* the transfers inject_at counts */
} dg_aio_config;

/* dg_aio_result.err when a read found the end of the file before its end */
#define DG_AIO_ERR_EOF (-1)

typedef struct dg_aio_result {
	int64_t id;         /* from dg_aio_submit */
	dg_status status;   /* DG_OK, or DG_ERR_IO */
	int err;            /* errno of the failed piece, or DG_AIO_ERR_EOF */
	int file;           /* the request's file */
	int64_t err_offset; /* file offset of the first byte not transferred */
} dg_aio_result;

typedef struct dg_aio_stats {
	int64_t pieces;       /* pieces transferred to the end */
	int64_t retries;      /* EINTR/EAGAIN resubmissions */
	int64_t resumed;      /* short transfers resumed */
	int64_t fixed;        /* pieces issued on registered buffers and files */
	dg_aio_backend backend;
} dg_aio_stats;

typedef struct dg_aio dg_aio;

/* dg_aio_open validates cfg (DG_ERR_INVALID naming nothing: the binding
 * names the field) and starts the workers. A forced URING the kernel refuses
 * is DG_ERR_UNSUPPORTED. */
dg_status dg_aio_open(const dg_aio_config *cfg, dg_aio **out);
/* dg_aio_shutdown lets the workers finish every submitted request, then stops
 * them; dg_aio_reap returns 0 results once all are reaped. Idempotent. */
void dg_aio_shutdown(dg_aio *a);
/* dg_aio_destroy shuts down, closes the files and frees the engine. */
void dg_aio_destroy(dg_aio *a);
dg_status dg_aio_get_stats(dg_aio *a, dg_aio_stats *out);
/* dg_aio_inject (tests only) replaces the fault of the config: the at-th raw
 * result of an op transfer from now on (the count restarts) is replaced as
 * kind says; DG_AIO_FAULT_NONE disarms. DG_ERR_INVALID as dg_aio_open. */
dg_status dg_aio_inject(dg_aio *a, dg_aio_fault kind, int err, dg_aio_op op, int64_t at);

#define DG_AIO_WRITE 1  /* open for writing too */
#define DG_AIO_CREATE 2 /* create when missing */
#define DG_AIO_TRUNC 4  /* truncate to 0 */
#define DG_AIO_BUFFERED 8 /* no O_DIRECT (file systems without it); any alignment */

/* dg_aio_file_open opens path and registers it; *file is its index. On
 * DG_ERR_IO *err holds the errno (EINVAL from a file system without
 * O_DIRECT). The path is kept for messages (dg_aio_file_path). */
dg_status dg_aio_file_open(dg_aio *a, const char *path, int flags, int *file, int *err);
/* dg_aio_file_close closes a file no request is using. */
dg_status dg_aio_file_close(dg_aio *a, int file);
const char *dg_aio_file_path(dg_aio *a, int file);
/* dg_aio_file_size reports the file's size in bytes. */
dg_status dg_aio_file_size(dg_aio *a, int file, int64_t *bytes, int *err);

/* dg_aio_buffer_register lets the io_uring rings pin [p, p+bytes) once
 * (registered buffers); requests inside it use fixed reads and writes.
 * Optional: unregistered buffers work too. *index for unregister. */
dg_status dg_aio_buffer_register(dg_aio *a, void *p, int64_t bytes, int *index);
/* dg_aio_buffer_unregister forgets a buffer no request is using. */
dg_status dg_aio_buffer_unregister(dg_aio *a, int index);

/* dg_aio_submit queues a read (write == 0) of bytes at offset into buf, or a
 * write from buf; *id names it in dg_aio_reap. buf must stay valid until the
 * request is reaped. */
dg_status dg_aio_submit(dg_aio *a, int file, int write, void *buf, int64_t bytes, int64_t offset, int64_t *id);
/* dg_aio_reap waits for at least one completed request (or returns at once
 * when nonblocking != 0) and copies up to max results; *n == 0 after
 * dg_aio_shutdown means every request was reaped. */
dg_status dg_aio_reap(dg_aio *a, dg_aio_result *out, int max, int nonblocking, int *n);

#ifdef __cplusplus
}
#endif
#endif /* DEEPGO_H */
