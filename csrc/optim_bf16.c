/*
 * optim_bf16.c — Adam/AdamW on bfloat16 master weights, bit for bit as
 * DeepSpeed's DeepSpeedCPUAdam (csrc/includes/cpu_adam.h, Step_AVX with
 * AVX512 and the scalar tail of cpu_adam_impl.cpp's Step_1) steps bf16
 * parameters: the bf16_master_weights_and_grads path, with float32 moments
 * (fp32_optimizer_states=True) or bfloat16 moments (bf16_optimizer_states,
 * fp32_optimizer_states=False).
 *
 * Each element is widened to float32 exactly, updated in float32 with
 * DeepSpeed's operation order and its fused multiply-adds (explicit fmaf, so
 * the result does not depend on compiler contraction), and the parameter and
 * the bf16 moments are rounded back to nearest even. The moments feed the
 * update unrounded; only what is stored is rounded. The coefficients are
 * DeepSpeed's float ones: beta^t as a product of t float multiplies
 * (Adam_Optimizer::IncrementStep on consecutive steps), 1 - beta^t and
 * 1/sqrt(1 - beta2^t) in float, step_size = -lr/bc1 and w_decay = -lr*wd in
 * float. Weight decay applies only when it is > 0, as in DeepSpeed.
 *
 * DeepSpeed unscales and clips by multiplying the bf16 gradient partition in
 * place (mul_ on a bf16 tensor) before the optimizer runs; here the grad is
 * multiplied by 1/grad_scale in float and rounded to bf16, the same value.
 */
#include <math.h>

#include "optim_internal.h"

typedef struct ds_coef {
	float inv_scale, b1, b2, omb1, omb2, eps, wd, w_decay, step_size, bc2;
	int adamw, scaled;
} ds_coef;

static void ds_coef_make(const dg_optim_hparams *hp, ds_coef *k)
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

typedef struct ds_job {
	const dg_optim_lists *l;
	dg_dtype st;
	ds_coef k;
} ds_job;

static inline float ld_state(dg_dtype st, const float *p, int64_t i)
{
	return st == DG_BF16 ? dg_bf16_to_f32(((const uint16_t *)p)[i]) : p[i];
}

static inline void st_state(dg_dtype st, float *p, int64_t i, float v)
{
	if (st == DG_BF16)
		((uint16_t *)p)[i] = dg_f32_to_bf16(v);
	else
		p[i] = v;
}

static int ds_run(const void *arg, int t, int64_t off, int64_t n)
{
	const ds_job *j = arg;
	const ds_coef *k = &j->k;
	uint16_t *p = (uint16_t *)j->l->params[t] + off;
	const uint16_t *g = (const uint16_t *)j->l->grads[t] + off;
	size_t es = j->st == DG_BF16 ? 2u : 4u;
	float *m = (float *)((char *)j->l->exp_avg[t] + (size_t)off * es);
	float *v = (float *)((char *)j->l->exp_avg_sq[t] + (size_t)off * es);
	for (int64_t i = 0; i < n; i++) {
		float grad = dg_bf16_to_f32(g[i]);
		if (k->scaled)
			grad = dg_bf16_to_f32(dg_f32_to_bf16(grad * k->inv_scale));
		float param = dg_bf16_to_f32(p[i]);
		float mom = ld_state(j->st, m, i), var = ld_state(j->st, v, i);
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
		p[i] = dg_f32_to_bf16(param);
		st_state(j->st, m, i, mom);
		st_state(j->st, v, i, var);
	}
	return 0;
}

static void ds_task(void *arg, int64_t lo, int64_t hi)
{
	const ds_job *j = arg;
	dg_list_run(j->l->ns, j->l->count, lo, hi, ds_run, j);
}

dg_status dg_adam_bf16_step(dg_ctx *ctx, const dg_optim_hparams *hp, const dg_optim_lists *l, dg_dtype state_dtype)
{
	if (ctx == NULL || l == NULL)
		return DG_ERR_INVALID;
	dg_status st = dg_optim_check_hparams(hp);
	if (st != DG_OK)
		return st;
	if (hp->kind != DG_OPTIM_ADAM)
		return DG_ERR_INVALID;
	if (l->param_dtype != DG_BF16 || l->grad_dtype != DG_BF16 || l->copies != NULL ||
	    (state_dtype != DG_F32 && state_dtype != DG_BF16))
		return DG_ERR_DTYPE;
	if (l->count < 0 || (l->count > 0 && (l->ns == NULL || l->params == NULL || l->grads == NULL ||
					      l->exp_avg == NULL || l->exp_avg_sq == NULL)))
		return DG_ERR_INVALID;
	int64_t total = 0;
	for (int i = 0; i < l->count; i++) {
		int64_t n = l->ns[i];
		if (n < 0)
			return DG_ERR_INVALID;
		if (n > 0 && (l->params[i] == NULL || l->grads[i] == NULL || l->exp_avg[i] == NULL ||
			      l->exp_avg_sq[i] == NULL))
			return DG_ERR_INVALID;
		if (n > INT64_MAX - total)
			return DG_ERR_SIZE;
		total += n;
	}
	ds_job j;
	memset(&j, 0, sizeof j);
	j.l = l;
	j.st = state_dtype;
	ds_coef_make(hp, &j.k);
	dg_parallel_for(ctx, total, DG_GRAIN, total, ds_task, &j);
	return DG_OK;
}
