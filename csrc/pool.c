/*
 * pool.c — a persistent pool of nthreads-1 workers plus the calling thread.
 *
 * One parallel region at a time: the region's owner holds `run` (taken with
 * trylock so a concurrent caller falls back to inline work instead of
 * waiting). A region is published by bumping `gen` under `mu`; workers spin
 * on gen before sleeping on `wake`, and the owner runs part 0 itself and
 * waits for `pending` to drain the same way.
 *
 * How long to spin: a GPT step (bench-train's, two threads) runs about 170
 * regions; half the gaps between two of them are 10-100 us of Go code and
 * none was over 500 us (a histogram of 2,200 gaps). Spinning 256 PAUSEs
 * (~5 us here) let the worker fall asleep in most gaps (the process made
 * ~1,300 futex calls a step, ~440 with a long spin) and the step ran 5-7%
 * slower than with a spin of 100-3000 us (medians of 10 interleaved pairs;
 * no difference within that range, nor 2 or 5 ms). A pool used now and
 * then (a collective's reductions) should not spin that long after each
 * call, taking a core from the pool that is computing: so a worker spins
 * the long budget only when the pool's last gap between regions was within
 * it, and a few microseconds otherwise.
 *
 * A late thread: a worker claims its part (claim[id], tagged with the
 * region's gen) before running it, and the owner, once its own part is
 * done, claims and runs every part still unclaimed. When the OS has not
 * run a worker by then (on a 2-vCPU VM the Go runtime's background work
 * can hold the other CPU for tens of ms, and a woken worker then starts
 * ~1 ms late on every region), the region ends in the owner's time for
 * both parts instead of waiting for it. Parts keep their ranges whoever
 * runs them, so results do not depend on it; a worker that is merely slow
 * once started is still waited for.
 *
 * Balance: every part's wall time is recorded, and per region the owner adds
 * up how long each thread's part fell short of the slowest one
 * (dg_pool_stats). Equal work over threads that run at unequal speeds (a
 * shared machine's cores) shows up there and in no kernel's own time. A
 * worker that started late shows up in neither: its part either ran on
 * time once started or was run by the owner (no wait is counted then).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include <stdlib.h>
#include <time.h>

#include "dg_internal.h"

/* the spin after a region that came soon after the one before */
#define SPIN_NS_DEFAULT ((int64_t)500000)
/* the spin otherwise: catches a tight loop of calls (the old fixed spin) */
#define SPIN_NS_SHORT ((int64_t)5000)
/* PAUSEs between two clock reads: a read costs ~20 ns, a PAUSE 10-140
 * cycles, so reading stays a small part of the spin */
#define SPIN_CHECK_EVERY 64

struct dg_pool {
	pthread_mutex_t run;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	pthread_cond_t done;
	uint64_t gen;  /* written under mu, polled atomically */
	int stop;      /* under mu */
	int pending;   /* atomic: parts not yet finished by workers */
	/* the current region, written under mu before gen is bumped */
	dg_task_fn fn;
	void *arg;
	int64_t n, grain;
	int nparts;
	int nworkers;
	int64_t spin_ns;  /* the long budget (atomic; dg_pool_set_spin) */
	int64_t spin_now; /* this region's worker spin (atomic; set at publish) */
	int64_t last_end; /* CLOCK_MONOTONIC ns when the last region ended; owner only */
	int64_t *part_ns; /* nworkers + 1: the current region's part wall times */
	uint64_t *claim;  /* nworkers + 1 (atomic): the gen of the region that last claimed each part */
	/* balance counters (owner only; read with dg_pool_stats) */
	int64_t st_regions, st_busy_ns, st_idle_ns;
	pthread_t *threads;
};

typedef struct worker_arg {
	dg_pool *p;
	int id; /* part index, 1 .. nworkers */
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int gen_moved(dg_pool *p, uint64_t seen) { return __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) != seen; }

static int parts_done(dg_pool *p, uint64_t unused)
{
	(void)unused;
	return __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) == 0;
}

