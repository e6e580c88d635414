/* test_ctx.c — contexts, the pool (inline when busy, its balance counts),
 * dg_alloc, names. */
#include <pthread.h>

#include "dg_internal.h"
#include "test_util.h"

typedef struct racer {
	dg_ctx *ctx;
	float *x;
	int64_t n;
	double want;
	int bad;
} racer;

/* hammers one ctx from its own thread; every answer must equal the answer
 * computed alone, whichever thread ended up doing the work */
static void *race(void *v)
{
	racer *r = v;
	const void *xs[1] = {r->x};
	for (int it = 0; it < 200; it++) {
		double total;
		if (dg_sumsq(r->ctx, DG_F32, xs, &r->n, 1, NULL, &total) != DG_OK ||
		    memcmp(&total, &r->want, sizeof total) != 0)
			r->bad++;
		int found = -1;
		if (dg_nonfinite(r->ctx, DG_F32, xs, &r->n, 1, &found) != DG_OK || found != 0)
			r->bad++;
	}
	return NULL;
}

/* race_with_spin runs two, then four, racers on one 2-thread ctx whose
 * spin is spin ns (-1: the default) */
static void race_with_spin(float *x, int64_t n, int64_t spin)
{
	dg_ctx *ctx = NULL;
	const void *xs[1] = {x};
	CHECK_OK(dg_ctx_create(1, &ctx));
	if (spin >= 0)
		CHECK_OK(dg_ctx_set_spin(ctx, spin));
	CHECK_OK(dg_ctx_set_threads(ctx, 2));
	double want;
	CHECK_OK(dg_sumsq(ctx, DG_F32, xs, &n, 1, NULL, &want));
	for (int nr = 2; nr <= 4; nr += 2) {
		racer r[4];
		pthread_t th[4];
		for (int i = 0; i < nr; i++) {
			r[i] = (racer){ctx, x, n, want, 0};
			pthread_create(&th[i], NULL, race, &r[i]);
		}
		for (int i = 0; i < nr; i++) {
			pthread_join(th[i], NULL);
			CHECK(r[i].bad == 0);
		}
	}
	dg_ctx_destroy(ctx);
}

/* steal_job: each region adds 1 to every element of its range and counts
 * the parts the calling thread ran itself */
typedef struct steal_job {
	int *hits;
	pthread_t owner;
	int owner_parts; /* atomic */
} steal_job;

static void steal_task(void *arg, int64_t lo, int64_t hi)
{
	steal_job *j = arg;
	for (int64_t i = lo; i < hi; i++)
		__atomic_add_fetch(&j->hits[i], 1, __ATOMIC_RELAXED);
	if (pthread_equal(pthread_self(), j->owner))
		__atomic_add_fetch(&j->owner_parts, 1, __ATOMIC_RELAXED);
}

/* check_steal: workers that sleep between regions (spin 0) start late, and
 * the owner runs the parts they have not claimed once its own is done:
 * every element is still done exactly once per region, and the owner did
 * take parts beyond its own (its 64-element part ends long before a
 * sleeping worker wakes; the work passed is large enough for the pool) */
static void check_steal(void)
{
	enum { N = 256, REGIONS = 2000 };
	dg_ctx *ctx = NULL;
	CHECK_OK(dg_ctx_create(4, &ctx));
	CHECK_OK(dg_ctx_set_spin(ctx, 0));
	steal_job j = {calloc(N, sizeof(int)), pthread_self(), 0};
	int regions_stolen = 0, bad = 0;
	for (int r = 0; r < REGIONS; r++) {
		j.owner_parts = 0;
		dg_parallel_for(ctx, N, N / 4, DG_INLINE_ELEMS, steal_task, &j);
		regions_stolen += j.owner_parts > 1;
		for (int64_t i = 0; i < N; i++)
			bad += j.hits[i] != r + 1;
	}
	CHECK(bad == 0);
	CHECK(regions_stolen > 0);
	printf("check_steal: the owner ran others' parts in %d of %d regions\n", regions_stolen, REGIONS);
	free(j.hits);
	dg_ctx_destroy(ctx);
}

/* check_balance: one thread has no pool and counts nothing; on two every
 * region (here a sum of squares each) is counted, with its two parts' time
 * in busy and idle no more than the parts' time; reset zeroes the counts */
