/* bench_core.c — GB/s of the streaming kernels at 64 MiB next to the limits
 * they are judged against (memcpy; a plain read-and-sum), on 1 and 2 threads.
 * Bytes counted: everything read plus everything written. Prints JSON lines. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deepgo.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define BYTES ((size_t)64 << 20)
#define REPS 20

static volatile double sink;

static double best_of(void (*fn)(void *), void *arg)
{
	double best = 1e30;
	fn(arg); /* warm: page faults */
	for (int r = 0; r < REPS; r++) {
		double t0 = now();
		fn(arg);
		double t = now() - t0;
		best = t < best ? t : best;
	}
	return best;
}

typedef struct b {
	dg_ctx *ctx;
	void *src, *dst;
	int64_t n;
	int which;
} b;

static void run_memcpy(void *v)
{
	b *a = v;
	memcpy(a->dst, a->src, BYTES);
}

static void run_readsum(void *v)
{
	b *a = v;
	const uint64_t *p = a->src;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	for (size_t i = 0; i < BYTES / 8; i += 4) {
		s0 += p[i];
		s1 += p[i + 1];
		s2 += p[i + 2];
		s3 += p[i + 3];
	}
	sink = (double)(s0 + s1 + s2 + s3);
}

static void run_kernel(void *v)
{
	b *a = v;
	const void *s[1] = {a->src};
	void *d[1] = {a->dst};
	int64_t off[1] = {0};
	double tot;
	int found;
	switch (a->which) {
	case 0: dg_cast(a->ctx, DG_F32, DG_F16, s, d, &a->n, 1); break;
	case 1: dg_cast(a->ctx, DG_F32, DG_BF16, s, d, &a->n, 1); break;
	case 2: dg_cast(a->ctx, DG_F16, DG_F32, s, d, &a->n, 1); break;
	case 3: dg_sumsq(a->ctx, DG_F32, s, &a->n, 1, NULL, &tot); sink = tot; break;
	case 4: dg_nonfinite(a->ctx, DG_F32, s, &a->n, 1, &found); sink = found; break;
	case 5: dg_pack(a->ctx, DG_F32, s, &a->n, off, 1, a->dst, a->n); break;
	case 6: dg_sumsq(a->ctx, DG_F16, s, &a->n, 1, NULL, &tot); sink = tot; break;
	}
}

int main(void)
{
	static const char *names[] = {"cast_f32_f16", "cast_f32_bf16", "cast_f16_f32", "sumsq_f32",
				      "nonfinite_f32", "pack_f32", "sumsq_f16"};
	void *src, *dst;
	dg_alloc(BYTES, 4096, 0, &src);
	dg_alloc(BYTES, 4096, 0, &dst);
	for (size_t i = 0; i < BYTES / 4; i++)
		((float *)src)[i] = (float)(i % 1000) * 0.001f;
	b a = {0};
	a.src = src;
	a.dst = dst;
	double tm = best_of(run_memcpy, &a), tr = best_of(run_readsum, &a);
	printf("{\"op\":\"memcpy\",\"gbps\":%.2f}\n{\"op\":\"readsum\",\"gbps\":%.2f}\n", 2 * BYTES / tm / 1e9,
	       BYTES / tr / 1e9);
	for (int th = 1; th <= 2; th++) {
		dg_ctx_create(th, &a.ctx);
		for (int w = 0; w < 7; w++) {
			a.which = w;
			size_t rd, wr;
			if (w == 2 || w == 6) { /* 16-bit source */
				a.n = BYTES / 2;
				rd = BYTES;
				wr = w == 2 ? 2 * BYTES : 0;
			} else {
				a.n = BYTES / 4;
				rd = BYTES;
				wr = w <= 1 ? BYTES / 2 : w == 5 ? BYTES : 0;
			}
			if (w == 2)
				a.n = BYTES / 4; /* keep dst within 64 MiB */
			if (w == 2)
				wr = BYTES, rd = BYTES / 2;
			double t = best_of(run_kernel, &a);
			double ref = wr ? tm * (double)(rd + wr) / (2.0 * BYTES) : tr * (double)rd / BYTES;
			printf("{\"op\":\"%s\",\"threads\":%d,\"gbps\":%.2f,\"vs_limit\":%.3f}\n", names[w], th,
			       (double)(rd + wr) / t / 1e9, ref / t);
		}
		dg_ctx_destroy(a.ctx);
	}
	dg_free(src);
	dg_free(dst);
	return 0;
}
