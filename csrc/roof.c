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

/* The cast roof moves a cast's bytes with none of its conversion: a
 * widening cast (dst twice src) reads each 64-byte line once and writes it
 * twice, a narrowing one (dst half src) reads two lines and writes their
 * XOR (a short tail: pairs of bytes), so reads, writes and their ratio
 * match the kernel's. A memcpy cannot: it reads as much as it writes, and a
 * widening cast, which writes twice what it reads, beat it by 20% on one
 * thread and fell 10% short on two.
 * Past DG_STREAM_BYTES of output it stores non-temporally, as the casts do,
 * where the ISA's table has streaming casts (AVX-512); AVX2 and the scalar
 * ISA store as their casts do, AVX2 a vector at a time. */
typedef struct cast_roof_job {
	dg_isa isa;
	int nt;
	int widen; /* 1: dst = 2 src; 0: dst = src / 2 */
	unsigned char *dst;
	const unsigned char *src;
} cast_roof_job;

static void cast_roof_plain(int widen, unsigned char *d, const unsigned char *s, int64_t bytes)
{
	int64_t i = 0;
	if (widen) {
		for (; i + 64 <= bytes; i += 64) {
			memcpy(d + 2 * i, s + i, 64);
			memcpy(d + 2 * i + 64, s + i, 64);
		}
		memcpy(d + 2 * i, s + i, (size_t)(bytes - i));
		memcpy(d + 2 * i + (bytes - i), s + i, (size_t)(bytes - i));
		return;
	}
	for (; i + 128 <= bytes; i += 128)
		for (int o = 0; o < 64; o += 8) {
			uint64_t a, b;
			memcpy(&a, s + i + o, 8);
			memcpy(&b, s + i + 64 + o, 8);
			a ^= b;
			memcpy(d + i / 2 + o, &a, 8);
		}
	for (; i + 2 <= bytes; i += 2)
		d[i / 2] = s[i] ^ s[i + 1];
}

#if DG_HAVE_X86
/* the casts' prefetch (kernels_avx512.c's pf_ahead): when on (the casts'
 * dg_stream_prefetch()), each of the lines at p, DG_PF bytes ahead into L1
 * and DG_PF_FAR ahead into L2 */
static inline void roof_prefetch(int on, const unsigned char *p, int bytes)
{
	if (!on)
		return;
	for (int o = 0; o < bytes; o += 64) {
		_mm_prefetch((const char *)p + DG_PF + o, _MM_HINT_T0);
		_mm_prefetch((const char *)p + DG_PF_FAR + o, _MM_HINT_T2);
	}
}

DG_TARGET_AVX512 static void cast_roof_avx512(int widen, int nt, unsigned char *d, const unsigned char *s,
					       int64_t bytes)
{
	const int pf = dg_stream_prefetch();
	int64_t i = 0;
	if (widen) {
		for (; i + 128 <= bytes; i += 128) {
			roof_prefetch(pf, s + i, 128);
			__m512i a = _mm512_loadu_si512(s + i), b = _mm512_loadu_si512(s + i + 64);
			if (nt) {
				_mm512_stream_si512((__m512i *)(d + 2 * i), a);
				_mm512_stream_si512((__m512i *)(d + 2 * i + 64), a);
				_mm512_stream_si512((__m512i *)(d + 2 * i + 128), b);
				_mm512_stream_si512((__m512i *)(d + 2 * i + 192), b);
			} else {
				_mm512_storeu_si512(d + 2 * i, a);
				_mm512_storeu_si512(d + 2 * i + 64, a);
				_mm512_storeu_si512(d + 2 * i + 128, b);
				_mm512_storeu_si512(d + 2 * i + 192, b);
			}
		}
	} else {
		for (; i + 256 <= bytes; i += 256) {
			roof_prefetch(pf, s + i, 256);
			__m512i a = _mm512_xor_si512(_mm512_loadu_si512(s + i), _mm512_loadu_si512(s + i + 64));
			__m512i b = _mm512_xor_si512(_mm512_loadu_si512(s + i + 128), _mm512_loadu_si512(s + i + 192));
			if (nt) {
				_mm512_stream_si512((__m512i *)(d + i / 2), a);
				_mm512_stream_si512((__m512i *)(d + i / 2 + 64), b);
			} else {
				_mm512_storeu_si512(d + i / 2, a);
				_mm512_storeu_si512(d + i / 2 + 64, b);
			}
		}
	}
	if (nt)
		_mm_sfence();
	cast_roof_plain(widen, widen ? d + 2 * i : d + i / 2, s + i, bytes - i);
}

