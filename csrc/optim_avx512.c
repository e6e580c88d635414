/*
 * optim_avx512.c — AVX-512 optimizer loops: 16 elements per vector, the
 * tail done with masked loads and stores so every element takes the same
 * path. Each loop mirrors dg_optim_math.h operation for operation (multiply,
 * then add; never FMA), so the bits equal the scalar table's. Halves use the
 * same conversions as kernels_avx512.c: VCVTPH2PS/VCVTPS2PH (round to
 * nearest even, subnormals kept) and integer bf16 rounding.
 */
#include "optim_internal.h"

#if DG_HAVE_X86
#include <immintrin.h>

#define AI static inline __attribute__((always_inline)) DG_TARGET_AVX512

/* one prefetch per 64-byte line of a stream, pf (the loop's
 * dg_optim_prefetch()) bytes ahead */
#define OPF(base, t, i) _mm_prefetch((const char *)(base) + (size_t)(i) * ESZ(t) + pf, _MM_HINT_T0)

AI __m512 bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

AI __m256i bf16_narrow(__m512 v)
{
	__m512i x = _mm512_castps_si512(v);
	__m512i ax = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
	__mmask16 nan = _mm512_cmpgt_epu32_mask(ax, _mm512_set1_epi32(0x7f800000));
	__m512i hi = _mm512_srli_epi32(x, 16);
	__m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
	__m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
	r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
	return _mm512_cvtepi32_epi16(r);
}

#define ESZ(t) ((t) == DG_F32 ? 4u : 2u)

/* masked lanes load as zero */
AI __m512 ld(dg_dtype t, const void *base, int64_t i, __mmask16 m)
{
	const char *p = (const char *)base + (size_t)i * ESZ(t);
	if (t == DG_F32)
		return _mm512_maskz_loadu_ps(m, p);
	__m256i h = _mm256_maskz_loadu_epi16(m, p);
	return t == DG_F16 ? _mm512_cvtph_ps(h) : bf16_widen(h);
}

AI __m256i narrow(dg_dtype t, __m512 v)
{
	return t == DG_F16 ? _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) : bf16_narrow(v);
}

AI void st(dg_dtype t, void *base, int64_t i, __mmask16 m, __m512 v)
{
	char *p = (char *)base + (size_t)i * ESZ(t);
	if (t == DG_F32)
		_mm512_mask_storeu_ps(p, m, v);
	else
		_mm256_mask_storeu_epi16(p, m, narrow(t, v));
}

AI __mmask16 lanes(int64_t n, int64_t i) { return n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u); }

#define MUL _mm512_mul_ps
#define ADD _mm512_add_ps
#define SET _mm512_set1_ps

AI void put(dg_dtype pt, dg_dtype ct, const dg_optim_run *r, int64_t i, __mmask16 m, __m512 np)
{
	st(pt, r->p, i, m, np);
	if (ct != DG_NOCOPY)
		st(ct, r->c, i, m, np);
}

AI void adam_loop(dg_dtype pt, dg_dtype gt, dg_dtype ct, const dg_optim_coef *k, const dg_optim_run *r)
{
	const __m512 inv = SET(k->inv_scale), l2 = SET(k->l2), b1 = SET(k->b1), omb1 = SET(k->omb1);
	const __m512 b2 = SET(k->b2), omb2 = SET(k->omb2), bc2 = SET(k->bc2), eps = SET(k->eps);
	const __m512 decay = SET(k->decay), step = SET(k->step_size);
	const int64_t pf = dg_optim_prefetch();
	for (int64_t i = 0; i < r->n; i += 16) {
		__mmask16 m = lanes(r->n, i);
		if (pt == DG_F32 || (i & 31) == 0)
			OPF(r->p, pt, i);
		if (gt == DG_F32 || (i & 31) == 0)
			OPF(r->g, gt, i);
		OPF(r->m, DG_F32, i);
		OPF(r->v, DG_F32, i);
		__m512 p = ld(pt, r->p, i, m), g = MUL(ld(gt, r->g, i, m), inv);
		if (!k->adamw)
			g = ADD(g, MUL(l2, p));
		__m512 mm = ADD(MUL(b1, _mm512_maskz_loadu_ps(m, r->m + i)), MUL(omb1, g));
		__m512 vv = ADD(MUL(b2, _mm512_maskz_loadu_ps(m, r->v + i)), MUL(omb2, MUL(g, g)));
		_mm512_mask_storeu_ps(r->m + i, m, mm);
		_mm512_mask_storeu_ps(r->v + i, m, vv);
		__m512 denom = ADD(MUL(_mm512_sqrt_ps(vv), bc2), eps);
		if (k->adamw)
			p = ADD(p, MUL(decay, p));
		put(pt, ct, r, i, m, ADD(p, MUL(step, _mm512_div_ps(mm, denom))));
	}
}

