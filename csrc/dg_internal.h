/*
 * dg_internal.h — what the core's .c files share and nothing outside sees:
 * the context layout, the pool's parallel-for, the per-ISA kernel tables and
 * the multi-tensor list helpers.
 */
#ifndef DG_INTERNAL_H
#define DG_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "deepgo.h"
#include "dg_math.h"

/* Calls with less work than this run on the caller's thread: waking workers
 * costs microseconds, more than 32Ki elements of streaming work on one core. */
#define DG_INLINE_ELEMS ((int64_t)32768)

/* dg_sumsq sums each tensor in fixed blocks of this many elements; each block
 * is summed by one thread, so the block partials, and their in-order sum, do
 * not depend on how many threads there are. */
#define DG_SUMSQ_BLOCK ((int64_t)65536)

/* Per-ctx scratch for block partials: 64Ki blocks cover 4Gi elements per
 * window; larger calls take several windows (see reduce.c). */
#define DG_PARTIALS ((int64_t)65536)

/* Element ranges handed to threads start at multiples of this, so two
 * threads rarely write the same cache line and SIMD loops see full vectors. */
#define DG_GRAIN ((int64_t)1024)

#define DG_MAX_THREADS 1024

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DG_HAVE_X86 1
#define DG_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))
#define DG_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c,fma")))
/* the AVX-512 set plus AVX512_BF16, for the few loops that use it */
#define DG_TARGET_AVX512BF16                                                                                         \
	__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c,fma,avx512bf16")))
#else
#define DG_HAVE_X86 0
#endif

/* The optimizer loops prefetch each stream dg_optim_prefetch() bytes ahead
 * (and the update roof alike): without it the core waits on memory between
 * bursts of arithmetic instead of overlapping them. The distance is the
 * vendor's, chosen by bench-adam: 2 KiB on the Xeons (~10% over none), but
 * on AMD Zen 4 2 KiB ahead runs 5-15% slower than 256 B-1 KiB, whose hardware
 * prefetcher keeps up by itself at that range (1 and 2 threads, 16 and 64 Mi
 * parameters, interleaved C loops). -DDG_OPTIM_PREFETCH=N forces N. */
static inline int64_t dg_optim_prefetch(void)
{
#if defined(DG_OPTIM_PREFETCH)
	return DG_OPTIM_PREFETCH;
#elif DG_HAVE_X86
	return __builtin_cpu_is("amd") ? 512 : 2048;
#else
	return 2048;
#endif
}

/* Where dg_stream_prefetch() says so, streaming loops (the casts, the
 * float32 sum of squares) prefetch their input this many bytes ahead into
 * L1, one hint per 64-byte line, and DG_PF_FAR bytes ahead into L2 (T2): on
 * the Xeons the hardware prefetcher alone leaves these loops waiting on
 * memory between bursts of compute, and the far hint keeps more lines in
 * flight than the near one alone (casts at 64 MiB, 1 thread: ~0.85 ->
 * ~0.9-1.0 of memcpy; examples/bench-kernels, interleaved builds). The cast
 * roof (roof.c) prefetches alike. */
#ifndef DG_PF
#define DG_PF 4096
#endif
#ifndef DG_PF_FAR
#define DG_PF_FAR 32768
#endif

/* Whether the streaming loops prefetch in software (DG_PF, DG_PF_FAR). Not
 * on AMD: Zen 4's hardware prefetchers keep up with these loops by
 * themselves, and the hints only cost issue slots. In a C harness timing
 * the kernels with the hints on and off alternately (64 MiB, EPYC Zen 4):
 * on huge pages (dg_alloc's DG_ALLOC_HUGE) the float32 sum of squares ran
 * 20-33 GB/s with them against 30-34 without on 1 thread, the f32->bf16
 * cast 29-30 against 34-37; on 4 KiB pages no loop lost by dropping them
 * (1 thread) and the 2-thread figures were within their noise. The
 * half-precision sums keep their PREFETCHNTA (pf_ahead_nta), which did not
 * change (their rare re-sum of a block holding Inf or NaN goes through the
 * float32 loop and follows this choice). -DDG_STREAM_PREFETCH=0/1 forces
 * it. */
static inline int dg_stream_prefetch(void)
{
#if defined(DG_STREAM_PREFETCH)
	return DG_STREAM_PREFETCH;
#elif DG_HAVE_X86
	return !__builtin_cpu_is("amd");
#else
	return 0;
#endif
}

/* A kernel table holds one ISA's leaf loops over one contiguous run of
 * elements. The scalar table is the oracle: every other table must give the
 * same bits (sumsq_block excepted: its summation order is per-ISA). */
