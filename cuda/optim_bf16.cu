/*
 * optim_bf16.cu — dg_cuda_adam_bf16_step: deepgo.h's dg_adam_bf16_step
 * (DeepSpeedCPUAdam on bfloat16 master weights) on device lists,
 * multi-tensor (mta.cuh), stream-ordered. The element math and the float
 * coefficients are dg_bf16_adam_math.h's, as in csrc/optim_bf16.c: its
 * fused multiply-adds are explicit fmaf, the build's -fmad=false (clang:
 * -ffp-contract=off) keeps every other multiply and add unfused, and sqrtf
 * and '/' are IEEE, so params and moments come out in the CPU's bits.
 */
#include "dg_bf16_adam_math.h"
#include "dg_optim_math.h"
#include "mta.cuh"

/* list slots: param, grad (bf16), exp_avg, exp_avg_sq (state dtype ST) */
enum { BP, BG, BM, BV, BN };

template <dg_dtype ST> struct AdamBF16Op {
	dg_bf16_adam_coef k;
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t) const
	{
		typedef typename Elem<ST>::S S;
		uint16_t *P = (uint16_t *)p[BP];
		const uint16_t *G = (const uint16_t *)p[BG];
		S *M = (S *)p[BM], *V = (S *)p[BV];
		const dg_bf16_adam_coef kk = k; /* a local: taking a parameter's address would spill it */
		DG_FOR_STEPS(lo, hi, b)
		{
			uint16_t rp[DG_CU_ILP] = {0}, rg[DG_CU_ILP] = {0};
			float rm[DG_CU_ILP] = {0}, rv[DG_CU_ILP] = {0};
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi) {
					rp[k] = P[i];
					rg[k] = G[i];
					rm[k] = Elem<ST>::load(M[i]);
					rv[k] = Elem<ST>::load(V[i]);
				}
			}
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i >= hi)
					continue;
				P[i] = dg_adam_bf16_elem(&kk, rp[k], rg[k], &rm[k], &rv[k]);
				M[i] = Elem<ST>::store(rm[k]);
				V[i] = Elem<ST>::store(rv[k]);
			}
		}
	}
};

/* check is optim_bf16.c's dg_adam_bf16_step check, with messages. */
static dg_status check(dg_cuda_ctx *ctx, const dg_optim_hparams *hp, const dg_optim_lists *l, dg_dtype st)
{
	static const char fn[] = "dg_cuda_adam_bf16_step";
	dg_status s = dg_optim_check_hparams(hp);
	if (s != DG_OK)
		return dg_cu_invalid(ctx, s, fn, "a hyperparameter out of range (see deepgo.h)");
	if (hp->kind != DG_OPTIM_ADAM)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "kind: allowed DG_OPTIM_ADAM");
	if (l == NULL)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "NULL lists");
	if (l->param_dtype != DG_BF16 || l->grad_dtype != DG_BF16 || l->copies != NULL ||
	    (st != DG_F32 && st != DG_BF16))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, fn,
				     "params and grads BF16, no copies, states F32 or BF16");
	return dg_cu_check_optim_lists(ctx, fn, l, 1, 1);
}

dg_status dg_cuda_adam_bf16_step(dg_cuda_ctx *ctx, const dg_optim_hparams *hp, const dg_optim_lists *l,
				 dg_dtype state_dtype)
{
	DG_CU_ENTER(ctx);
	dg_status st = check(ctx, hp, l, state_dtype);
	if (st != DG_OK)
		return st;
	const void *const *lists[BN] = {(const void *const *)l->params, l->grads, (const void *const *)l->exp_avg,
					(const void *const *)l->exp_avg_sq};
	dg_bf16_adam_coef k;
	dg_bf16_adam_coef_make(hp, &k);
	if (state_dtype == DG_BF16) {
		AdamBF16Op<DG_BF16> op = {k};
		return mta_apply<BN>(ctx, lists, l->ns, l->count, op, NULL);
	}
	AdamBF16Op<DG_F32> op = {k};
	return mta_apply<BN>(ctx, lists, l->ns, l->count, op, NULL);
}