/* AVX2's casts do not prefetch; neither does their roof */
DG_TARGET_AVX2 static void cast_roof_avx2(int widen, unsigned char *d, const unsigned char *s, int64_t bytes)
{
	int64_t i = 0;
	if (widen) {
		for (; i + 64 <= bytes; i += 64) {
			__m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
			__m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
			_mm256_storeu_si256((__m256i *)(d + 2 * i), a);
			_mm256_storeu_si256((__m256i *)(d + 2 * i + 32), b);
			_mm256_storeu_si256((__m256i *)(d + 2 * i + 64), a);
			_mm256_storeu_si256((__m256i *)(d + 2 * i + 96), b);
		}
	} else {
		for (; i + 128 <= bytes; i += 128) {
			__m256i a = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(s + i)),
						     _mm256_loadu_si256((const __m256i *)(s + i + 64)));
			__m256i b = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(s + i + 32)),
						     _mm256_loadu_si256((const __m256i *)(s + i + 96)));
			_mm256_storeu_si256((__m256i *)(d + i / 2), a);
			_mm256_storeu_si256((__m256i *)(d + i / 2 + 32), b);
		}
	}
	cast_roof_plain(widen, widen ? d + 2 * i : d + i / 2, s + i, bytes - i);
}
#endif

static void cast_roof_task(void *arg, int64_t lo, int64_t hi)
{
	cast_roof_job *j = arg;
	unsigned char *d = j->widen ? j->dst + 2 * lo : j->dst + lo / 2;
#if DG_HAVE_X86
	if (j->isa == DG_ISA_AVX512) {
		cast_roof_avx512(j->widen, j->nt, d, j->src + lo, hi - lo);
		return;
	}
	if (j->isa == DG_ISA_AVX2) {
		cast_roof_avx2(j->widen, d, j->src + lo, hi - lo);
		return;
	}
#endif
	cast_roof_plain(j->widen, d, j->src + lo, hi - lo);
}

dg_status dg_roof_cast(dg_ctx *ctx, void *dst, int64_t dst_bytes, const void *src, int64_t src_bytes)
{
	if (ctx == NULL || src_bytes < 0 || (src_bytes > 0 && (dst == NULL || src == NULL)))
		return DG_ERR_INVALID;
	if (src_bytes > INT64_MAX / 3)
		return DG_ERR_SIZE;
	if (dst_bytes == src_bytes)
		return dg_roof_copy(ctx, dst, src, src_bytes);
	int widen = dst_bytes == 2 * src_bytes;
	if (!widen && (src_bytes % 2 != 0 || dst_bytes != src_bytes / 2))
		return DG_ERR_INVALID;
	/* each part's destination starts a multiple of 64 bytes past dst (parts
	 * are ROOF_GRAIN source bytes), so streaming needs dst itself aligned,
	 * as tensors are; the casts peel a head to get there instead */
	int nt = dst_bytes >= DG_STREAM_BYTES && ctx->k->cast_stream != NULL && ((uintptr_t)dst & 63u) == 0;
	cast_roof_job j = {ctx->isa, nt, widen, dst, src};
	dg_parallel_for(ctx, src_bytes, ROOF_GRAIN, src_bytes + dst_bytes, cast_roof_task, &j);
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
	const int64_t pf = dg_optim_prefetch();
	const __m512 sv = _mm512_set1_ps(s);
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		_mm_prefetch((const char *)(p + i) + pf, _MM_HINT_T0);
		_mm_prefetch((const char *)(g + i) + pf, _MM_HINT_T0);
		_mm_prefetch((const char *)(m + i) + pf, _MM_HINT_T0);
		_mm_prefetch((const char *)(v + i) + pf, _MM_HINT_T0);
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
