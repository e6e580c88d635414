/*
 * optim_internal.h — what optim*.c share: one contiguous run of a step, the
 * dtypes of a call, and the per-ISA table of optimizer leaf loops. Kept apart
 * from dg_internal.h's dg_kernels so the optimizer loops can change without
 * touching the core's table.
 */
#ifndef DG_OPTIM_INTERNAL_H
#define DG_OPTIM_INTERNAL_H

#include "dg_internal.h"
#include "dg_optim_math.h"

/* copy dtype meaning "no 16-bit copy" (an F32 copy of F32 params is never asked for) */
#define DG_NOCOPY DG_F32

/* dtypes of one call: params, grads, copy (DG_NOCOPY: none) */
typedef struct dg_optim_types {
	dg_dtype p, g, c;
} dg_optim_types;

/* One contiguous run of n elements of one tensor. m, v, c may be NULL when
 * the optimizer or call does not use them. */
typedef struct dg_optim_run {
	void *p;
	const void *g;
	float *m;
	float *v;
	void *c;
	int64_t n;
	float lamb_scale; /* Lamb apply: -lr * trust of this tensor */
} dg_optim_run;

/* Lamb's norms are summed in double over fixed blocks (runs never straddle a
 * block), element k of a block going to lane k % DG_LAMB_LANES; the lanes are
 * then added 0..15 in order. Every ISA keeps exactly these lanes, and squares
 * of floats are exact in double, so the sums agree bit for bit. */
#define DG_LAMB_LANES 16
#define DG_LAMB_BLOCK ((int64_t)65536)

/* dg_optim_check_lists checks l for a step of hp's kind (float dtypes; the
 * moments the kind reads; no NULL tensor where a count is positive; copies
 * F16/BF16 of F32 params only) and sums its element counts into *total:
 * DG_ERR_INVALID, DG_ERR_DTYPE or DG_ERR_SIZE otherwise. */
dg_status dg_optim_check_lists(const dg_optim_hparams *hp, const dg_optim_lists *l, int64_t *total);

typedef struct dg_optim_kernels {
	void (*adam)(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r);
	void (*sgd)(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r);
	void (*lion)(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r);
	/* moments update; out[0] = sum p^2, out[1] = sum u^2 over the run */
	void (*lamb_moments)(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r, double out[2]);
	void (*lamb_apply)(const dg_optim_coef *k, dg_optim_types t, const dg_optim_run *r);
	/* x *= s in place; nonzero when a result is Inf or NaN */
	int (*unscale)(dg_dtype t, void *x, int64_t n, float s);
} dg_optim_kernels;

extern const dg_optim_kernels dg_optim_scalar;
#if DG_HAVE_X86
extern const dg_optim_kernels dg_optim_avx2;
extern const dg_optim_kernels dg_optim_avx512;
#endif

/* DG_OPTIM_DISPATCH calls LOOP(PT, GT, CT, ...) with compile-time dtype
 * constants for the supported combinations, so each inlines into a loop with
 * no dtype tests: params F32 (copy none/F16/BF16) or F16/BF16 (no copy),
 * grads F32/F16/BF16. */
#define DG_OPTIM_DISPATCH_G(LOOP, PT, CT, t, ...)                                                                 \
	do {                                                                                                       \
		if ((t).g == DG_F32)                                                                               \
			{ LOOP(PT, DG_F32, CT, __VA_ARGS__); }                                                       \
		else if ((t).g == DG_F16)                                                                          \
			{ LOOP(PT, DG_F16, CT, __VA_ARGS__); }                                                       \
		else                                                                                               \
			{ LOOP(PT, DG_BF16, CT, __VA_ARGS__); }                                                      \
	} while (0)

#define DG_OPTIM_DISPATCH(LOOP, t, ...)                                                                           \
	do {                                                                                                       \
		if ((t).p == DG_F32 && (t).c == DG_NOCOPY)                                                         \
			DG_OPTIM_DISPATCH_G(LOOP, DG_F32, DG_NOCOPY, t, __VA_ARGS__);                              \
		else if ((t).p == DG_F32 && (t).c == DG_F16)                                                       \
			DG_OPTIM_DISPATCH_G(LOOP, DG_F32, DG_F16, t, __VA_ARGS__);                                 \
		else if ((t).p == DG_F32)                                                                          \
			DG_OPTIM_DISPATCH_G(LOOP, DG_F32, DG_BF16, t, __VA_ARGS__);                                \
		else if ((t).p == DG_F16)                                                                          \
			DG_OPTIM_DISPATCH_G(LOOP, DG_F16, DG_NOCOPY, t, __VA_ARGS__);                              \
		else                                                                                               \
			DG_OPTIM_DISPATCH_G(LOOP, DG_BF16, DG_NOCOPY, t, __VA_ARGS__);                             \
	} while (0)

#endif /* DG_OPTIM_INTERNAL_H */
