/*
 * dg_optim_math.h — the element math of the fused optimizers, written once
 * for the scalar C loops, the SIMD loops (which mirror every operation below
 * in the same order with vector intrinsics) and the CUDA kernels.
 *
 * Rules that make the three agree bit for bit:
 *   - every step is one IEEE float32 operation: explicit multiply, then add,
 *     never a fused multiply-add (the C core is built in ISO C mode, where
 *     GCC does not contract; nvcc needs -fmad=false);
 *   - sqrtf and '/' are correctly rounded everywhere (VSQRTPS/VDIVPS; nvcc's
 *     default -prec-sqrt=true -prec-div=true);
 *   - the per-step coefficients (bias corrections, -lr/bc1, ...) are derived
 *     once, in double, by dg_optim_coef_make and rounded to float, so no
 *     launcher computes them differently.
 *
 * Semantics follow DeepSpeed (csrc/includes/cpu_adam.h, cpu_lion.h, FusedLamb)
 * and torch.optim.SGD; see each function.
 */
#ifndef DG_OPTIM_MATH_H
#define DG_OPTIM_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "deepgo.h"
#include "dg_math.h"

/* dg_optim_coef: one step's float32 coefficients, shared by all elements. */
typedef struct dg_optim_coef {
	float inv_scale; /* grads are multiplied by this: 1 / (loss scale * clip factor) */
	float b1, omb1;  /* beta1, 1 - beta1 (rounded from double, not 1.0f - b1) */
	float b2, omb2;  /* beta2, 1 - beta2 */
	float eps;
	float l2;        /* Adam (adam_w_mode off), SGD: added to the grad as l2*p; Lamb: to the update */
	float decay;     /* AdamW: -lr*wd (p += decay*p); Lion: 1 - lr*wd (p *= decay) */
	float step_size; /* Adam: -lr/bc1; SGD, Lion: -lr */
	float bc2;       /* Adam: 1/sqrt(1 - beta2^t), 1 without bias correction */
	float rbc1;      /* Lamb: 1/(1 - beta1^t) */
	float rbc2;      /* Lamb: 1/(1 - beta2^t) */
	float momentum;  /* SGD */
	float omd;       /* SGD: 1 - dampening */
	int adamw;       /* Adam: decoupled weight decay */
	int nesterov;    /* SGD */
	int first;       /* SGD: step 1 sets the momentum buffer to the grad, as torch does */
} dg_optim_coef;

/* dg_optim_check_hparams is dg_optim_step's hyperparameter check (deepgo.h),
 * shared with the CUDA launcher so both refuse the same steps. */
static inline int dg_optim_in01(double x) { return x >= 0.0 && x < 1.0; } /* false for NaN */
static inline int dg_optim_nonneg(double x) { return x >= 0.0 && isfinite(x); }

static inline dg_status dg_optim_check_hparams(const dg_optim_hparams *hp)
{
	if (hp == NULL || hp->step < 1 || !dg_optim_nonneg(hp->lr) || !dg_optim_nonneg(hp->weight_decay))
		return DG_ERR_INVALID;
	if (!(hp->grad_scale > 0.0) || !isfinite(hp->grad_scale))
		return DG_ERR_INVALID;
	switch (hp->kind) {
	case DG_OPTIM_ADAM:
	case DG_OPTIM_LAMB:
		if (!dg_optim_in01(hp->beta1) || !dg_optim_in01(hp->beta2) || !dg_optim_nonneg(hp->eps))
			return DG_ERR_INVALID;
		if (hp->kind == DG_OPTIM_LAMB && (!dg_optim_nonneg(hp->min_coeff) || !dg_optim_nonneg(hp->max_coeff) ||
						  hp->min_coeff > hp->max_coeff))
			return DG_ERR_INVALID;
		return DG_OK;
	case DG_OPTIM_LION:
		/* Lion's betas may be 0 but, as in DeepSpeed, not 1 */
		return dg_optim_in01(hp->beta1) && dg_optim_in01(hp->beta2) ? DG_OK : DG_ERR_INVALID;
	case DG_OPTIM_SGD:
		if (!dg_optim_nonneg(hp->momentum) || !(hp->dampening >= 0.0 && hp->dampening <= 1.0))
			return DG_ERR_INVALID;
		if (hp->nesterov && (hp->momentum <= 0.0 || hp->dampening != 0.0))
			return DG_ERR_INVALID;
		return DG_OK;
	}
	return DG_ERR_INVALID;
}

/* dg_optim_coef_make derives the float coefficients of step hp->step, in
 * double and rounded once. Host code only (C core and CUDA launcher alike),
 * so both round the same libm results: this is the one derivation. */