/* spin_until spins until done(p, arg), for at most ns */
static void spin_until(dg_pool *p, int (*done)(dg_pool *, uint64_t), uint64_t arg, int64_t ns)
{
	if (ns <= 0)
		return;
	int64_t deadline = -1;
	for (int s = 1; !done(p, arg); s++) {
		if (s % SPIN_CHECK_EVERY == 0) {
			int64_t t = mono_ns();
			if (deadline < 0)
				deadline = t + ns;
			else if (t >= deadline)
				return;
		}
		cpu_relax();
	}
}

/* part_range gives part `part` of nparts over [0, n) cut at multiples of grain;
 * written to avoid overflowing units*part for huge n. */
static void part_range(int64_t n, int64_t grain, int nparts, int part, int64_t *lo, int64_t *hi)
{
	int64_t units = n / grain + (n % grain != 0);
	int64_t q = units / nparts, r = units % nparts;
	int64_t ulo = q * part + (r * part) / nparts;
	int64_t uhi = q * (part + 1) + (r * (part + 1)) / nparts;
	*lo = ulo * grain < n ? ulo * grain : n;
	*hi = uhi * grain < n ? uhi * grain : n;
}

/* claim_part takes part `part` of region gen for the caller; 0 when the
 * owner or its worker already has. Claims only grow (regions run one at a
 * time), so a worker that wakes late with an old gen cannot take a part
 * of a newer region. */
static int claim_part(dg_pool *p, int part, uint64_t gen)
{
	uint64_t c = __atomic_load_n(&p->claim[part], __ATOMIC_RELAXED);
	while (c < gen)
		if (__atomic_compare_exchange_n(&p->claim[part], &c, gen, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return 1;
	return 0;
}

/* run_part runs part `part` of the region, records its wall time, and
 * counts it done (the owner's own part 0 is not counted in pending) */
static void run_part(dg_pool *p, dg_task_fn fn, void *arg, int64_t n, int64_t grain, int nparts, int part)
{
	int64_t lo, hi;
	part_range(n, grain, nparts, part, &lo, &hi);
	const int64_t t0 = mono_ns();
	if (lo < hi)
		fn(arg, lo, hi);
	/* published by the release below, read after the owner's acquire */
	p->part_ns[part] = mono_ns() - t0;
	if (part > 0 && __atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL) == 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_signal(&p->done);
		pthread_mutex_unlock(&p->mu);
	}
}

static void *worker_main(void *v)
{
	worker_arg *wa = v;
	dg_pool *p = wa->p;
	int id = wa->id;
	uint64_t seen = 0;
	for (;;) {
		spin_until(p, gen_moved, seen, __atomic_load_n(&p->spin_now, __ATOMIC_RELAXED));
		pthread_mutex_lock(&p->mu);
		while (p->gen == seen && !p->stop)
			pthread_cond_wait(&p->wake, &p->mu);
		if (p->stop) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		seen = p->gen;
		dg_task_fn fn = p->fn;
		void *arg = p->arg;
		int64_t n = p->n, grain = p->grain;
		int nparts = p->nparts;
		pthread_mutex_unlock(&p->mu);
		/* A worker that slept through a region may see a later one, or find
		 * its part claimed by the owner; that is fine because the owner only
		 * moves on once every part has finished, and each part is claimed
		 * once, so no part is ever skipped or run twice. */
		if (id < nparts && claim_part(p, id, seen))
			run_part(p, fn, arg, n, grain, nparts, id);
	}
	free(wa);
	return NULL;
}

static void stop_workers(dg_pool *p, int started)
{
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < started; i++)
		pthread_join(p->threads[i], NULL);
}

