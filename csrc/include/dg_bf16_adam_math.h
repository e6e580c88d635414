/*
 * dg_bf16_adam_math.h — the element math of Adam/AdamW on bfloat16 master
 * weights (optim_bf16.c, cuda/optim_bf16.cu), bit for bit as DeepSpeed's
 * DeepSpeedCPUAdam (csrc/includes/cpu_adam.h, Step_AVX with AVX512 and the
 * scalar tail of cpu_adam_impl.cpp's Step_1) steps bf16 parameters.
 *
 * Unlike dg_optim_math.h this follows DeepSpeed's own operation order: the
 * fused multiply-adds it issues are explicit fmaf (one rounding, on the CPU
 * and the GPU alike), every other multiply and add is a statement of its
 * own, and both builds forbid contraction (ISO C; nvcc -fmad=false, clang
 * -ffp-contract=off), so no compiler fuses what DeepSpeed does not. sqrtf
 * and '/' are IEEE on both. The bf16 rounding is dg_math.h's bit-pattern
 * one (nearest even, NaN quieted with its sign and top payload kept).
 *
 * The coefficients are DeepSpeed's float ones, derived on the host once per
 * step: beta^t as a product of t float multiplies (Adam_Optimizer::
 * IncrementStep on consecutive steps), 1 - beta^t and 1/sqrt(1 - beta2^t)
 * in float, step_size = -lr/bc1 and w_decay = -lr*wd in float. Weight decay
 * applies only when it is > 0, as in DeepSpeed.
 */
#ifndef DG_BF16_ADAM_MATH_H
#define DG_BF16_ADAM_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "deepgo.h"
#include "dg_math.h"

/* dg_bf16_adam_coef: one step's float coefficients (DeepSpeed's names). */
typedef struct dg_bf16_adam_coef {
	float inv_scale, b1, b2, omb1, omb2, eps, wd, w_decay, step_size, bc2;
	int adamw, scaled;
} dg_bf16_adam_coef;

/* dg_bf16_adam_coef_make derives step hp->step's coefficients. Host code
 * only (the C core and the CUDA launcher alike): the one derivation. */
static inline void dg_bf16_adam_coef_make(const dg_optim_hparams *hp, dg_bf16_adam_coef *k)
{
	float b1 = (float)hp->beta1, b2 = (float)hp->beta2, alpha = (float)hp->lr;
	float b1t = 1.0f, b2t = 1.0f;
	for (int64_t i = 0; i < hp->step; i++) {
		b1t *= b1;
		b2t *= b2;
	}
	float bc1 = 1.0f, bc2 = 1.0f;
	if (hp->bias_correction) {
		bc1 = 1.0f - b1t;
		bc2 = 1.0f / sqrtf(1.0f - b2t);
	}
	memset(k, 0, sizeof *k);
	k->inv_scale = (float)(1.0 / hp->grad_scale);
	k->scaled = k->inv_scale != 1.0f;
	k->b1 = b1;
	k->b2 = b2;
	k->omb1 = 1.0f - b1;
	k->omb2 = 1.0f - b2;
	k->eps = (float)hp->eps;
	k->wd = (float)hp->weight_decay;
	k->w_decay = -1.0f * alpha * k->wd;
	k->step_size = -1.0f * alpha / bc1;
	k->bc2 = bc2;
	k->adamw = hp->adam_w_mode != 0;
}

/* dg_adam_bf16_elem steps one element: bf16 param p and grad g, moments
 * *m and *v widened to float by the caller. It returns the new parameter
 * rounded to bf16 and leaves the unrounded moments in *m and *v (the caller
 * stores them as float, or rounds them to bf16: the update used them
 * unrounded). DeepSpeed unscales and clips by multiplying the bf16 gradient
 * partition in place (mul_ on a bf16 tensor) before the optimizer runs;
 * here the grad is multiplied by 1/grad_scale in float and rounded to bf16,
 * the same value. */
DG_HD uint16_t dg_adam_bf16_elem(const dg_bf16_adam_coef *k, uint16_t p, uint16_t g, float *m, float *v)
{
	float grad = dg_bf16_to_f32(g);
	if (k->scaled)
		grad = dg_bf16_to_f32(dg_f32_to_bf16(grad * k->inv_scale));
	float param = dg_bf16_to_f32(p);
	float mom = *m, var = *v;
	if (k->wd > 0.0f && !k->adamw)
		grad = fmaf(param, k->wd, grad);
	mom = mom * k->b1;
	mom = fmaf(grad, k->omb1, mom);
	var = var * k->b2;
	grad = grad * grad;
	var = fmaf(grad, k->omb2, var);
	grad = sqrtf(var);
	grad = fmaf(grad, k->bc2, k->eps);
	grad = mom / grad;
	if (k->wd > 0.0f && k->adamw)
		param = fmaf(param, k->w_decay, param);
	param = fmaf(grad, k->step_size, param);
	*m = mom;
	*v = var;
	return dg_f32_to_bf16(param);
}

#endif /* DG_BF16_ADAM_MATH_H */
