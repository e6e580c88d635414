/*
 * optim.c — the optimizer entry points: argument checks, the per-step
 * coefficients, and the walk of a tensor list over the pool. The leaf loops
 * live in optim_{scalar,avx2,avx512}.c.
 *
 * The list is treated as one concatenated range of elements split at
 * DG_GRAIN multiples over the threads; each thread turns its range back into
 * per-tensor runs. Element updates are independent, so the split never
 * changes a bit. Lamb's per-tensor norms instead use fixed blocks (see
 * optim_internal.h) so that they, too, do not depend on the split.
 */
#include <math.h>
#include <stdlib.h>

#include "optim_internal.h"

static const dg_optim_kernels *table_for(const dg_ctx *ctx)
{
#if DG_HAVE_X86
	switch (dg_ctx_isa(ctx)) {
	case DG_ISA_AVX512: return &dg_optim_avx512;
	case DG_ISA_AVX2: return &dg_optim_avx2;
	default: break;
	}
#else
	(void)ctx;
#endif
	return &dg_optim_scalar;
}

/* dg_optim_check_hparams and dg_optim_coef_make live in dg_optim_math.h: the
 * CUDA launcher calls them too. */

static int is_float(dg_dtype t) { return t == DG_F32 || t == DG_F16 || t == DG_BF16; }

dg_status dg_optim_check_lists(const dg_optim_hparams *hp, const dg_optim_lists *l, int64_t *total)
{
	if (l == NULL || l->count < 0 || (l->count > 0 && (l->ns == NULL || l->params == NULL || l->grads == NULL)))
		return DG_ERR_INVALID;
	if (!is_float(l->param_dtype) || !is_float(l->grad_dtype))
		return DG_ERR_DTYPE;
	if (l->copies != NULL && (l->param_dtype != DG_F32 || (l->copy_dtype != DG_F16 && l->copy_dtype != DG_BF16)))
		return DG_ERR_DTYPE;
	int need_m = hp->kind != DG_OPTIM_SGD || hp->momentum != 0.0;
	int need_v = hp->kind == DG_OPTIM_ADAM || hp->kind == DG_OPTIM_LAMB;
	if (l->count > 0 && ((need_m && l->exp_avg == NULL) || (need_v && l->exp_avg_sq == NULL)))
		return DG_ERR_INVALID;
	int64_t sum = 0;
	for (int i = 0; i < l->count; i++) {
		int64_t n = l->ns[i];
		if (n < 0)
			return DG_ERR_INVALID;
		if (n == 0)
			continue;
		if (l->params[i] == NULL || l->grads[i] == NULL || (need_m && l->exp_avg[i] == NULL) ||
		    (need_v && l->exp_avg_sq[i] == NULL) || (l->copies != NULL && l->copies[i] == NULL))
			return DG_ERR_INVALID;
		if (n > INT64_MAX - sum)
			return DG_ERR_SIZE;
		sum += n;
	}
	*total = sum;
	return DG_OK;
}

typedef struct step_job {
	const dg_optim_kernels *tab;
	const dg_optim_hparams *hp;
	const dg_optim_lists *l;
	dg_optim_types t;
	dg_optim_coef k;
	int need_m, need_v;
	const float *lamb_scale; /* Lamb apply: per tensor */
	/* Lamb moments: blocks */
	const int *blk_tensor;
	const int64_t *blk_off;
	double *blk_sums; /* 2 per block */
} step_job;

static size_t esize(dg_dtype t) { return t == DG_F32 ? 4u : 2u; }

static dg_optim_run make_run(const step_job *j, int i, int64_t off, int64_t n)
{
	const dg_optim_lists *l = j->l;
	dg_optim_run r = {0};
	r.p = (char *)l->params[i] + (size_t)off * esize(l->param_dtype);
	r.g = (const char *)l->grads[i] + (size_t)off * esize(l->grad_dtype);
	r.m = j->need_m ? l->exp_avg[i] + off : NULL;
	r.v = j->need_v ? l->exp_avg_sq[i] + off : NULL;
	r.c = l->copies != NULL ? (char *)l->copies[i] + (size_t)off * esize(l->copy_dtype) : NULL;
	r.n = n;
	r.lamb_scale = j->lamb_scale != NULL ? j->lamb_scale[i] : 0.0f;
	return r;
}

static int step_run(const void *arg, int i, int64_t off, int64_t n)
{
	const step_job *j = arg;
	dg_optim_run r = make_run(j, i, off, n);
	switch (j->hp->kind) {
	case DG_OPTIM_ADAM: j->tab->adam(&j->k, j->t, &r); break;
	case DG_OPTIM_SGD: j->tab->sgd(&j->k, j->t, &r); break;
	case DG_OPTIM_LION: j->tab->lion(&j->k, j->t, &r); break;
	case DG_OPTIM_LAMB: j->tab->lamb_apply(&j->k, j->t, &r); break;
	}
	return 0;
}

static void step_task(void *arg, int64_t lo, int64_t hi)
{
	const step_job *j = arg;
	dg_list_run(j->l->ns, j->l->count, lo, hi, step_run, j);
}

static void lamb_block_task(void *arg, int64_t lo, int64_t hi)
{
	const step_job *j = arg;
	for (int64_t b = lo; b < hi; b++) {
		int i = j->blk_tensor[b];
		int64_t off = j->blk_off[b], n = j->l->ns[i] - off;
		if (n > DG_LAMB_BLOCK)
			n = DG_LAMB_BLOCK;
		dg_optim_run r = make_run(j, i, off, n);
		j->tab->lamb_moments(&j->k, j->t, &r, &j->blk_sums[2 * b]);
	}
}