static void check_balance(float *x, int64_t n)
{
	dg_ctx *ctx = NULL;
	const void *xs[1] = {x};
	int64_t regions = -1, busy = -1, idle = -1;
	double total;
	CHECK_OK(dg_ctx_create(1, &ctx));
	CHECK(dg_ctx_pool_balance(NULL, 0, &regions, &busy, &idle) == DG_ERR_INVALID);
	CHECK(dg_ctx_pool_balance(ctx, 0, NULL, &busy, &idle) == DG_ERR_INVALID);
	CHECK_OK(dg_sumsq(ctx, DG_F32, xs, &n, 1, NULL, &total));
	CHECK_OK(dg_ctx_pool_balance(ctx, 0, &regions, &busy, &idle));
	CHECK(regions == 0 && busy == 0 && idle == 0);
	CHECK_OK(dg_ctx_set_threads(ctx, 2));
	for (int i = 0; i < 5; i++)
		CHECK_OK(dg_sumsq(ctx, DG_F32, xs, &n, 1, NULL, &total));
	CHECK_OK(dg_ctx_pool_balance(ctx, 1, &regions, &busy, &idle));
	CHECK(regions == 5 && busy > 0 && idle >= 0 && idle <= busy);
	CHECK_OK(dg_ctx_pool_balance(ctx, 0, &regions, &busy, &idle));
	CHECK(regions == 0 && busy == 0 && idle == 0);
	dg_ctx_destroy(ctx);
}

/* scratch: a freed block in the stash's range comes back for a request it
 * holds (the smallest that fits), a larger request gets a new block, the
 * accounting counts what was asked, and every block is written end to end
 * (ASan checks the sizes) */
static void check_scratch_stash(void)
{
	dg_ctx *ctx = NULL;
	CHECK_OK(dg_ctx_create(1, &ctx));
	int64_t peak = -1;
	CHECK_OK(dg_ctx_scratch_peak(ctx, 1, &peak));
	const size_t big = DG_STASH_MIN * 4, small = DG_STASH_MIN * 2;
	char *a = dg_scratch_alloc(ctx, big), *b = dg_scratch_alloc(ctx, small);
	CHECK(a != NULL && b != NULL);
	memset(a, 1, big), memset(b, 2, small);
	CHECK_OK(dg_ctx_scratch_peak(ctx, 0, &peak));
	CHECK(peak == (int64_t)(big + small));
	dg_scratch_free(ctx, a, big);
	dg_scratch_free(ctx, b, small);
	char *c = dg_scratch_alloc(ctx, small - 100); /* the smaller kept block */
	CHECK(c == b);
	char *d = dg_scratch_alloc(ctx, big + 1); /* none holds it */
	CHECK(d != NULL && d != a);
	memset(c, 3, small - 100), memset(d, 4, big + 1);
	char *e = dg_scratch_alloc(ctx, 16); /* below the stash: plain malloc */
	CHECK(e != NULL);
	dg_scratch_free(ctx, c, small - 100);
	dg_scratch_free(ctx, d, big + 1);
	dg_scratch_free(ctx, e, 16);
	CHECK_OK(dg_ctx_scratch_peak(ctx, 1, &peak)); /* restarts from what is live: none */
	CHECK_OK(dg_ctx_scratch_peak(ctx, 0, &peak));
	CHECK(peak == 0);
	dg_ctx_destroy(ctx); /* frees the kept blocks (ASan: no leak) */
}

