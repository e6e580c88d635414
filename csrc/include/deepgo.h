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
/* dg_ctx_set_isa forces an instruction set (tests compare them); AUTO picks the
 * best the CPU supports. Asking for one the CPU lacks is DG_ERR_UNSUPPORTED. */
dg_status dg_ctx_set_isa(dg_ctx *ctx, dg_isa isa);
dg_isa dg_ctx_isa(const dg_ctx *ctx);
/* dg_cpu_best_isa reports the best instruction set of this CPU. */
dg_isa dg_cpu_best_isa(void);

/* ---- host memory --------------------------------------------------------- */

/* dg_alloc returns zeroed memory of at least bytes, aligned to align (a power
 * of two >= 64; 4096 for O_DIRECT I/O). bytes == 0 yields a valid unique
 * pointer. Free with dg_free. */
dg_status dg_alloc(size_t bytes, size_t align, void **out);
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

/* dg_scale multiplies xs[i] in place by alpha. */
dg_status dg_scale(dg_ctx *ctx, dg_dtype t, void *const *xs, const int64_t *ns, int count, float alpha);

/* dg_axpy does ys[i] += alpha * xs[i]; xs and ys share dtype t. */
dg_status dg_axpy(dg_ctx *ctx, dg_dtype t, float alpha, const void *const *xs, void *const *ys,
		  const int64_t *ns, int count);

/* dg_sumsq writes the sum of squares of all elements, accumulated in double,
 * to *total, and, when per != NULL, each tensor's own sum to per[i]. The
 * result is independent of the thread count (fixed blocking, fixed order). */
dg_status dg_sumsq(dg_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count, double *per,
		   double *total);

/* dg_nonfinite sets *found to 1 if any element is Inf or NaN, else 0. */
dg_status dg_nonfinite(dg_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count, int *found);

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
 * never on threads or timing. dst may alias any source. MAX and MIN propagate
 * NaN. Dtypes: F32, F16, BF16 (and I32, I64 for SUM/MAX/MIN, exact). */
dg_status dg_reduce_into(dg_ctx *ctx, dg_dtype t, dg_redop op, const void *const *srcs, int nsrc, void *dst,
			 int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* DEEPGO_H */
