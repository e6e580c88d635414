/* ctx.c — the context: thread count, chosen ISA, the per-ctx scratch and its
 * accounting. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dg_internal.h"

dg_isa dg_cpu_best_isa(void)
{
#if DG_HAVE_X86
	/* libgcc/compiler-rt check OS support (XGETBV) as well as CPUID bits. */
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2"))
		return DG_ISA_AVX512;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma"))
		return DG_ISA_AVX2;
#endif
	return DG_ISA_SCALAR;
}

#if DG_HAVE_X86
/* CPUID leaf 7 subleaf 1 EAX bit 5; it uses the ZMM state that the AVX-512
 * check already found enabled, so no further XGETBV test is needed. */
int dg_cpu_has_avx512bf16(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512bf16");
}
#endif

static const dg_kernels *kernels_for(dg_isa isa)
{
	switch (isa) {
	case DG_ISA_SCALAR: return &dg_kernels_scalar;
#if DG_HAVE_X86
	case DG_ISA_AVX2: return &dg_kernels_avx2;
	/* BF16 is an extra table, not part of what DG_ISA_AVX512 requires: the
	 * bits are the same either way */
	case DG_ISA_AVX512: return dg_cpu_has_avx512bf16() ? &dg_kernels_avx512bf16 : &dg_kernels_avx512;
#endif
	default: return NULL;
	}
}

static int resolve_threads(int nthreads)
{
	if (nthreads <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		nthreads = n > 0 ? (int)n : 1;
	}
	return nthreads > DG_MAX_THREADS ? DG_MAX_THREADS : nthreads;
}

static void stash_free(dg_ctx *ctx);

dg_status dg_ctx_create(int nthreads, dg_ctx **out)
{
	if (out == NULL)
		return DG_ERR_INVALID;
	*out = NULL;
	dg_ctx *c = calloc(1, sizeof *c);
	if (c == NULL)
		return DG_ERR_NOMEM;
	c->partials = malloc((size_t)DG_PARTIALS * sizeof(double));
	if (c->partials == NULL) {
		free(c);
		return DG_ERR_NOMEM;
	}
	c->spin_ns = -1;
	c->isa = dg_cpu_best_isa();
	c->k = kernels_for(c->isa);
	dg_status st = dg_ctx_set_threads(c, nthreads);
	if (st != DG_OK) {
		dg_ctx_destroy(c);
		return st;
	}
	*out = c;
	return DG_OK;
}

void dg_ctx_destroy(dg_ctx *ctx)
{
	if (ctx == NULL)
		return;
	dg_pool_destroy(ctx->pool);
	stash_free(ctx);
	free(ctx->partials);
	free(ctx);
}

dg_status dg_ctx_set_threads(dg_ctx *ctx, int nthreads)
{
	if (ctx == NULL)
		return DG_ERR_INVALID;
	nthreads = resolve_threads(nthreads);
	if (ctx->pool != NULL && nthreads == ctx->nthreads)
		return DG_OK;
	dg_pool *p = NULL;
	if (nthreads > 1) {
		dg_status st = dg_pool_create(nthreads, &p);
		if (st != DG_OK)
			return st;
		if (ctx->spin_ns >= 0)
			dg_pool_set_spin(p, ctx->spin_ns);
	}
	dg_pool_destroy(ctx->pool);
	ctx->pool = p;
	ctx->nthreads = nthreads;
	return DG_OK;
}

dg_status dg_ctx_set_spin(dg_ctx *ctx, int64_t ns)
{
	if (ctx == NULL || ns < 0 || ns > 1000000000)
		return DG_ERR_INVALID;
	ctx->spin_ns = ns;
	if (ctx->pool != NULL)
		dg_pool_set_spin(ctx->pool, ns);
	return DG_OK;
}

int dg_ctx_threads(const dg_ctx *ctx) { return ctx == NULL ? 0 : ctx->nthreads; }

dg_status dg_ctx_set_isa(dg_ctx *ctx, dg_isa isa)
{
	if (ctx == NULL)
		return DG_ERR_INVALID;
	dg_isa best = dg_cpu_best_isa();
	if (isa == DG_ISA_AUTO)
		isa = best;
	if (isa != DG_ISA_SCALAR && isa != DG_ISA_AVX2 && isa != DG_ISA_AVX512)
		return DG_ERR_INVALID;
	/* ISAs are ordered: AVX512 implies the AVX2 table works too */
	if ((int)isa > (int)best || kernels_for(isa) == NULL)
		return DG_ERR_UNSUPPORTED;
	ctx->isa = isa;
	ctx->k = kernels_for(isa);
	return DG_OK;
}

dg_isa dg_ctx_isa(const dg_ctx *ctx) { return ctx == NULL ? DG_ISA_AUTO : ctx->isa; }

