/*
 * optim_scalar.c — the optimizer leaf loops written directly on
 * dg_optim_math.h: the oracle the SIMD tables are tested against, and the
 * path of non-x86 builds.
 */
#include "optim_internal.h"

static inline float ld(dg_dtype t, const void *p, int64_t i)
{
	if (t == DG_F16)
		return dg_f16_to_f32(((const uint16_t *)p)[i]);
	if (t == DG_BF16)
		return dg_bf16_to_f32(((const uint16_t *)p)[i]);
	return ((const float *)p)[i];
}

static inline void st(dg_dtype t, void *p, int64_t i, float v)
{
	if (t == DG_F16)
		((uint16_t *)p)[i] = dg_f32_to_f16(v);
	else if (t == DG_BF16)
		((uint16_t *)p)[i] = dg_f32_to_bf16(v);
	else
		((float *)p)[i] = v;
}

/* write the updated parameter and, when asked, its 16-bit copy */
#define PUT(PT, CT, r, i, np)                                                                                     \
	do {                                                                                                       \
		st(PT, (r)->p, i, np);                                                                             \
		if (CT != DG_NOCOPY)                                                                               \
			st(CT, (r)->c, i, np);                                                                     \
	} while (0)

#define ADAM_LOOP(PT, GT, CT, k, r)                                                                               \
	for (int64_t i = 0; i < (r)->n; i++) {                                                                     \
		float np = dg_adam_elem(k, ld(PT, (r)->p, i), ld(GT, (r)->g, i), &(r)->m[i], &(r)->v[i]);          \
		PUT(PT, CT, r, i, np);                                                                             \
	}

static void adam_scalar(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(ADAM_LOOP, t, k, r);
}

#define SGD_LOOP(PT, GT, CT, k, r)                                                                                \
	for (int64_t i = 0; i < (r)->n; i++) {                                                                     \
		float *b = (r)->m != NULL ? &(r)->m[i] : NULL;                                                     \
		float np = dg_sgd_elem(k, ld(PT, (r)->p, i), ld(GT, (r)->g, i), b);                                \
		PUT(PT, CT, r, i, np);                                                                             \
	}

static void sgd_scalar(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(SGD_LOOP, t, k, r);
}

#define LION_LOOP(PT, GT, CT, k, r)                                                                               \
	for (int64_t i = 0; i < (r)->n; i++) {                                                                     \
		float np = dg_lion_elem(k, ld(PT, (r)->p, i), ld(GT, (r)->g, i), &(r)->m[i]);                      \
		PUT(PT, CT, r, i, np);                                                                             \
	}

static void lion_scalar(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(LION_LOOP, t, k, r);
}

#define LAMB_MOM_LOOP(PT, GT, CT, k, r, ps, us)                                                                   \
	for (int64_t i = 0; i < (r)->n; i++) {                                                                     \
		float p = ld(PT, (r)->p, i);                                                                       \
		float u = dg_lamb_moments(k, p, ld(GT, (r)->g, i), &(r)->m[i], &(r)->v[i]);                        \
		ps[i % DG_LAMB_LANES] += (double)p * (double)p;                                                    \
		us[i % DG_LAMB_LANES] += (double)u * (double)u;                                                    \
	}

static void lamb_moments_scalar(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r, double out[2])
{
	double ps[DG_LAMB_LANES] = {0}, us[DG_LAMB_LANES] = {0};
	DG_OPTIM_DISPATCH(LAMB_MOM_LOOP, t, k, r, ps, us);
	out[0] = out[1] = 0;
	for (int j = 0; j < DG_LAMB_LANES; j++) {
		out[0] += ps[j];
		out[1] += us[j];
	}
}

#define LAMB_APPLY_LOOP(PT, GT, CT, k, r)                                                                         \
	for (int64_t i = 0; i < (r)->n; i++) {                                                                     \
		float p = ld(PT, (r)->p, i);                                                                       \
		float np = dg_lamb_apply(p, dg_lamb_dir(k, p, (r)->m[i], (r)->v[i]), (r)->lamb_scale);             \
		PUT(PT, CT, r, i, np);                                                                             \
	}

static void lamb_apply_scalar(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r)
{
	DG_OPTIM_DISPATCH(LAMB_APPLY_LOOP, t, k, r);
}

static int unscale_scalar(dg_dtype t, void *x, int64_t n, float s)
{
	int bad = 0;
	for (int64_t i = 0; i < n; i++) {
		float y = ld(t, x, i) * s;
		st(t, x, i, y);
		/* test the stored value: a finite float32 can round to Inf in 16 bits */
		bad |= !dg_isfinite_f32(ld(t, x, i));
	}
	return bad;
}

const dg_optim_kernels dg_optim_scalar = {
	.adam = adam_scalar,
	.sgd = sgd_scalar,
	.lion = lion_scalar,
	.lamb_moments = lamb_moments_scalar,
	.lamb_apply = lamb_apply_scalar,
	.unscale = unscale_scalar,
};
