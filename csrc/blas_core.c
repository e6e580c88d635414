/* blas_core.c — makes OpenBLAS run the kernels this CPU supports.
 *
 * A DYNAMIC_ARCH OpenBLAS picks its kernels (its "core") from the CPU's
 * family and model when it loads. A release older than the CPU does not
 * know the model and falls back to generic SSE3 kernels ("Prescott"):
 * Debian's 0.3.21 on a recent Xeon runs sgemm ~6x slower than with its
 * Cooperlake kernels, which that same library has. OPENBLAS_CORETYPE
 * forces a core, but the library reads it in its load-time constructor,
 * before any code of ours runs. gotoblas_dynamic_quit/_init are the
 * library's own selection pair (exported by DYNAMIC_ARCH builds): they
 * only replace the kernel table, so running them once before the first
 * BLAS call, with the variable set, selects as a forced load would. They
 * are weak references: a build without them (a single-target OpenBLAS, the
 * gpucheck stand-in) keeps the library's choice and says so. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "deepgo.h"

extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));
extern char *openblas_get_config(void) __attribute__((weak));
extern int blas_thread_shutdown_(void) __attribute__((weak));

/* OpenBLAS x86-64 cores from least to most capable, as far as sgemm cares;
 * cores not listed (other architectures) rank -1 and are never replaced. */
static const char *const x86_cores[][2] = {
	{"prescott", "0"},    {"core2", "0"},	    {"penryn", "0"},   {"dunnington", "0"}, {"nehalem", "0"},
	{"atom", "0"},	      {"nano", "0"},	    {"barcelona", "0"}, {"opteron", "0"},   {"opteron_sse3", "0"},
	{"bobcat", "0"},      {"bulldozer", "1"},   {"piledriver", "1"}, {"steamroller", "1"}, {"excavator", "2"},
	{"sandybridge", "1"}, {"haswell", "2"},	    {"zen", "2"},	{"skylakex", "3"},  {"cooperlake", "4"},
	{"sapphirerapids", "4"},
};

static int core_rank(const char *name)
{
	if (name == NULL)
		return -1;
	for (size_t i = 0; i < sizeof x86_cores / sizeof x86_cores[0]; i++)
		if (strcasecmp(name, x86_cores[i][0]) == 0)
			return x86_cores[i][1][0] - '0';
	return -1;
}

/* cpu_core: the most capable core the CPU and the OS (saved AVX state)
 * support, by features rather than by model, so a CPU newer than the
 * library still gets its vector width. */
static const char *cpu_core(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		     __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
		     __builtin_cpu_supports("avx512cd");
	if (avx512 && __builtin_cpu_supports("avx512bf16"))
		return "Cooperlake";
	if (avx512)
		return "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "Haswell";
	if (__builtin_cpu_supports("avx"))
		return "SandyBridge";
#endif
	return "";
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static dg_blas_info info;

static void copy_name(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

static void setup(void)
{
	copy_name(info.config, sizeof info.config, openblas_get_config ? openblas_get_config() : "OpenBLAS (no openblas_get_config)");
	copy_name(info.library_core, sizeof info.library_core, openblas_get_corename ? openblas_get_corename() : "");
	copy_name(info.cpu_core, sizeof info.cpu_core, cpu_core());
	const char *policy = getenv("DEEPGO_BLAS_CORE");
	const char *want = NULL;
	if (policy != NULL && *policy != '\0' && strcasecmp(policy, "auto") != 0) {
		/* "library" keeps the library's choice; any other value is a core
		 * name forced as OPENBLAS_CORETYPE would force it */
		if (strcasecmp(policy, "library") != 0)
			want = policy;
		snprintf(info.reason, sizeof info.reason, "DEEPGO_BLAS_CORE=%s", policy);
	} else if (getenv("OPENBLAS_CORETYPE") != NULL) {
		snprintf(info.reason, sizeof info.reason, "OPENBLAS_CORETYPE set: the library's choice is kept");
	} else if (info.cpu_core[0] != '\0' && core_rank(info.library_core) >= 0 &&
		   core_rank(info.cpu_core) > core_rank(info.library_core)) {
		want = info.cpu_core;
		snprintf(info.reason, sizeof info.reason, "the library chose %s below the CPU's %s", info.library_core,
			 info.cpu_core);
	} else {
		snprintf(info.reason, sizeof info.reason, "the library's choice matches the CPU");
	}
	if (want != NULL) {
		if (gotoblas_dynamic_init == NULL || gotoblas_dynamic_quit == NULL) {
			snprintf(info.reason + strlen(info.reason), sizeof info.reason - strlen(info.reason),
				 "; not corrected: this OpenBLAS cannot reselect its core (not a DYNAMIC_ARCH build)");
		} else {
			/* the library reads the variable during selection only: keep
			 * the process environment as the user left it */
			char *saved = getenv("OPENBLAS_CORETYPE");
			char prev[64];
			copy_name(prev, sizeof prev, saved);
			setenv("OPENBLAS_CORETYPE", want, 1);
			gotoblas_dynamic_quit();
			gotoblas_dynamic_init();
			if (saved != NULL)
				setenv("OPENBLAS_CORETYPE", prev, 1);
			else
				unsetenv("OPENBLAS_CORETYPE");
		}
	}
	copy_name(info.core, sizeof info.core, openblas_get_corename ? openblas_get_corename() : "");
	info.corrected = strcasecmp(info.core, info.library_core) != 0;
	/* the ctx pool is the only source of parallelism, so two ranks sharing
	 * a machine never oversubscribe it and a 1-thread ctx really runs on
	 * one core: every pool thread runs its own single-threaded sgemm */
	openblas_set_num_threads(1);
	/* A pthreads OpenBLAS starts its own worker threads at load, and they
	 * spin (sched_yield) for ~100 ms before sleeping: in that window one of
	 * them shared a core with the pool and two-thread sgemms ran no faster
	 * than one. With one thread per call they never get work; end them
	 * (the library starts them again if anything asks it for threads). */
	if (blas_thread_shutdown_ != NULL)
		blas_thread_shutdown_();
}

void dg_blas_init(void) { pthread_once(&once, setup); }

dg_status dg_blas_get_info(dg_blas_info *out)
{
	if (out == NULL)
		return DG_ERR_INVALID;
	dg_blas_init();
	*out = info;
	return DG_OK;
}

dg_status dg_blas_sgemm_seconds(int64_t n, int64_t reps, double *seconds)
{
	if (n < 1 || n > 16384 || reps < 1 || seconds == NULL)
		return DG_ERR_INVALID;
	dg_blas_init();
	size_t e = (size_t)(n * n);
	float *a = malloc(3 * e * sizeof(float));
	if (a == NULL)
		return DG_ERR_NOMEM;
	float *b = a + e, *c = b + e;
	uint64_t s = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < 3 * e; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		a[i] = (float)(s >> 40) / (float)(1 << 24) - 0.5f;
	}
	/* one call to warm the caches and the library's buffers */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f, c,
		    (int)n);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int64_t r = 0; r < reps; r++)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n,
			    0.0f, c, (int)n);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	free(a);
	*seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	return DG_OK;
}