dg_status dg_pool_create(int nthreads, dg_pool **out)
{
	*out = NULL;
	dg_pool *p = calloc(1, sizeof *p);
	if (p == NULL)
		return DG_ERR_NOMEM;
	p->nworkers = nthreads - 1;
	p->spin_ns = SPIN_NS_DEFAULT;
	p->spin_now = SPIN_NS_SHORT;
	p->threads = calloc((size_t)(p->nworkers > 0 ? p->nworkers : 1), sizeof(pthread_t));
	p->part_ns = calloc((size_t)nthreads, sizeof(int64_t));
	p->claim = calloc((size_t)nthreads, sizeof(uint64_t));
	if (p->threads == NULL || p->part_ns == NULL || p->claim == NULL) {
		free(p->threads);
		free(p->part_ns);
		free(p->claim);
		free(p);
		return DG_ERR_NOMEM;
	}
	pthread_mutex_init(&p->run, NULL);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);
	for (int i = 0; i < p->nworkers; i++) {
		worker_arg *wa = malloc(sizeof *wa);
		if (wa != NULL) {
			wa->p = p;
			wa->id = i + 1;
		}
		if (wa == NULL || pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
			free(wa);
			p->nworkers = i;
			dg_pool_destroy(p);
			return DG_ERR_NOMEM;
		}
	}
	*out = p;
	return DG_OK;
}

void dg_pool_destroy(dg_pool *p)
{
	if (p == NULL)
		return;
	stop_workers(p, p->nworkers);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->mu);
	pthread_mutex_destroy(&p->run);
	free(p->threads);
	free(p->part_ns);
	free(p->claim);
	free(p);
}

int dg_pool_try_acquire(dg_pool *p) { return pthread_mutex_trylock(&p->run) == 0; }

void dg_pool_release(dg_pool *p) { pthread_mutex_unlock(&p->run); }

void dg_pool_run(dg_pool *p, int64_t n, int64_t grain, dg_task_fn fn, void *arg)
{
	if (n <= 0)
		return;
	if (grain < 1)
		grain = 1;
	int64_t units = n / grain + (n % grain != 0);
	int nparts = p->nworkers + 1;
	if (units < nparts)
		nparts = (int)units;
	if (nparts <= 1) {
		fn(arg, 0, n);
		return;
	}
	const int64_t start = mono_ns(), budget = __atomic_load_n(&p->spin_ns, __ATOMIC_RELAXED);
	const int64_t spin = p->last_end > 0 && start - p->last_end <= budget ? budget : SPIN_NS_SHORT;
	__atomic_store_n(&p->spin_now, spin < budget ? spin : budget, __ATOMIC_RELAXED);
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->n = n;
	p->grain = grain;
	p->nparts = nparts;
	__atomic_store_n(&p->pending, nparts - 1, __ATOMIC_RELAXED);
	__atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);

	const uint64_t gen = p->gen; /* only the owner writes gen */
	run_part(p, fn, arg, n, grain, nparts, 0);
	for (int part = 1; part < nparts; part++)
		if (claim_part(p, part, gen))
			run_part(p, fn, arg, n, grain, nparts, part);

	spin_until(p, parts_done, 0, __atomic_load_n(&p->spin_ns, __ATOMIC_RELAXED));
	if (__atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) != 0) {
		pthread_mutex_lock(&p->mu);
		while (__atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) != 0)
			pthread_cond_wait(&p->done, &p->mu);
		pthread_mutex_unlock(&p->mu);
	}
	p->last_end = mono_ns();
	int64_t slowest = 0, sum = 0;
	for (int i = 0; i < nparts; i++) {
		sum += p->part_ns[i];
		slowest = p->part_ns[i] > slowest ? p->part_ns[i] : slowest;
	}
	p->st_regions++;
	p->st_busy_ns += sum;
	p->st_idle_ns += slowest * nparts - sum;
}

void dg_pool_stats(dg_pool *p, int reset, int64_t *regions, int64_t *busy_ns, int64_t *idle_ns)
{
	*regions = p->st_regions;
	*busy_ns = p->st_busy_ns;
	*idle_ns = p->st_idle_ns;
	if (reset)
		p->st_regions = p->st_busy_ns = p->st_idle_ns = 0;
}

void dg_pool_set_spin(dg_pool *p, int64_t ns) { __atomic_store_n(&p->spin_ns, ns, __ATOMIC_RELAXED); }