AI void sgd_loop(dg_dtype pt, dg_dtype gt, dg_dtype ct, const dg_optim_coef *k, const dg_optim_run *r)
{
	const __m512 inv = SET(k->inv_scale), l2 = SET(k->l2), mom = SET(k->momentum), omd = SET(k->omd);
	const __m512 step = SET(k->step_size);
	for (int64_t i = 0; i < r->n; i += 16) {
		__mmask16 m = lanes(r->n, i);
		__m512 p = ld(pt, r->p, i, m), g = MUL(ld(gt, r->g, i, m), inv);
		g = ADD(g, MUL(l2, p));
		if (r->m != NULL) {
			__m512 b = k->first ? g : ADD(MUL(mom, _mm512_maskz_loadu_ps(m, r->m + i)), MUL(omd, g));
			_mm512_mask_storeu_ps(r->m + i, m, b);
			g = k->nesterov ? ADD(g, MUL(mom, b)) : b;
		}
		put(pt, ct, r, i, m, ADD(p, MUL(step, g)));
	}
}

AI __m512 sign16(__m512 c)
{
	__m512 z = _mm512_setzero_ps();
	c = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c, z, _CMP_GT_OQ), c, SET(1.0f));
	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c, z, _CMP_LT_OQ), c, SET(-1.0f));
}

AI void lion_loop(dg_dtype pt, dg_dtype gt, dg_dtype ct, const dg_optim_coef *k, const dg_optim_run *r)
{
	const __m512 inv = SET(k->inv_scale), b1 = SET(k->b1), omb1 = SET(k->omb1), b2 = SET(k->b2);
	const __m512 omb2 = SET(k->omb2), decay = SET(k->decay), step = SET(k->step_size);
	for (int64_t i = 0; i < r->n; i += 16) {
		__mmask16 m = lanes(r->n, i);
		__m512 p = ld(pt, r->p, i, m), g = MUL(ld(gt, r->g, i, m), inv);
		__m512 m0 = _mm512_maskz_loadu_ps(m, r->m + i);
		__m512 c = ADD(MUL(b1, m0), MUL(omb1, g));
		_mm512_mask_storeu_ps(r->m + i, m, ADD(MUL(b2, m0), MUL(omb2, g)));
		put(pt, ct, r, i, m, ADD(MUL(p, decay), MUL(step, sign16(c))));
	}
}

AI __m512 lamb_dir16(const dg_optim_coef *k, __m512 p, __m512 mm, __m512 vv)
{
	__m512 mh = MUL(mm, SET(k->rbc1)), vh = MUL(vv, SET(k->rbc2));
	return ADD(_mm512_div_ps(mh, ADD(_mm512_sqrt_ps(vh), SET(k->eps))), MUL(SET(k->l2), p));
}

/* acc[0] holds lanes 0-7, acc[1] lanes 8-15 of the dg_lamb_* lane scheme */
AI void sq_acc(__m512 x, __m512d acc[2])
{
	__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
	__m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
	acc[0] = _mm512_add_pd(acc[0], _mm512_mul_pd(lo, lo));
	acc[1] = _mm512_add_pd(acc[1], _mm512_mul_pd(hi, hi));
}

AI double lanes_sum(const __m512d acc[2])
{
	double l[16], s = 0;
	_mm512_storeu_pd(l, acc[0]);
	_mm512_storeu_pd(l + 8, acc[1]);
	for (int j = 0; j < 16; j++)
		s += l[j];
	return s;
}