void dg_parallel_for(dg_ctx *ctx, int64_t n, int64_t grain, int64_t work, dg_task_fn fn, void *arg)
{
	if (n <= 0)
		return;
	if (ctx->pool == NULL || work < DG_INLINE_ELEMS || n <= grain || !dg_pool_try_acquire(ctx->pool)) {
		fn(arg, 0, n);
		return;
	}
	dg_pool_run(ctx->pool, n, grain, fn, arg);
	dg_pool_release(ctx->pool);
}

/* Each scratch block starts with a header holding its capacity, so a
 * block from the stash (which may be larger than asked) is put back whole.
 * The header keeps malloc's alignment. */
#define SCRATCH_HEAD ((size_t)64)

static size_t block_cap(const char *block)
{
	size_t cap;
	memcpy(&cap, block, sizeof cap);
	return cap;
}

static void stash_lock(dg_ctx *ctx)
{
	while (__atomic_test_and_set(&ctx->stash_lock, __ATOMIC_ACQUIRE))
		;
}

static void stash_unlock(dg_ctx *ctx) { __atomic_clear(&ctx->stash_lock, __ATOMIC_RELEASE); }

/* stash_take: the smallest kept block of at least cap bytes, or NULL */
static char *stash_take(dg_ctx *ctx, size_t cap)
{
	stash_lock(ctx);
	int best = -1;
	for (int i = 0; i < DG_STASH_SLOTS; i++)
		if (ctx->stash[i] != NULL && block_cap(ctx->stash[i]) >= cap &&
		    (best < 0 || block_cap(ctx->stash[i]) < block_cap(ctx->stash[best])))
			best = i;
	char *block = NULL;
	if (best >= 0) {
		block = ctx->stash[best];
		ctx->stash[best] = NULL;
	}
	stash_unlock(ctx);
	return block;
}

/* stash_put keeps block (nonzero) when a slot is free */
static int stash_put(dg_ctx *ctx, char *block)
{
	stash_lock(ctx);
	int kept = 0;
	for (int i = 0; i < DG_STASH_SLOTS && !kept; i++)
		if (ctx->stash[i] == NULL) {
			ctx->stash[i] = block;
			kept = 1;
		}
	stash_unlock(ctx);
	return kept;
}

static void stash_free(dg_ctx *ctx)
{
	for (int i = 0; i < DG_STASH_SLOTS; i++)
		free(ctx->stash[i]);
}

void *dg_scratch_alloc(dg_ctx *ctx, size_t bytes)
{
	size_t cap = bytes > 0 ? bytes : 1;
	char *block = NULL;
	if (cap >= DG_STASH_MIN && cap <= DG_STASH_MAX)
		block = stash_take(ctx, cap);
	if (block == NULL) {
		if (cap > SIZE_MAX - SCRATCH_HEAD || (block = malloc(SCRATCH_HEAD + cap)) == NULL)
			return NULL;
		memcpy(block, &cap, sizeof cap);
	}
	int64_t live = __atomic_add_fetch(&ctx->scratch_live, (int64_t)bytes, __ATOMIC_RELAXED);
	int64_t peak = __atomic_load_n(&ctx->scratch_peak, __ATOMIC_RELAXED);
	while (live > peak &&
	       !__atomic_compare_exchange_n(&ctx->scratch_peak, &peak, live, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	return block + SCRATCH_HEAD;
}

void dg_scratch_free(dg_ctx *ctx, void *p, size_t bytes)
{
	if (p == NULL)
		return;
	char *block = (char *)p - SCRATCH_HEAD;
	const size_t cap = block_cap(block);
	if (cap < DG_STASH_MIN || cap > DG_STASH_MAX || !stash_put(ctx, block))
		free(block);
	__atomic_sub_fetch(&ctx->scratch_live, (int64_t)bytes, __ATOMIC_RELAXED);
}

dg_status dg_ctx_pool_balance(dg_ctx *ctx, int reset, int64_t *regions, int64_t *busy_ns, int64_t *idle_ns)
{
	if (ctx == NULL || regions == NULL || busy_ns == NULL || idle_ns == NULL)
		return DG_ERR_INVALID;
	*regions = *busy_ns = *idle_ns = 0;
	if (ctx->pool != NULL)
		dg_pool_stats(ctx->pool, reset, regions, busy_ns, idle_ns);
	return DG_OK;
}

dg_status dg_ctx_scratch_peak(dg_ctx *ctx, int reset, int64_t *peak_bytes)
{
	if (ctx == NULL || peak_bytes == NULL)
		return DG_ERR_INVALID;
	*peak_bytes = __atomic_load_n(&ctx->scratch_peak, __ATOMIC_RELAXED);
	if (reset)
		__atomic_store_n(&ctx->scratch_peak, __atomic_load_n(&ctx->scratch_live, __ATOMIC_RELAXED),
				 __ATOMIC_RELAXED);
	return DG_OK;
}
