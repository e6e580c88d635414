/*
 * optim_bf16.c — Adam/AdamW on bfloat16 master weights, bit for bit as
 * DeepSpeed's DeepSpeedCPUAdam steps bf16 parameters: the
 * bf16_master_weights_and_grads path, with float32 moments
 * (fp32_optimizer_states=True) or bfloat16 moments (bf16_optimizer_states,
 * fp32_optimizer_states=False). The element math and the coefficients are
 * dg_bf16_adam_math.h's, shared with the CUDA twin (cuda/optim_bf16.cu).
 */
#include "dg_bf16_adam_math.h"
#include "optim_internal.h"

typedef struct ds_job {
	const dg_optim_lists *l;
	dg_dtype st;
	dg_bf16_adam_coef k;
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
	const dg_bf16_adam_coef *k = &j->k;
	uint16_t *p = (uint16_t *)j->l->params[t] + off;
	const uint16_t *g = (const uint16_t *)j->l->grads[t] + off;
	size_t es = j->st == DG_BF16 ? 2u : 4u;
	float *m = (float *)((char *)j->l->exp_avg[t] + (size_t)off * es);
	float *v = (float *)((char *)j->l->exp_avg_sq[t] + (size_t)off * es);
	for (int64_t i = 0; i < n; i++) {
		float mom = ld_state(j->st, m, i), var = ld_state(j->st, v, i);
		p[i] = dg_adam_bf16_elem(k, p[i], g[i], &mom, &var);
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
	int64_t total;
	if ((st = dg_optim_check_lists(hp, l, &total)) != DG_OK)
		return st;
	ds_job j;
	memset(&j, 0, sizeof j);
	j.l = l;
	j.st = state_dtype;
	dg_bf16_adam_coef_make(hp, &j.k);
	dg_parallel_for(ctx, total, DG_GRAIN, total, ds_task, &j);
	return DG_OK;
}