typedef struct dg_kernels {
	/* cast between two distinct floating dtypes */
	void (*cast)(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n);
	void (*scale)(dg_dtype t, void *x, int64_t n, float alpha);
	void (*axpy)(dg_dtype t, float alpha, const void *x, void *y, int64_t n);
	/* sum of squares of n <= DG_SUMSQ_BLOCK elements, in double */
	double (*sumsq_block)(dg_dtype t, const void *x, int64_t n);
	/* nonzero when any of n elements is Inf or NaN */
	int (*nonfinite)(dg_dtype t, const void *x, int64_t n);
	/* dsts[d][k] = srcs[0][k] op srcs[1][k] op ... for lo <= k < hi, every d,
	 * floating dtypes only, combined in list order in float32; scale != 1 then
	 * multiplies the t-rounded result and rounds again (see dg_reduce_bcast);
	 * each element's (or vector's) loads precede its stores */
	void (*reduce_bcast)(dg_dtype t, dg_redop op, const void *const *srcs, int nsrc, void *const *dsts,
			     int ndst, int64_t lo, int64_t hi, float scale);
	/* cast and copy_stream write with non-temporal stores and end with a
	 * store fence; NULL in tables without them (callers fall back to cast
	 * and memcpy). Used only past DG_STREAM_BYTES of output per call. */
	void (*cast_stream)(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n);
	void (*copy_stream)(void *d, const void *s, int64_t bytes);
} dg_kernels;

/* Calls writing at least this many bytes bypass the cache: such an output
 * cannot stay in cache for its reader anyway, and a normal store first
 * reads each destination line (write-allocate), a third more memory traffic
 * for a cast or a bucket copy. glibc's memcpy switches to non-temporal
 * stores around this size too, so kernels and the memcpy roof pay alike. */
#define DG_STREAM_BYTES ((int64_t)16 << 20)

extern const dg_kernels dg_kernels_scalar;
#if DG_HAVE_X86
extern const dg_kernels dg_kernels_avx2;
extern const dg_kernels dg_kernels_avx512;
/* dg_kernels_avx512 with casts to bfloat16 through VCVTNE2PS2BF16: the table
 * of DG_ISA_AVX512 on CPUs that also have AVX512_BF16 (dg_cpu_has_avx512bf16) */
extern const dg_kernels dg_kernels_avx512bf16;
int dg_cpu_has_avx512bf16(void);
#endif

/* ---- pool ---------------------------------------------------------------- */

/* A task runs the half-open index range [lo, hi) of a parallel-for. */
typedef void (*dg_task_fn)(void *arg, int64_t lo, int64_t hi);

typedef struct dg_pool dg_pool;

dg_status dg_pool_create(int nthreads, dg_pool **out);
void dg_pool_destroy(dg_pool *p);

/* dg_pool_try_acquire takes the pool for one parallel region; 0 means another
 * caller holds it and this one must run its work inline. */
int dg_pool_try_acquire(dg_pool *p);
void dg_pool_release(dg_pool *p);
/* dg_pool_run splits [0, n) at multiples of grain over the pool's threads and
 * returns when all parts are done; the caller must hold the pool. */
void dg_pool_run(dg_pool *p, int64_t n, int64_t grain, dg_task_fn fn, void *arg);
/* dg_pool_set_spin sets how long, in ns, the pool's threads spin before
 * sleeping (see pool.c); 0 sleeps at once. */
void dg_pool_set_spin(dg_pool *p, int64_t ns);
/* dg_pool_stats reports the pool's regions, the threads' summed part times
 * and their summed waits for the slowest part of each region (see pool.c);
 * reset != 0 restarts the counts. Not while a region runs. */
void dg_pool_stats(dg_pool *p, int reset, int64_t *regions, int64_t *busy_ns, int64_t *idle_ns);

#define DG_STASH_SLOTS 8
#define DG_STASH_MIN ((size_t)64 << 10)
#define DG_STASH_MAX ((size_t)4 << 20)

struct dg_ctx {
	int nthreads;
	dg_isa isa;              /* never AUTO once created */
	const dg_kernels *k;     /* the table for isa */
	dg_pool *pool;           /* NULL when nthreads == 1 */
	double *partials;        /* DG_PARTIALS doubles; used only while holding pool */
	int64_t scratch_live;    /* bytes of dg_scratch_alloc memory not yet freed (atomic) */
	int64_t scratch_peak;    /* the most scratch_live has been since reset (atomic) */
	int64_t spin_ns;         /* dg_ctx_set_spin's value, -1 for the pool's default */
	/* freed scratch blocks kept for the next dg_scratch_alloc (ctx.c; each
	 * block's header holds its capacity) */
	char *stash[DG_STASH_SLOTS];
	char stash_lock; /* __atomic_test_and_set spin lock over stash */
};