int main(void)
{
	dg_ctx *ctx = NULL;
	CHECK(dg_ctx_create(1, NULL) == DG_ERR_INVALID);
	check_scratch_stash();
	CHECK_OK(dg_ctx_create(0, &ctx));
	CHECK(dg_ctx_threads(ctx) >= 1);
	CHECK(dg_ctx_isa(ctx) == dg_cpu_best_isa());
	CHECK_OK(dg_ctx_set_threads(ctx, 5));
	CHECK(dg_ctx_threads(ctx) == 5);
	CHECK_OK(dg_ctx_set_threads(ctx, 1));
	CHECK(dg_ctx_threads(ctx) == 1);
	CHECK(dg_ctx_set_threads(NULL, 1) == DG_ERR_INVALID);
	CHECK(dg_ctx_threads(NULL) == 0);
	CHECK_OK(dg_ctx_set_isa(ctx, DG_ISA_SCALAR));
	CHECK(dg_ctx_isa(ctx) == DG_ISA_SCALAR);
	CHECK_OK(dg_ctx_set_isa(ctx, DG_ISA_AUTO));
	CHECK(dg_ctx_isa(ctx) == dg_cpu_best_isa());
	CHECK(dg_ctx_set_isa(ctx, (dg_isa)17) == DG_ERR_INVALID);
	if (dg_cpu_best_isa() < DG_ISA_AVX512)
		CHECK(dg_ctx_set_isa(ctx, DG_ISA_AVX512) == DG_ERR_UNSUPPORTED);
	CHECK(dg_ctx_set_isa(NULL, DG_ISA_AUTO) == DG_ERR_INVALID);
	CHECK(dg_ctx_set_spin(NULL, 0) == DG_ERR_INVALID);
	CHECK(dg_ctx_set_spin(ctx, -1) == DG_ERR_INVALID);
	CHECK(dg_ctx_set_spin(ctx, 1000000001) == DG_ERR_INVALID);
	CHECK_OK(dg_ctx_set_spin(ctx, 1000000000));
	CHECK_OK(dg_ctx_set_spin(ctx, 0));
	dg_ctx_destroy(ctx);
	dg_ctx_destroy(NULL);

	/* alloc */
	void *p = NULL, *q = NULL;
	CHECK(dg_alloc(10, 32, 0, &p) == DG_ERR_ALIGN);
	CHECK(dg_alloc(10, 96, 0, &p) == DG_ERR_ALIGN);
	CHECK(dg_alloc(10, 0, 0, &p) == DG_ERR_ALIGN);
	CHECK(dg_alloc(10, 64, 0, NULL) == DG_ERR_INVALID);
	CHECK_OK(dg_alloc(0, 64, 0, &p));
	CHECK_OK(dg_alloc(0, 64, 0, &q));
	CHECK(p != NULL && q != NULL && p != q);
	dg_free(p);
	dg_free(q);
	CHECK_OK(dg_alloc(100000, 4096, 0, &p));
	CHECK(((uintptr_t)p & 4095) == 0);
	for (int i = 0; i < 100000; i++)
		CHECK_OK(((unsigned char *)p)[i] == 0 ? DG_OK : DG_ERR_INTERNAL);
	dg_free(p);
	dg_free(NULL);
	CHECK(dg_alloc((size_t)-1 / 2, 64, 0, &p) == DG_ERR_NOMEM);
	CHECK(p == NULL);
	CHECK(dg_alloc(10, 64, 2, &p) == DG_ERR_INVALID && p == NULL);
	/* huge: 2 MiB and more start on a 2 MiB boundary, zeroed; smaller ones
	 * keep the alignment asked for and are not advised */
	size_t hb = ((size_t)3 << 20) + 100;
	CHECK_OK(dg_alloc(hb, 64, DG_ALLOC_HUGE, &p));
	CHECK(((uintptr_t)p & (((uintptr_t)2 << 20) - 1)) == 0);
	for (size_t i = 0; i < hb; i += 4093)
		CHECK_OK(((unsigned char *)p)[i] == 0 ? DG_OK : DG_ERR_INTERNAL);
	CHECK(((unsigned char *)p)[hb - 1] == 0);
	dg_free(p);
	CHECK_OK(dg_alloc(1000, 4096, DG_ALLOC_HUGE, &p));
	CHECK(((uintptr_t)p & 4095) == 0 && ((unsigned char *)p)[999] == 0);
	dg_free(p);

	/* the vendor's prefetch choices (dg_internal.h) reach the loops: a
	 * DG_HAVE_X86 tested before its definition once made AMD take Intel's */
#if DG_HAVE_X86 && !defined(DG_OPTIM_PREFETCH)
	CHECK(dg_optim_prefetch() == (__builtin_cpu_is("amd") ? 512 : 2048));
#endif
#if DG_HAVE_X86 && !defined(DG_STREAM_PREFETCH)
	CHECK(dg_stream_prefetch() == !__builtin_cpu_is("amd"));
#endif

	/* names and sizes */
	CHECK(strcmp(dg_strerror(DG_OK), "ok") == 0);
	for (int s = 0; s <= 9; s++)
		CHECK(dg_strerror((dg_status)s) != NULL && strcmp(dg_strerror((dg_status)s), "unknown status") != 0);
	CHECK(strcmp(dg_strerror((dg_status)99), "unknown status") == 0);
	CHECK(dg_dtype_size(DG_F32) == 4 && dg_dtype_size(DG_F16) == 2 && dg_dtype_size(DG_BF16) == 2);
	CHECK(dg_dtype_size(DG_I32) == 4 && dg_dtype_size(DG_I64) == 8 && dg_dtype_size(DG_U8) == 1);
	CHECK(dg_dtype_size(DG_BOOL) == 1 && dg_dtype_size(DG_F64) == 8 && dg_dtype_size((dg_dtype)99) == 0);

	/* two (then four) threads share one ctx: the loser of the pool runs
	 * inline; answers are identical to a lone call, whether the pool's
	 * threads sleep at once, spin by default, or spin long (set before the
	 * pool is resized, which keeps it) */
	int64_t n = 3 * 65536 + 5;
	float *x = malloc((size_t)n * 4);
	uint64_t seed = 9;
	for (int64_t i = 0; i < n; i++)
		x[i] = rng_float(&seed);
	const int64_t spins[] = {-1, 0, 2000000};
	for (int sp = 0; sp < 3; sp++)
		race_with_spin(x, n, spins[sp]);
	check_balance(x, n);
	check_steal();
	free(x);
	return test_done("test_ctx");
}
