/* blas_core.c — chooses the sgemm of the nn products (OpenBLAS, or Intel
 * MKL loaded at run time when DEEPGO_BLAS asks: deepgo.h, "BLAS") and makes
 * OpenBLAS run the kernels this CPU supports.
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
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "dg_internal.h"

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

/* ---- the sgemm in use ----
 * OpenBLAS is linked; MKL is loaded at run time (like cuBLAS), so a build
 * needs no MKL and the choice is the user's (DEEPGO_BLAS, deepgo.h). Both
 * take the standard CBLAS enums and 32-bit ints (MKL's LP64 layer). */
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
			 const float *b, int ldb, float beta, float *c, int ldc);

static void openblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
			   const float *b, int ldb, float beta, float *c, int ldc)
{
	cblas_sgemm((enum CBLAS_ORDER)order, (enum CBLAS_TRANSPOSE)ta, (enum CBLAS_TRANSPOSE)tb, m, n, k, alpha, a, lda,
		    b, ldb, beta, c, ldc);
}

/* set once by setup, before any product (every caller runs dg_blas_init) */
static sgemm_fn sgemm_impl = openblas_sgemm;

void dg_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
	      int ldb, float beta, float *c, int ldc)
{
	sgemm_impl(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* MKL's service calls, by their mkl_service.h values */
#define MKL_THREADING_SEQUENTIAL 1
#define MKL_INTERFACE_LP64 0
#define MKL_CBWR_AUTO 2
#define MKL_CBWR_SUCCESS 0

#define BLAS_ALLOWED "allowed: unset or openblas, mkl, or the path of libmkl_rt"

/* load_mkl opens want ("mkl": libmkl_rt from the loader's search path, else
 * a file) and makes it the sgemm in use, sequential and reproducible; on
 * failure it says why in info.error and OpenBLAS stays. */
static void load_mkl(const char *want)
{
	static const char *const names[] = {"libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"};
	void *h = NULL;
	const char *err = "";
	if (strcasecmp(want, "mkl") == 0) {
		for (size_t i = 0; h == NULL && i < sizeof names / sizeof names[0]; i++)
			if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) == NULL)
				err = dlerror();
	} else if ((h = dlopen(want, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		err = dlerror();
	}
	if (h == NULL) {
		snprintf(info.error, sizeof info.error, "DEEPGO_BLAS=%s: cannot load MKL: %s (" BLAS_ALLOWED ")", want,
			 err ? err : "");
		return;
	}
	/* the order matters: MKL fixes its layers at its first other call */
	int (*interface)(int) = (int (*)(int))dlsym(h, "MKL_Set_Interface_Layer");
	int (*threading)(int) = (int (*)(int))dlsym(h, "MKL_Set_Threading_Layer");
	int (*cbwr)(int) = (int (*)(int))dlsym(h, "MKL_CBWR_Set");
	void (*version)(char *, int) = (void (*)(char *, int))dlsym(h, "MKL_Get_Version_String");
	sgemm_fn sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
	if (interface == NULL || threading == NULL || cbwr == NULL || version == NULL || sgemm == NULL) {
		snprintf(info.error, sizeof info.error,
			 "DEEPGO_BLAS=%s: not Intel MKL's runtime library (libmkl_rt): it lacks MKL_Set_Threading_Layer, "
			 "MKL_CBWR_Set or cblas_sgemm (" BLAS_ALLOWED ")",
			 want);
		dlclose(h);
		return;
	}
	interface(MKL_INTERFACE_LP64);
	if (threading(MKL_THREADING_SEQUENTIAL) != MKL_THREADING_SEQUENTIAL || cbwr(MKL_CBWR_AUTO) != MKL_CBWR_SUCCESS) {
		snprintf(info.error, sizeof info.error,
			 "DEEPGO_BLAS=%s: MKL refused its sequential threading layer or MKL_CBWR_AUTO", want);
		return; /* MKL stays loaded: its layers may be half set */
	}
	version(info.library, (int)sizeof info.library);
	info.library[sizeof info.library - 1] = '\0';
	sgemm_impl = sgemm;
}

/* set once by setup: the Linear products on nn_gemm.c */
static int linear_own;

/* decide_linear: whether the Linear layer's float32 products (forward,
 * input and weight gradients) leave the BLAS for nn_gemm.c. Only where
 * that was measured faster (an Intel Xeon with AVX-512, against OpenBLAS
 * 0.3.21's Cooperlake kernels: docs/design.md), and never when the user
 * chose the BLAS by name: DEEPGO_BLAS=openblas or MKL keeps every product
 * on it. */
static void decide_linear(const char *blas)
{
	const char *why = NULL;
	if (sgemm_impl != openblas_sgemm)
		why = "DEEPGO_BLAS chose MKL";
	else if (blas != NULL && strcasecmp(blas, "openblas") == 0)
		why = "DEEPGO_BLAS=openblas";
#if DG_HAVE_X86
	/* nn_gemm.c is built for DG_TARGET_AVX512, the set dg_cpu_best_isa checks */
	if (why == NULL && dg_cpu_best_isa() != DG_ISA_AVX512)
		why = "the CPU has no AVX-512";
	else if (why == NULL && !__builtin_cpu_is("intel"))
		why = "not an Intel CPU (measured on Intel only)";
#else
	if (why == NULL)
		why = "not an x86 CPU";
#endif
	linear_own = why == NULL;
	if (linear_own)
		snprintf(info.linear, sizeof info.linear, "deepgo AVX-512 (nn_gemm.c)");
	else
		snprintf(info.linear, sizeof info.linear, "the BLAS: %s", why);
}

int dg_blas_linear_own(void)
{
	dg_blas_init();
	return linear_own;
}

static void copy_name(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

static void setup(void)
{
	copy_name(info.library, sizeof info.library, "OpenBLAS");
	const char *blas = getenv("DEEPGO_BLAS");
	if (blas != NULL && *blas != '\0' && strcasecmp(blas, "openblas") != 0)
		load_mkl(blas);
	decide_linear(blas);
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
	dg_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f, c,
		 (int)n);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int64_t r = 0; r < reps; r++)
		dg_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n,
			 0.0f, c, (int)n);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	free(a);
	*seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	return DG_OK;
}