/* dg_scratch_alloc is malloc for a kernel's temporary buffers (the float32
 * tiles of the mixed-precision nn kernels, nn_gemm.c's packed panels),
 * counted on ctx so that dg_ctx_scratch_peak can show they stay bounded.
 * NULL when out of memory. Free with dg_scratch_free, passing the same
 * size. Freed blocks of DG_STASH_MIN to DG_STASH_MAX bytes are kept on the
 * ctx, up to DG_STASH_SLOTS of them, for the next call: malloc serves such
 * sizes from mmap or trims them back to the system when freed, and the
 * next call's page faults (zeroing each page) cost ~3% of a GPT step on one
 * thread when every Linear product took ~0.8 MB of panels. */
void *dg_scratch_alloc(dg_ctx *ctx, size_t bytes);
void dg_scratch_free(dg_ctx *ctx, void *p, size_t bytes);

/* dg_blas_linear_own: nonzero when the Linear layer's float32 products
 * (forward, input and weight gradients) run on nn_gemm.c instead of
 * dg_sgemm (an Intel CPU with AVX-512, OpenBLAS as the BLAS, DEEPGO_BLAS
 * not "openblas"); dg_blas_info.linear says which and why. Runs
 * dg_blas_init. */
int dg_blas_linear_own(void);

/* dg_sgemm is cblas_sgemm (CBLAS enum values as ints) on the BLAS in use:
 * OpenBLAS or the MKL that DEEPGO_BLAS loaded (blas_core.c). Callers run
 * dg_blas_init first. */
void dg_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
	      int ldb, float beta, float *c, int ldc);

/* dg_parallel_for runs fn over [0, n): inline when work (elements touched) is
 * small, the pool is absent or busy; otherwise split over the pool. */
void dg_parallel_for(dg_ctx *ctx, int64_t n, int64_t grain, int64_t work, dg_task_fn fn, void *arg);

/* ---- lists --------------------------------------------------------------- */

/* dg_check_list validates a tensor list and sums its element counts. */
dg_status dg_check_list(const void *const *ptrs, const int64_t *ns, int count, int64_t *total);

/* dg_list_seek finds the tensor holding element g of the concatenated list:
 * on return ns[*i] > *off. g must be < the list's total. */
static inline void dg_list_seek(const int64_t *ns, int count, int64_t g, int *i, int64_t *off)
{
	int j = 0;
	while (j < count && g >= ns[j]) {
		g -= ns[j];
		j++;
	}
	*i = j;
	*off = g;
}

/* dg_list_fn handles elements off .. off+len-1 of tensor i of a list (len
 * > 0) and returns a flag the walk ORs together (0 when it has none). */
typedef int (*dg_list_fn)(const void *arg, int i, int64_t off, int64_t len);

/* dg_list_run walks the elements [lo, hi) of a list's concatenation (ns[i]
 * elements in tensor i, lo < hi <= the total) as one fn call per non-empty
 * run within a tensor: the walk every list kernel's task shares, whatever
 * range the pool gave it. It returns the OR of fn's flags. */
static inline int dg_list_run(const int64_t *ns, int count, int64_t lo, int64_t hi, dg_list_fn fn, const void *arg)
{
	int i, flags = 0;
	int64_t off;
	dg_list_seek(ns, count, lo, &i, &off);
	for (int64_t left = hi - lo; left > 0; i++, off = 0) {
		int64_t len = ns[i] - off < left ? ns[i] - off : left;
		if (len > 0)
			flags |= fn(arg, i, off, len);
		left -= len;
	}
	return flags;
}

static inline int dg_is_float(dg_dtype t) { return t == DG_F32 || t == DG_F16 || t == DG_BF16; }

/* dg_load_f widens element i of a floating array of dtype t; dg_store_f
 * rounds v into it (dg_math.h's casts). For loops that cannot take a whole
 * run at once through a kernel table (gathers, strided rows). */
static inline float dg_load_f(dg_dtype t, const void *p, int64_t i)
{
	switch (t) {
	case DG_F16: return dg_f16_to_f32(((const uint16_t *)p)[i]);
	case DG_BF16: return dg_bf16_to_f32(((const uint16_t *)p)[i]);
	default: return ((const float *)p)[i];
	}
}

static inline void dg_store_f(dg_dtype t, void *p, int64_t i, float v)
{
	switch (t) {
	case DG_F16: ((uint16_t *)p)[i] = dg_f32_to_f16(v); break;
	case DG_BF16: ((uint16_t *)p)[i] = dg_f32_to_bf16(v); break;
	default: ((float *)p)[i] = v; break;
	}
}

/* dg_axpy_mixed_run does y[k] += alpha * x[k] for k < n on one thread with
 * kernel table k, x of dtype xt and y of dtype yt (floating): each element
 * is widened, combined in float32 as dg_axpy_f32 and rounded to yt once, so
 * with xt == yt it is exactly k->axpy. */
void dg_axpy_mixed_run(const dg_kernels *k, dg_dtype xt, dg_dtype yt, float alpha, const void *x, void *y, int64_t n);

#endif /* DG_INTERNAL_H */