/* Lamb: pass 1 updates the moments block by block and sums ||p||^2, ||u||^2;
 * the trust ratio of each tensor then scales pass 2, which recomputes u. */
static dg_status lamb_step(dg_ctx *ctx, step_job *j, int64_t total, double *trust)
{
	const dg_optim_lists *l = j->l;
	int64_t nblk = 0;
	for (int i = 0; i < l->count; i++)
		nblk += (l->ns[i] + DG_LAMB_BLOCK - 1) / DG_LAMB_BLOCK;
	int *bt = malloc((size_t)(nblk > 0 ? nblk : 1) * sizeof *bt);
	int64_t *bo = malloc((size_t)(nblk > 0 ? nblk : 1) * sizeof *bo);
	double *sums = malloc((size_t)(nblk > 0 ? nblk : 1) * 2 * sizeof *sums);
	float *scale = malloc((size_t)(l->count > 0 ? l->count : 1) * sizeof *scale);
	dg_status st = DG_ERR_NOMEM;
	if (bt == NULL || bo == NULL || sums == NULL || scale == NULL)
		goto out;
	int64_t b = 0;
	for (int i = 0; i < l->count; i++)
		for (int64_t off = 0; off < l->ns[i]; off += DG_LAMB_BLOCK, b++) {
			bt[b] = i;
			bo[b] = off;
		}
	j->blk_tensor = bt;
	j->blk_off = bo;
	j->blk_sums = sums;
	dg_parallel_for(ctx, nblk, 1, total, lamb_block_task, j);
	b = 0;
	for (int i = 0; i < l->count; i++) {
		double ps = 0, us = 0;
		for (int64_t off = 0; off < l->ns[i]; off += DG_LAMB_BLOCK, b++) {
			ps += sums[2 * b];
			us += sums[2 * b + 1];
		}
		double tr = dg_lamb_trust(sqrt(ps), sqrt(us), j->hp->min_coeff, j->hp->max_coeff);
		scale[i] = (float)(-j->hp->lr * tr);
		if (trust != NULL)
			trust[i] = tr;
	}
	j->lamb_scale = scale;
	dg_parallel_for(ctx, total, DG_GRAIN, total, step_task, j);
	st = DG_OK;
out:
	free(bt);
	free(bo);
	free(sums);
	free(scale);
	return st;
}

dg_status dg_optim_step(dg_ctx *ctx, const dg_optim_hparams *hp, const dg_optim_lists *l, double *trust)
{
	if (ctx == NULL)
		return DG_ERR_INVALID;
	dg_status st = dg_optim_check_hparams(hp);
	if (st != DG_OK)
		return st;
	int64_t total = 0;
	if ((st = dg_optim_check_lists(hp, l, &total)) != DG_OK)
		return st;
	step_job j = {0};
	j.tab = table_for(ctx);
	j.hp = hp;
	j.l = l;
	j.t = (dg_optim_types){l->param_dtype, l->grad_dtype, l->copies != NULL ? l->copy_dtype : DG_NOCOPY};
	j.need_m = hp->kind != DG_OPTIM_SGD || hp->momentum != 0.0;
	j.need_v = hp->kind == DG_OPTIM_ADAM || hp->kind == DG_OPTIM_LAMB;
	dg_optim_coef_make(hp, &j.k);
	if (hp->kind == DG_OPTIM_LAMB)
		return lamb_step(ctx, &j, total, trust);
	dg_parallel_for(ctx, total, DG_GRAIN, total, step_task, &j);
	return DG_OK;
}

typedef struct unscale_job {
	const dg_optim_kernels *tab;
	dg_dtype t;
	void *const *xs;
	const int64_t *ns;
	int count;
	float s;
	int found; /* set with an atomic OR by whichever thread sees a non-finite */
} unscale_job;

static int unscale_run(const void *arg, int i, int64_t off, int64_t n)
{
	const unscale_job *j = arg;
	return j->tab->unscale(j->t, (char *)j->xs[i] + (size_t)off * esize(j->t), n, j->s);
}

static void unscale_task(void *arg, int64_t lo, int64_t hi)
{
	unscale_job *j = arg;
	if (dg_list_run(j->ns, j->count, lo, hi, unscale_run, j))
		__atomic_fetch_or(&j->found, 1, __ATOMIC_RELAXED);
}

dg_status dg_unscale_check(dg_ctx *ctx, dg_dtype t, void *const *xs, const int64_t *ns, int count, float inv_scale,
			   int *found)
{
	if (ctx == NULL || found == NULL)
		return DG_ERR_INVALID;
	if (!is_float(t))
		return DG_ERR_DTYPE;
	int64_t total = 0;
	dg_status st = dg_check_list((const void *const *)xs, ns, count, &total);
	if (st != DG_OK)
		return st;
	unscale_job j = {table_for(ctx), t, xs, ns, count, inv_scale, 0};
	dg_parallel_for(ctx, total, DG_GRAIN, total, unscale_task, &j);
	*found = j.found;
	return DG_OK;
}

/* Deliberately plain: the loop a C programmer writes first, compiled with the
 * package's -O2 and no target attributes. The benchmark divides by it. */
dg_status dg_adamw_naive_ref(const dg_optim_hparams *hp, float *p, const float *g, float *m, float *v, int64_t n)
{
	if (hp == NULL || n < 0 || (n > 0 && (p == NULL || g == NULL || m == NULL || v == NULL)))
		return DG_ERR_INVALID;
	dg_optim_coef k;
	dg_optim_coef_make(hp, &k);
	for (int64_t i = 0; i < n; i++)
		p[i] = dg_adam_elem(&k, p[i], g[i], &m[i], &v[i]);
	return DG_OK;
}
