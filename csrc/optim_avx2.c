/*
 * optim_avx2.c — AVX2 + F16C optimizer loops, 8 elements per vector. AVX2
 * has no 16-bit masked stores, so the last n % 8 elements (n % 16 for Lamb's
 * norm lanes) go through dg_optim_math.h one at a time: the same math, so
 * the same bits. Vector bodies mirror that math operation for operation.
 */
#include "optim_internal.h"

#if DG_HAVE_X86
#include <immintrin.h>

#define AI static inline __attribute__((always_inline)) DG_TARGET_AVX2

#define ESZ(t) ((t) == DG_F32 ? 4u : 2u)

AI __m128i bf16_narrow(__m256 v)
{
	__m256i x = _mm256_castps_si256(v);
	__m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
	__m256i nan = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x7f800000)); /* ax >= 0: signed compare is fine */
	__m256i hi = _mm256_srli_epi32(x, 16);
	__m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
	__m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
	r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
	return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

AI __m256 ld(dg_dtype t, const void *base, int64_t i)
{
	const char *p = (const char *)base + (size_t)i * ESZ(t);
	if (t == DG_F32)
		return _mm256_loadu_ps((const float *)p);
	__m128i h = _mm_loadu_si128((const __m128i *)p);
	if (t == DG_F16)
		return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AI void st(dg_dtype t, void *base, int64_t i, __m256 v)
{
	char *p = (char *)base + (size_t)i * ESZ(t);
	if (t == DG_F32)
		_mm256_storeu_ps((float *)p, v);
	else if (t == DG_F16)
		_mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	else
		_mm_storeu_si128((__m128i *)p, bf16_narrow(v));
}

/* scalar element access for the tails */
AI float lds(dg_dtype t, const void *p, int64_t i)
{
	if (t == DG_F16)
		return dg_f16_to_f32(((const uint16_t *)p)[i]);
	if (t == DG_BF16)
		return dg_bf16_to_f32(((const uint16_t *)p)[i]);
	return ((const float *)p)[i];
}

AI void sts(dg_dtype t, void *p, int64_t i, float v)
{
	if (t == DG_F16)
		((uint16_t *)p)[i] = dg_f32_to_f16(v);
	else if (t == DG_BF16)
		((uint16_t *)p)[i] = dg_f32_to_bf16(v);
	else
		((float *)p)[i] = v;
}

#define MUL _mm256_mul_ps
#define ADD _mm256_add_ps
#define SET _mm256_set1_ps

AI void put(dg_dtype pt, dg_dtype ct, const dg_optim_run *r, int64_t i, __m256 np)
{
	st(pt, r->p, i, np);
	if (ct != DG_NOCOPY)
		st(ct, r->c, i, np);
}

AI void puts1(dg_dtype pt, dg_dtype ct, const dg_optim_run *r, int64_t i, float np)
{
	sts(pt, r->p, i, np);
	if (ct != DG_NOCOPY)
		sts(ct, r->c, i, np);
}

AI void adam_loop(dg_dtype pt, dg_dtype gt, dg_dtype ct, const dg_optim_coef *k, const dg_optim_run *r)
{
	const __m256 inv = SET(k->inv_scale), l2 = SET(k->l2), b1 = SET(k->b1), omb1 = SET(k->omb1);
	const __m256 b2 = SET(k->b2), omb2 = SET(k->omb2), bc2 = SET(k->bc2), eps = SET(k->eps);
	const __m256 decay = SET(k->decay), step = SET(k->step_size);
	int64_t i = 0;
	for (; i + 8 <= r->n; i += 8) {
		__m256 p = ld(pt, r->p, i), g = MUL(ld(gt, r->g, i), inv);
		if (!k->adamw)
			g = ADD(g, MUL(l2, p));
		__m256 mm = ADD(MUL(b1, _mm256_loadu_ps(r->m + i)), MUL(omb1, g));
		__m256 vv = ADD(MUL(b2, _mm256_loadu_ps(r->v + i)), MUL(omb2, MUL(g, g)));
		_mm256_storeu_ps(r->m + i, mm);
		_mm256_storeu_ps(r->v + i, vv);
		__m256 denom = ADD(MUL(_mm256_sqrt_ps(vv), bc2), eps);
		if (k->adamw)
			p = ADD(p, MUL(decay, p));
		put(pt, ct, r, i, ADD(p, MUL(step, _mm256_div_ps(mm, denom))));
	}
	for (; i < r->n; i++)
		puts1(pt, ct, r, i, dg_adam_elem(k, lds(pt, r->p, i), lds(gt, r->g, i), &r->m[i], &r->v[i]));
}

AI void sgd_loop(dg_dtype pt, dg_dtype gt, dg_dtype ct, const dg_optim_coef *k, const dg_optim_run *r)
{
	const __m256 inv = SET(k->inv_scale), l2 = SET(k->l2), mom = SET(k->momentum), omd = SET(k->omd);
	const __m256 step = SET(k->step_size);
	int64_t i = 0;
	for (; i + 8 <= r->n; i += 8) {
		__m256 p = ld(pt, r->p, i), g = MUL(ld(gt, r->g, i), inv);
		g = ADD(g, MUL(l2, p));
		if (r->m != NULL) {
			__m256 b = k->first ? g : ADD(MUL(mom, _mm256_loadu_ps(r->m + i)), MUL(omd, g));
			_mm256_storeu_ps(r->m + i, b);
			g = k->nesterov ? ADD(g, MUL(mom, b)) : b;
		}
		put(pt, ct, r, i, ADD(p, MUL(step, g)));
	}
	for (; i < r->n; i++) {
		float *b = r->m != NULL ? &r->m[i] : NULL;
		puts1(pt, ct, r, i, dg_sgd_elem(k, lds(pt, r->p, i), lds(gt, r->g, i), b));
	}
}

AI __m256 sign8(__m256 c)
{
	__m256 z = _mm256_setzero_ps();
	c = _mm256_blendv_ps(c, SET(1.0f), _mm256_cmp_ps(c, z, _CMP_GT_OQ));
	return _mm256_blendv_ps(c, SET(-1.0f), _mm256_cmp_ps(c, z, _CMP_LT_OQ));
}

AI void lion_loop(dg_dtype pt, dg_dtype gt, dg_dtype ct, const dg_optim_coef *k, const dg_optim_run *r)
{
	const __m256 inv = SET(k->inv_scale), b1 = SET(k->b1), omb1 = SET(k->omb1), b2 = SET(k->b2);
	const __m256 omb2 = SET(k->omb2), decay = SET(k->decay), step = SET(k->step_size);
	int64_t i = 0;
	for (; i + 8 <= r->n; i += 8) {
		__m256 p = ld(pt, r->p, i), g = MUL(ld(gt, r->g, i), inv);
		__m256 m0 = _mm256_loadu_ps(r->m + i);
		__m256 c = ADD(MUL(b1, m0), MUL(omb1, g));
		_mm256_storeu_ps(r->m + i, ADD(MUL(b2, m0), MUL(omb2, g)));
		put(pt, ct, r, i, ADD(MUL(p, decay), MUL(step, sign8(c))));
	}
	for (; i < r->n; i++)
		puts1(pt, ct, r, i, dg_lion_elem(k, lds(pt, r->p, i), lds(gt, r->g, i), &r->m[i]));
}

AI __m256 lamb_dir8(const dg_optim_coef *k, __m256 p, __m256 mm, __m256 vv)
{
	__m256 mh = MUL(mm, SET(k->rbc1)), vh = MUL(vv, SET(k->rbc2));
	return ADD(_mm256_div_ps(mh, ADD(_mm256_sqrt_ps(vh), SET(k->eps))), MUL(SET(k->l2), p));
}

/* x holds lanes 8h .. 8h+7 of the 16-lane scheme: acc[2h] lanes 8h..8h+3, acc[2h+1] the next four */
AI void sq_acc(__m256 x, __m256d *acc)
{
	__m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
	__m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
	acc[0] = _mm256_add_pd(acc[0], _mm256_mul_pd(lo, lo));
	acc[1] = _mm256_add_pd(acc[1], _mm256_mul_pd(hi, hi));
}

AI __m256 lamb_mom8(const dg_optim_coef *k, dg_dtype pt, dg_dtype gt, const dg_optim_run *r, int64_t i, __m256 *pv)
{
	__m256 p = ld(pt, r->p, i), g = MUL(ld(gt, r->g, i), SET(k->inv_scale));
	__m256 mm = ADD(MUL(SET(k->b1), _mm256_loadu_ps(r->m + i)), MUL(SET(k->omb1), g));
	__m256 vv = ADD(MUL(SET(k->b2), _mm256_loadu_ps(r->v + i)), MUL(SET(k->omb2), MUL(g, g)));
	_mm256_storeu_ps(r->m + i, mm);
	_mm256_storeu_ps(r->v + i, vv);
	*pv = p;
	return lamb_dir8(k, p, mm, vv);
}

AI void lamb_mom_loop(dg_dtype pt, dg_dtype gt, dg_dtype ct, const dg_optim_coef *k, const dg_optim_run *r,
		      double out[2])
{
	(void)ct;
	__m256d ps[4], us[4];
	for (int j = 0; j < 4; j++)
		ps[j] = us[j] = _mm256_setzero_pd();
	int64_t i = 0;
	for (; i + 16 <= r->n; i += 16) {
		__m256 p0, p1;
		__m256 u0 = lamb_mom8(k, pt, gt, r, i, &p0), u1 = lamb_mom8(k, pt, gt, r, i + 8, &p1);
		sq_acc(p0, ps);
		sq_acc(p1, ps + 2);
		sq_acc(u0, us);
		sq_acc(u1, us + 2);
	}
	double pl[16], ul[16];
	for (int j = 0; j < 4; j++) {
		_mm256_storeu_pd(pl + 4 * j, ps[j]);
		_mm256_storeu_pd(ul + 4 * j, us[j]);
	}
	for (; i < r->n; i++) {
		float p = lds(pt, r->p, i);
		float u = dg_lamb_moments(k, p, lds(gt, r->g, i), &r->m[i], &r->v[i]);
		pl[i % 16] += (double)p * (double)p;
		ul[i % 16] += (double)u * (double)u;
	}
	out[0] = out[1] = 0;
	for (int j = 0; j < 16; j++) {
		out[0] += pl[j];
		out[1] += ul[j];
	}
}

AI void lamb_apply_loop(dg_dtype pt, dg_dtype gt, dg_dtype ct, const dg_optim_coef *k, const dg_optim_run *r)
{
	(void)gt;
	const __m256 s = SET(r->lamb_scale);
	int64_t i = 0;
	for (; i + 8 <= r->n; i += 8) {
		__m256 p = ld(pt, r->p, i);
		__m256 u = lamb_dir8(k, p, _mm256_loadu_ps(r->m + i), _mm256_loadu_ps(r->v + i));
		put(pt, ct, r, i, ADD(p, MUL(s, u)));
	}
	for (; i < r->n; i++) {
		float p = lds(pt, r->p, i);
		puts1(pt, ct, r, i, dg_lamb_apply(p, dg_lamb_dir(k, p, r->m[i], r->v[i]), r->lamb_scale));
	}
}

#define CALL_ADAM(PT, GT, CT, k, r) adam_loop(PT, GT, CT, k, r)
#define CALL_SGD(PT, GT, CT, k, r) sgd_loop(PT, GT, CT, k, r)
#define CALL_LION(PT, GT, CT, k, r) lion_loop(PT, GT, CT, k, r)
#define CALL_LAMB_MOM(PT, GT, CT, k, r, o) lamb_mom_loop(PT, GT, CT, k, r, o)
#define CALL_LAMB_APPLY(PT, GT, CT, k, r) lamb_apply_loop(PT, GT, CT, k, r)

DG_TARGET_AVX2 static void adam_avx2(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(CALL_ADAM, t, k, r);
}

DG_TARGET_AVX2 static void sgd_avx2(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(CALL_SGD, t, k, r);
}

DG_TARGET_AVX2 static void lion_avx2(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(CALL_LION, t, k, r);
}

DG_TARGET_AVX2 static void lamb_mom_avx2(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r,
					 double out[2])
{
	DG_OPTIM_DISPATCH(CALL_LAMB_MOM, t, k, r, out);
}

DG_TARGET_AVX2 static void lamb_apply_avx2(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(CALL_LAMB_APPLY, t, k, r);
}

AI int unscale_loop(dg_dtype t, void *x, int64_t n, float s)
{
	const __m256 sv = SET(s);
	const __m256i mag = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
	__m256i bad = _mm256_setzero_si256();
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 y = MUL(ld(t, x, i), sv);
		st(t, x, i, y);
		/* test the stored value: a finite float32 can round to Inf in 16 bits */
		__m256 back = t == DG_F32 ? y : ld(t, x, i);
		__m256i a = _mm256_and_si256(_mm256_castps_si256(back), mag);
		/* a >= inf  <=>  a > inf - 1 (both non-negative as signed) */
		bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(a, _mm256_sub_epi32(inf, _mm256_set1_epi32(1))));
	}
	int found = !_mm256_testz_si256(bad, bad);
	for (; i < n; i++) {
		sts(t, x, i, lds(t, x, i) * s);
		found |= !dg_isfinite_f32(lds(t, x, i));
	}
	return found;
}

DG_TARGET_AVX2 static int unscale_avx2(dg_dtype t, void *x, int64_t n, float s)
{
	if (t == DG_F32)
		return unscale_loop(DG_F32, x, n, s);
	if (t == DG_F16)
		return unscale_loop(DG_F16, x, n, s);
	return unscale_loop(DG_BF16, x, n, s);
}

const dg_optim_kernels dg_optim_avx2 = {
	.adam = adam_avx2,
	.sgd = sgd_avx2,
	.lion = lion_avx2,
	.lamb_moments = lamb_mom_avx2,
	.lamb_apply = lamb_apply_avx2,
	.unscale = unscale_avx2,
};

#endif /* DG_HAVE_X86 */
