/*
 * gpucheck.h — what gpucheck's files share: the exit-on-error macros, the
 * GPU side of a check (context and timing events) and the result table.
 */
#ifndef DG_GPUCHECK_H
#define DG_GPUCHECK_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "deepgo.h"
#include "deepgo_cuda.h"

/* CK exits (status 2) on a failed CUDA call of the check itself. */
#define CK(call)                                                                                               \
	do {                                                                                                   \
		cudaError_t e_ = (call);                                                                       \
		if (e_ != cudaSuccess) {                                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
			exit(2);                                                                               \
		}                                                                                              \
	} while (0)
/* DG exits (status 2) on a failed deepgo call, with ctx's message if any. */
#define DG(ctx, call)                                                                                          \
	do {                                                                                                   \
		dg_status s_ = (call);                                                                         \
		if (s_ != DG_OK) {                                                                             \
			fprintf(stderr, "%s:%d: %s: %s %s\n", __FILE__, __LINE__, #call, dg_strerror(s_),       \
				(ctx) ? dg_cuda_ctx_error((ctx), NULL) : "");                                  \
			exit(2);                                                                               \
		}                                                                                              \
	} while (0)

typedef struct {
	dg_cuda_ctx *ctx;
	cudaEvent_t e0, e1;
} gpu;

/* failures counts the failing rows. */
extern int failures;

/* row prints one table row (kernel, case, n, difference, PASS/FAIL, GB/s
 * from bytes moved in ms) and counts a failure. */
void row(const char *k, const char *dt, int64_t n, const char *diff, int ok, double bytes, float ms);

/* check_runtime: the rows of runtime.cu. */
void check_runtime(gpu *g);

#endif /* DG_GPUCHECK_H */
