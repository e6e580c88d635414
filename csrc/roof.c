/*
 * roof.c — the bandwidth roofs benchmarks divide by. They run on the same
 * pool and split work at the same grain as the kernels, so a kernel's ratio
 * to its roof measures the kernel's loop, not the threading.
 */
#include <string.h>

#include "dg_internal.h"

#if DG_HAVE_X86
#include <immintrin.h>
#endif

#define ROOF_GRAIN ((int64_t)4096) /* bytes: one page per unit */

typedef struct copy_job {
	unsigned char *dst;
	const unsigned char *src;
	void (*stream)(void *d, const void *s, int64_t bytes);
} copy_job;

/* The copy roof is the best copy the core has: past DG_STREAM_BYTES it
 * streams like the kernels do, else it is libc's memcpy. */
static void copy_task(void *arg, int64_t lo, int64_t hi)
{
	copy_job *j = arg;
	if (j->stream != NULL)
		j->stream(j->dst + lo, j->src + lo, hi - lo);
	else
		memcpy(j->dst + lo, j->src + lo, (size_t)(hi - lo));
}

dg_status dg_roof_copy(dg_ctx *ctx, void *dst, const void *src, int64_t bytes)
{
	if (ctx == NULL || bytes < 0 || (bytes > 0 && (dst == NULL || src == NULL)))
		return DG_ERR_INVALID;
	copy_job j = {dst, src, bytes >= DG_STREAM_BYTES ? ctx->k->copy_stream : NULL};
	dg_parallel_for(ctx, bytes, ROOF_GRAIN, bytes / 4, copy_task, &j);
	return DG_OK;
}

typedef struct read_job {
	dg_isa isa;
	const unsigned char *src;
	uint64_t sum; /* parts add into it atomically, once each */
} read_job;

static uint64_t read_scalar(const uint64_t *p, int64_t n)
{
	uint64_t a = 0, b = 0, c = 0, d = 0;
	int64_t i = 0;
	for (; i + 4 <= n; i += 4) {
		a += p[i];
		b += p[i + 1];
		c += p[i + 2];
		d += p[i + 3];
	}
	for (; i < n; i++)
		a += p[i];
	return a + b + c + d;
}

#if DG_HAVE_X86
DG_TARGET_AVX2 static uint64_t read_avx2(const uint64_t *p, int64_t n)
{
	__m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(p + i)));
		b = _mm256_add_epi64(b, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
		c = _mm256_add_epi64(c, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
		d = _mm256_add_epi64(d, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
	}
	a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
	uint64_t l[4];
	_mm256_storeu_si256((__m256i *)l, a);
	return l[0] + l[1] + l[2] + l[3] + read_scalar(p + i, n - i);
}

DG_TARGET_AVX512 static uint64_t read_avx512(const uint64_t *p, int64_t n)
{
	__m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
		b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 8));
		c = _mm512_add_epi64(c, _mm512_loadu_si512(p + i + 16));
		d = _mm512_add_epi64(d, _mm512_loadu_si512(p + i + 24));
	}
	a = _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d));
	return (uint64_t)_mm512_reduce_add_epi64(a) + read_scalar(p + i, n - i);
}
#endif

static void read_task(void *arg, int64_t lo, int64_t hi)
{
	read_job *j = arg;
	const uint64_t *p = (const uint64_t *)(j->src + lo * 8);
	int64_t n = hi - lo;
	uint64_t s;
	switch (j->isa) {
#if DG_HAVE_X86
	case DG_ISA_AVX512: s = read_avx512(p, n); break;
	case DG_ISA_AVX2: s = read_avx2(p, n); break;
#endif
	default: s = read_scalar(p, n); break;
	}
	__atomic_fetch_add(&j->sum, s, __ATOMIC_RELAXED);
}

dg_status dg_roof_read(dg_ctx *ctx, const void *src, int64_t bytes, uint64_t *sum)
{
	if (ctx == NULL || sum == NULL || bytes < 0 || (bytes > 0 && src == NULL))
		return DG_ERR_INVALID;
	read_job j;
	j.isa = ctx->isa;
	j.src = src;
	j.sum = 0;
	int64_t words = bytes / 8;
	dg_parallel_for(ctx, words, ROOF_GRAIN / 8, words, read_task, &j);
	*sum = j.sum;
	return DG_OK;
}

/* The update roof has the fused optimizer's memory pattern with none of its
 * arithmetic: per float32 element it reads g and reads and writes p, m and
 * v (28 bytes), adding s*g to each, with the same prefetch distance as the
 * optimizer's loops. A step at this roof spends nothing on its math. s = 0
 * leaves finite values as they were, so benchmarks run it on the step's own
 * buffers (where pages sit changes bandwidth by itself). */
typedef struct update_job {
	dg_isa isa;
	float *p, *m, *v;
	const float *g;
	float s;
} update_job;

static void update_scalar(float *p, const float *g, float *m, float *v, int64_t n, float s)
{
	for (int64_t i = 0; i < n; i++) {
		float x = s * g[i];
		p[i] += x;
		m[i] += x;
		v[i] += x;
	}
}

#if DG_HAVE_X86
DG_TARGET_AVX512 static void update_avx512(float *p, const float *g, float *m, float *v, int64_t n, float s)
{
	const __m512 sv = _mm512_set1_ps(s);
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		_mm_prefetch((const char *)(p + i) + DG_OPTIM_PREFETCH, _MM_HINT_T0);
		_mm_prefetch((const char *)(g + i) + DG_OPTIM_PREFETCH, _MM_HINT_T0);
		_mm_prefetch((const char *)(m + i) + DG_OPTIM_PREFETCH, _MM_HINT_T0);
		_mm_prefetch((const char *)(v + i) + DG_OPTIM_PREFETCH, _MM_HINT_T0);
		/* every load before any store, as in the optimizer's loop: a store
		 * to p followed by a load of m at the same offset within a page
		 * would stall on 4K aliasing */
		__m512 x = _mm512_mul_ps(sv, _mm512_loadu_ps(g + i)), a = _mm512_loadu_ps(p + i);
		__m512 b = _mm512_loadu_ps(m + i), c = _mm512_loadu_ps(v + i);
		_mm512_storeu_ps(m + i, _mm512_add_ps(b, x));
		_mm512_storeu_ps(v + i, _mm512_add_ps(c, x));
		_mm512_storeu_ps(p + i, _mm512_add_ps(a, x));
	}
	update_scalar(p + i, g + i, m + i, v + i, n - i, s);
}
#endif

static void update_task(void *arg, int64_t lo, int64_t hi)
{
	update_job *j = arg;
#if DG_HAVE_X86
	if (j->isa == DG_ISA_AVX512) {
		update_avx512(j->p + lo, j->g + lo, j->m + lo, j->v + lo, hi - lo, j->s);
		return;
	}
#endif
	update_scalar(j->p + lo, j->g + lo, j->m + lo, j->v + lo, hi - lo, j->s);
}

dg_status dg_roof_update(dg_ctx *ctx, float *p, const float *g, float *m, float *v, int64_t n, float s)
{
	if (ctx == NULL || n < 0 || (n > 0 && (p == NULL || g == NULL || m == NULL || v == NULL)))
		return DG_ERR_INVALID;
	update_job j = {ctx->isa, p, m, v, g, s};
	dg_parallel_for(ctx, n, DG_GRAIN, n, update_task, &j);
	return DG_OK;
}
