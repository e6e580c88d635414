/*
 * runtime.cu — gpucheck's rows for the glue around the kernels rather than
 * the kernels: the CUDA runtime's per-thread last error never carries a
 * handled error into a later call (cuda/dg_cuda_err.h), a grid over the
 * launch limit is refused instead of wrapping, and dg_cuda_malloc and
 * dg_cuda_free do not wait for other streams (cuda/alloc.cu). A failing row
 * prints what was seen.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpucheck.h"

/* the stream-blocking host function: sleeps for (intptr_t)arg ms */
static void CUDART_CB sleep_ms(void *arg) { usleep((useconds_t)((intptr_t)arg * 1000)); }

/* busy keeps stream s busy for ms milliseconds, as a long collective would */
static void busy(cudaStream_t s, int ms) { CK(cudaLaunchHostFunc(s, sleep_ms, (void *)(intptr_t)ms)); }

/* verdict prints a row whose difference column is a short text */
static void verdict(const char *what, const char *how, int ok, const char *seen)
{
	char d[48];
	snprintf(d, sizeof d, "%s", ok ? "ok" : seen);
	row(what, how, 1, d, ok, 0, 0);
}

static void check_last_error(gpu *g)
{
	cudaStream_t s = (cudaStream_t)dg_cuda_ctx_stream(g->ctx);
	float *x;
	CK(cudaMalloc(&x, 4096));
	CK(cudaMemset(x, 0, 4096));
	void *xs[1] = {x};
	int64_t ns[1] = {1024};
	char seen[48];

	/* an error another call left on this thread does not fail our launch */
	void *huge = NULL;
	cudaError_t e = cudaMalloc(&huge, (size_t)1 << 62); /* not cleared here, on purpose */
	dg_status st = dg_cuda_scale(g->ctx, DG_F32, xs, ns, 1, 2.0f);
	snprintf(seen, sizeof seen, "%s, then scale: %s", cudaGetErrorName(e), dg_strerror(st));
	verdict("lasterr", "stale", e != cudaSuccess && st == DG_OK, seen);
	(void)cudaGetLastError();

	/* a failure we return is not left behind: context-free and on a context */
	void *p = NULL;
	int cuerr = 0;
	st = dg_cuda_malloc(0, (size_t)1 << 62, &p, &cuerr);
	e = cudaPeekAtLastError();
	snprintf(seen, sizeof seen, "%s, then last %s", dg_strerror(st), cudaGetErrorName(e));
	verdict("lasterr", "malloc", st == DG_ERR_CUDA && e == cudaSuccess, seen);
	(void)cudaGetLastError();
	/* the scratch allocation for 2^40 queries fails before anything runs */
	st = dg_cuda_nn_attention_backward(g->ctx, x, x, x, x, 1, (int64_t)1 << 40, 1, 1, 0);
	e = cudaPeekAtLastError();
	snprintf(seen, sizeof seen, "%s, then last %s", dg_strerror(st), cudaGetErrorName(e));
	verdict("lasterr", "ctx", st == DG_ERR_CUDA && e == cudaSuccess, seen);
	(void)cudaGetLastError();

	/* cudaErrorNotReady from a query is an answer and is not left behind */
	busy(s, 300);
	int done = 1;
	st = dg_cuda_stream_query(0, s, &done, &cuerr);
	e = cudaPeekAtLastError();
	snprintf(seen, sizeof seen, "%s done %d, last %s", dg_strerror(st), done, cudaGetErrorName(e));
	verdict("lasterr", "streamq", st == DG_OK && done == 0 && e == cudaSuccess, seen);
	void *ev;
	DG(NULL, dg_cuda_event_create(0, &ev, NULL));
	DG(NULL, dg_cuda_event_record(0, ev, s, NULL));
	done = 1;
	st = dg_cuda_event_query(0, ev, &done, &cuerr);
	e = cudaPeekAtLastError();
	snprintf(seen, sizeof seen, "%s done %d, last %s", dg_strerror(st), done, cudaGetErrorName(e));
	verdict("lasterr", "eventq", st == DG_OK && done == 0 && e == cudaSuccess, seen);
	DG(NULL, dg_cuda_event_synchronize(0, ev, NULL));
	DG(NULL, dg_cuda_event_destroy(0, ev, NULL));
	(void)cudaGetLastError();
	CK(cudaFree(x));
}

/* 2^16 heads x 2^20 queries is 2^33 blocks of 8 warps: over the limit, and
 * refused before anything is read (the pointers are never touched) */
static void check_grid_limit(gpu *g)
{
	float *x;
	CK(cudaMalloc(&x, 16));
	dg_status st = dg_cuda_nn_attention_forward(g->ctx, x, x, x, 1, (int64_t)1 << 20, (int64_t)1 << 16, 1, 0);
	const char *msg = dg_cuda_ctx_error(g->ctx, NULL);
	verdict("grid", "2^33", st == DG_ERR_SIZE && strstr(msg, "grid") != NULL, msg);
	CK(cudaFree(x));
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* While the context's (blocking) stream is busy for 500 ms, as with a long
 * collective, dg_cuda_malloc returns zeroed memory and dg_cuda_free returns,
 * both well before the stream is free. The memory is dirtied and freed first,
 * so the pool likely hands the same block out again. */
static void check_malloc(gpu *g)
{
	cudaStream_t s = (cudaStream_t)dg_cuda_ctx_stream(g->ctx);
	const size_t bytes = (size_t)64 << 20;
	void *p = NULL;
	DG(NULL, dg_cuda_malloc(0, bytes, &p, NULL));
	CK(cudaMemset(p, 0xff, bytes));
	CK(cudaDeviceSynchronize());
	DG(NULL, dg_cuda_free(0, p, NULL));
	CK(cudaDeviceSynchronize()); /* the free has run */
	busy(s, 500);
	double t0 = now_ms();
	DG(NULL, dg_cuda_malloc(0, bytes, &p, NULL));
	double ms = now_ms() - t0;
	unsigned char *h = (unsigned char *)malloc(bytes);
	CK(cudaMemcpy(h, p, bytes, cudaMemcpyDeviceToHost)); /* waits for the busy stream */
	int64_t bad = 0;
	for (size_t i = 0; i < bytes; i++)
		bad += h[i] != 0;
	free(h);
	char d[48];
	snprintf(d, sizeof d, "%.1f ms, %lld not zero", ms, (long long)bad);
	row("malloc", "busy 500ms", (int64_t)bytes, d, ms < 250 && bad == 0, 0, 0);
	busy(s, 500);
	t0 = now_ms();
	DG(NULL, dg_cuda_free(0, p, NULL));
	ms = now_ms() - t0;
	snprintf(d, sizeof d, "%.1f ms", ms);
	row("free", "busy 500ms", (int64_t)bytes, d, ms < 250, 0, 0);
	CK(cudaDeviceSynchronize());
}

void check_runtime(gpu *g)
{
	printf("runtime glue\n");
	check_last_error(g);
	check_grid_limit(g);
	check_malloc(g);
}
