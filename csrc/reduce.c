/*
 * reduce.c — dg_sumsq, dg_nonfinite, dg_reduce_into and dg_reduce_bcast.
 *
 * dg_sumsq's order, fixed for a given ISA and independent of threads: every
 * tensor is cut into DG_SUMSQ_BLOCK-element blocks from its start; one thread
 * sums one block (in the ISA's lane order, see kernels_*.c); a tensor's sum is
 * its block partials added left to right; the total is the tensor sums added
 * in list order. Blocks are processed in windows as large as the partials
 * buffer: the pool owner uses the ctx's DG_PARTIALS scratch, an inline caller
 * (tiny call or busy pool) a small stack buffer. Because the fold is serial
 * and in order, the window size does not change a single bit.
 */
#include "dg_internal.h"

#define STACK_PARTIALS 256

static int64_t blocks_of(int64_t n) { return n / DG_SUMSQ_BLOCK + (n % DG_SUMSQ_BLOCK != 0); }

typedef struct sumsq_job {
	const dg_kernels *k;
	dg_dtype t;
	size_t es;
	const void *const *xs;
	const int64_t *ns;
	int count;
	int64_t g0;      /* first global block of this window */
	double *partials; /* partials[b] for block g0 + b */
} sumsq_job;

static void sumsq_task(void *v, int64_t lo, int64_t hi)
{
	const sumsq_job *j = v;
	int64_t g = j->g0 + lo;
	int i = 0;
	while (g >= blocks_of(j->ns[i])) {
		g -= blocks_of(j->ns[i]);
		i++;
	}
	for (int64_t b = lo; b < hi; b++) {
		while (g >= blocks_of(j->ns[i])) {
			g -= blocks_of(j->ns[i]);
			i++;
		}
		int64_t off = g * DG_SUMSQ_BLOCK;
		int64_t len = j->ns[i] - off < DG_SUMSQ_BLOCK ? j->ns[i] - off : DG_SUMSQ_BLOCK;
		j->partials[b] = j->k->sumsq_block(j->t, (const char *)j->xs[i] + (size_t)off * j->es, len);
		g++;
	}
}

dg_status dg_sumsq(dg_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count, double *per,
		   double *total)
{
	if (ctx == NULL || total == NULL)
		return DG_ERR_INVALID;
	if (!dg_is_float(t))
		return DG_ERR_DTYPE;
	int64_t nelem;
	dg_status st = dg_check_list(xs, ns, count, &nelem);
	if (st != DG_OK)
		return st;
	int64_t nblocks = 0;
	for (int i = 0; i < count; i++)
		nblocks += blocks_of(ns[i]);

	double stack_partials[STACK_PARTIALS];
	int held = ctx->pool != NULL && nelem >= DG_INLINE_ELEMS && dg_pool_try_acquire(ctx->pool);
	sumsq_job j = {ctx->k, t, dg_dtype_size(t), xs, ns, count, 0, held ? ctx->partials : stack_partials};
	int64_t cap = held ? DG_PARTIALS : STACK_PARTIALS;

	/* the serial fold walks (tensor i, block k) in order across windows */
	double sum = 0, cur = 0;
	int i = 0;
	int64_t k = 0;
	for (int64_t g0 = 0; g0 < nblocks; g0 += cap) {
		int64_t w = nblocks - g0 < cap ? nblocks - g0 : cap;
		j.g0 = g0;
		if (held)
			dg_pool_run(ctx->pool, w, 1, sumsq_task, &j);
		else
			sumsq_task(&j, 0, w);
		for (int64_t b = 0; b < w; b++) {
			while (k >= blocks_of(ns[i])) { /* finish tensors, empty ones included */
				if (per != NULL)
					per[i] = cur;
				sum += cur;
				cur = 0;
				k = 0;
				i++;
			}
			cur += j.partials[b];
			k++;
		}
	}
	if (held)
		dg_pool_release(ctx->pool);
	for (; i < count; i++, cur = 0) {
		if (per != NULL)
			per[i] = cur;
		sum += cur;
	}
	*total = sum;
	return DG_OK;
}

typedef struct nonfinite_job {
	const dg_kernels *k;
	dg_dtype t;
	size_t es;
	const void *const *xs;
	const int64_t *ns;
	int count;
	int found; /* atomic */
} nonfinite_job;

static int nonfinite_run(const void *v, int i, int64_t off, int64_t len)
{
	const nonfinite_job *j = v;
	return j->k->nonfinite(j->t, (const char *)j->xs[i] + (size_t)off * j->es, len);
}