AI void lamb_mom_loop(dg_dtype pt, dg_dtype gt, dg_dtype ct, const dg_optim_coef *k, const dg_optim_run *r,
		      double out[2])
{
	(void)ct;
	const __m512 inv = SET(k->inv_scale), b1 = SET(k->b1), omb1 = SET(k->omb1);
	const __m512 b2 = SET(k->b2), omb2 = SET(k->omb2);
	__m512d ps[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()}, us[2] = {ps[0], ps[0]};
	for (int64_t i = 0; i < r->n; i += 16) {
		__mmask16 m = lanes(r->n, i);
		__m512 p = ld(pt, r->p, i, m), g = MUL(ld(gt, r->g, i, m), inv);
		__m512 mm = ADD(MUL(b1, _mm512_maskz_loadu_ps(m, r->m + i)), MUL(omb1, g));
		__m512 vv = ADD(MUL(b2, _mm512_maskz_loadu_ps(m, r->v + i)), MUL(omb2, MUL(g, g)));
		_mm512_mask_storeu_ps(r->m + i, m, mm);
		_mm512_mask_storeu_ps(r->v + i, m, vv);
		/* masked-off lanes must add exactly +0 (u can be 0/0 there when eps == 0) */
		__m512 u = _mm512_maskz_mov_ps(m, lamb_dir16(k, p, mm, vv));
		sq_acc(p, ps);
		sq_acc(u, us);
	}
	out[0] = lanes_sum(ps);
	out[1] = lanes_sum(us);
}

AI void lamb_apply_loop(dg_dtype pt, dg_dtype gt, dg_dtype ct, const dg_optim_coef *k, const dg_optim_run *r)
{
	(void)gt;
	const __m512 s = SET(r->lamb_scale);
	for (int64_t i = 0; i < r->n; i += 16) {
		__mmask16 m = lanes(r->n, i);
		__m512 p = ld(pt, r->p, i, m);
		__m512 u = lamb_dir16(k, p, _mm512_maskz_loadu_ps(m, r->m + i), _mm512_maskz_loadu_ps(m, r->v + i));
		put(pt, ct, r, i, m, ADD(p, MUL(s, u)));
	}
}

#define CALL_ADAM(PT, GT, CT, k, r) adam_loop(PT, GT, CT, k, r)
#define CALL_SGD(PT, GT, CT, k, r) sgd_loop(PT, GT, CT, k, r)
#define CALL_LION(PT, GT, CT, k, r) lion_loop(PT, GT, CT, k, r)
#define CALL_LAMB_MOM(PT, GT, CT, k, r, o) lamb_mom_loop(PT, GT, CT, k, r, o)
#define CALL_LAMB_APPLY(PT, GT, CT, k, r) lamb_apply_loop(PT, GT, CT, k, r)

DG_TARGET_AVX512 static void adam_avx512(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(CALL_ADAM, t, k, r);
}

DG_TARGET_AVX512 static void sgd_avx512(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(CALL_SGD, t, k, r);
}

DG_TARGET_AVX512 static void lion_avx512(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(CALL_LION, t, k, r);
}

DG_TARGET_AVX512 static void lamb_mom_avx512(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r,
					     double out[2])
{
	DG_OPTIM_DISPATCH(CALL_LAMB_MOM, t, k, r, out);
}

DG_TARGET_AVX512 static void lamb_apply_avx512(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(CALL_LAMB_APPLY, t, k, r);
}

AI int unscale_loop(dg_dtype t, void *x, int64_t n, float s)
{
	const __m512 sv = SET(s);
	const __m512i mag = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
	__mmask16 bad = 0;
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 m = lanes(n, i);
		__m512 y = MUL(ld(t, x, i, m), sv);
		st(t, x, i, m, y);
		/* test the stored value: a finite float32 can round to Inf in 16 bits */
		__m512 back = t == DG_F32 ? y : ld(t, x, i, m);
		__m512i a = _mm512_and_si512(_mm512_castps_si512(back), mag);
		bad |= _mm512_mask_cmpge_epu32_mask(m, a, inf);
	}
	return bad != 0;
}

DG_TARGET_AVX512 static int unscale_avx512(dg_dtype t, void *x, int64_t n, float s)
{
	if (t == DG_F32)
		return unscale_loop(DG_F32, x, n, s);
	if (t == DG_F16)
		return unscale_loop(DG_F16, x, n, s);
	return unscale_loop(DG_BF16, x, n, s);
}

const dg_optim_kernels dg_optim_avx512 = {
	.adam = adam_avx512,
	.sgd = sgd_avx512,
	.lion = lion_avx512,
	.lamb_moments = lamb_mom_avx512,
	.lamb_apply = lamb_apply_avx512,
	.unscale = unscale_avx512,
};

#endif /* DG_HAVE_X86 */