static inline void dg_optim_coef_make(const dg_optim_hparams *hp, dg_optim_coef *k)
{
	double t = (double)hp->step, lr = hp->lr, wd = hp->weight_decay;
	double bc1 = 1.0, bc2 = 1.0;
	if (hp->bias_correction) {
		bc1 = 1.0 - pow(hp->beta1, t);
		bc2 = 1.0 - pow(hp->beta2, t);
	}
	memset(k, 0, sizeof *k);
	k->inv_scale = (float)(1.0 / hp->grad_scale);
	k->b1 = (float)hp->beta1;
	k->omb1 = (float)(1.0 - hp->beta1);
	k->b2 = (float)hp->beta2;
	k->omb2 = (float)(1.0 - hp->beta2);
	k->eps = (float)hp->eps;
	k->l2 = (float)wd;
	switch (hp->kind) {
	case DG_OPTIM_ADAM:
		k->adamw = hp->adam_w_mode != 0;
		k->decay = (float)(-lr * wd);
		k->step_size = (float)(-lr / bc1);
		k->bc2 = (float)(1.0 / sqrt(bc2));
		break;
	case DG_OPTIM_LAMB:
		k->rbc1 = (float)(1.0 / bc1);
		k->rbc2 = (float)(1.0 / bc2);
		break;
	case DG_OPTIM_LION:
		k->decay = (float)(1.0 - lr * wd);
		k->step_size = (float)-lr;
		break;
	case DG_OPTIM_SGD:
		k->step_size = (float)-lr;
		k->momentum = (float)hp->momentum;
		k->omd = (float)(1.0 - hp->dampening);
		k->nesterov = hp->nesterov != 0;
		k->first = hp->step == 1;
		break;
	}
}

/* Adam/AdamW, DeepSpeed CPU Adam order. Returns the new parameter and
 * updates *m, *v. With adamw == 0 weight decay is L2 (added to the grad);
 * with adamw == 1 it is decoupled (p += -lr*wd*p before the Adam step). */
DG_HD float dg_adam_elem(const dg_optim_coef *k, float p, float g, float *m, float *v)
{
	g = g * k->inv_scale;
	if (!k->adamw)
		g = g + k->l2 * p;
	float mm = k->b1 * *m + k->omb1 * g;
	float vv = k->b2 * *v + k->omb2 * (g * g);
	*m = mm;
	*v = vv;
	float denom = sqrtf(vv) * k->bc2 + k->eps;
	if (k->adamw)
		p = p + k->decay * p;
	return p + k->step_size * (mm / denom);
}

/* SGD with momentum, dampening and Nesterov, as torch.optim.SGD: the first
 * step copies the grad into the buffer (no dampening). buf may be NULL when
 * momentum == 0. */
DG_HD float dg_sgd_elem(const dg_optim_coef *k, float p, float g, float *buf)
{
	g = g * k->inv_scale;
	g = g + k->l2 * p;
	if (buf != 0) {
		float b = k->first ? g : k->momentum * *buf + k->omd * g;
		*buf = b;
		g = k->nesterov ? g + k->momentum * b : b;
	}
	return p + k->step_size * g;
}

/* dg_sign_f32 is torch.sign: 1, -1, or c itself for +-0 and NaN. */
DG_HD float dg_sign_f32(float c) { return c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c); }

/* Lion (DeepSpeed cpu_lion.h / FusedLion): c = b1*m + (1-b1)*g;
 * p = p*(1 - lr*wd) - lr*sign(c); m = b2*m + (1-b2)*g. */
DG_HD float dg_lion_elem(const dg_optim_coef *k, float p, float g, float *m)
{
	g = g * k->inv_scale;
	float c = k->b1 * *m + k->omb1 * g;
	*m = k->b2 * *m + k->omb2 * g;
	return p * k->decay + k->step_size * dg_sign_f32(c);
}

/* Lamb, first pass: update the moments and return the update direction
 * u = m_hat / (sqrt(v_hat) + eps) + wd*p (apex/DeepSpeed FusedLamb, eps
 * outside the root). The trust ratio needs ||p|| and ||u|| of the whole
 * tensor, so the parameter is written by a second pass (dg_lamb_dir +
 * dg_lamb_apply) that recomputes u from the stored moments. */
DG_HD float dg_lamb_dir(const dg_optim_coef *k, float p, float m, float v)
{
	float mh = m * k->rbc1;
	float vh = v * k->rbc2;
	return mh / (sqrtf(vh) + k->eps) + k->l2 * p;
}

DG_HD float dg_lamb_moments(const dg_optim_coef *k, float p, float g, float *m, float *v)
{
	g = g * k->inv_scale;
	float mm = k->b1 * *m + k->omb1 * g;
	float vv = k->b2 * *v + k->omb2 * (g * g);
	*m = mm;
	*v = vv;
	return dg_lamb_dir(k, p, mm, vv);
}

/* p += (-lr * trust) * u; neg_lr_trust is rounded to float once per tensor. */
DG_HD float dg_lamb_apply(float p, float u, float neg_lr_trust) { return p + neg_lr_trust * u; }

/* dg_lamb_trust clamps ||p|| / ||u|| to [min_coeff, max_coeff]; 1 when either
 * norm is zero (a fresh zero tensor, or a zero update), as FusedLamb does. */
DG_HD double dg_lamb_trust(double pnorm, double unorm, double min_coeff, double max_coeff)
{
	if (!(pnorm > 0.0) || !(unorm > 0.0))
		return 1.0;
	double r = pnorm / unorm;
	return r < min_coeff ? min_coeff : (r > max_coeff ? max_coeff : r);
}

#endif /* DG_OPTIM_MATH_H */