static void nonfinite_task(void *v, int64_t lo, int64_t hi)
{
	nonfinite_job *j = v;
	if (dg_list_run(j->ns, j->count, lo, hi, nonfinite_run, j))
		__atomic_store_n(&j->found, 1, __ATOMIC_RELAXED);
}

dg_status dg_nonfinite(dg_ctx *ctx, dg_dtype t, const void *const *xs, const int64_t *ns, int count, int *found)
{
	if (ctx == NULL || found == NULL)
		return DG_ERR_INVALID;
	if (!dg_is_float(t))
		return DG_ERR_DTYPE;
	int64_t total;
	dg_status st = dg_check_list(xs, ns, count, &total);
	if (st != DG_OK)
		return st;
	nonfinite_job j = {ctx->k, t, dg_dtype_size(t), xs, ns, count, 0};
	dg_parallel_for(ctx, total, DG_GRAIN, total, nonfinite_task, &j);
	*found = __atomic_load_n(&j.found, __ATOMIC_RELAXED);
	return DG_OK;
}

typedef struct bcast_job {
	const dg_kernels *k;
	dg_dtype t;
	dg_redop op;
	const void *const *srcs;
	int nsrc;
	void *const *dsts;
	int ndst;
	float scale;
} bcast_job;

/* Integers wrap in two's complement (computed unsigned: signed overflow
 * would be undefined in C). Each element reads every source before any dst
 * is written, which is what makes a dst equal to a source safe. */
#define INT_BCAST(T, UT)                                                                                            \
	do {                                                                                                        \
		const T *const *s = (const T *const *)j->srcs;                                                      \
		T *const *d = (T *const *)j->dsts;                                                                  \
		for (int64_t e = lo; e < hi; e++) {                                                                 \
			T acc = s[0][e];                                                                            \
			for (int q = 1; q < j->nsrc; q++) {                                                         \
				T v = s[q][e];                                                                      \
				if (j->op == DG_SUM)                                                                \
					acc = (T)((UT)acc + (UT)v);                                                 \
				else if (j->op == DG_MAX)                                                           \
					acc = v > acc ? v : acc;                                                    \
				else                                                                                \
					acc = v < acc ? v : acc;                                                    \
			}                                                                                           \
			for (int q = 0; q < j->ndst; q++)                                                           \
				d[q][e] = acc;                                                                      \
		}                                                                                                   \
	} while (0)

static void bcast_task(void *v, int64_t lo, int64_t hi)
{
	const bcast_job *j = v;
	if (j->t == DG_I32)
		INT_BCAST(int32_t, uint32_t);
	else if (j->t == DG_I64)
		INT_BCAST(int64_t, uint64_t);
	else
		j->k->reduce_bcast(j->t, j->op, j->srcs, j->nsrc, j->dsts, j->ndst, lo, hi, j->scale);
}

dg_status dg_reduce_bcast(dg_ctx *ctx, dg_dtype t, dg_redop op, const void *const *srcs, int nsrc,
			  void *const *dsts, int ndst, int64_t n, float scale)
{
	if (ctx == NULL || n < 0 || nsrc < 0 || ndst < 0 || (op != DG_SUM && op != DG_MAX && op != DG_MIN))
		return DG_ERR_INVALID;
	if (!dg_is_float(t) && t != DG_I32 && t != DG_I64)
		return DG_ERR_DTYPE;
	if (!dg_is_float(t) && scale != 1.0f)
		return DG_ERR_DTYPE;
	if (n == 0)
		return DG_OK;
	if (nsrc == 0 || ndst == 0 || srcs == NULL || dsts == NULL)
		return DG_ERR_INVALID;
	for (int q = 0; q < nsrc; q++)
		if (srcs[q] == NULL)
			return DG_ERR_INVALID;
	for (int q = 0; q < ndst; q++)
		if (dsts[q] == NULL)
			return DG_ERR_INVALID;
	bcast_job j = {ctx->k, t, op, srcs, nsrc, dsts, ndst, scale};
	int64_t per = (int64_t)nsrc + ndst;
	int64_t work = n > INT64_MAX / per ? INT64_MAX : n * per;
	dg_parallel_for(ctx, n, DG_GRAIN, work, bcast_task, &j);
	return DG_OK;
}

/* dg_reduce_into is the one-destination case: the same pass, the same bits. */
dg_status dg_reduce_into(dg_ctx *ctx, dg_dtype t, dg_redop op, const void *const *srcs, int nsrc, void *dst,
			 int64_t n)
{
	void *dsts[1] = {dst};
	return dg_reduce_bcast(ctx, t, op, srcs, nsrc, dsts, 1, n, 1.0f);
}
