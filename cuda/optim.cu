/*
 * optim.cu — dg_cuda_optim_step and dg_cuda_unscale_check: deepgo.h's fused
 * optimizer steps on device lists, multi-tensor (mta.cuh), stream-ordered.
 * The element math, the hyperparameter check and the float coefficients all
 * come from dg_optim_math.h, as on the CPU, and the build's -fmad=false,
 * IEEE sqrtf and '/' keep every operation the CPU's: same bits.
 *
 * Lamb runs three launches: (1) moments + norm partials per chunk,
 * (2) one thread per tensor turns its partials into the trust ratio,
 * (3) the parameter update. The norms reproduce the CPU's summation order
 * exactly (csrc/optim_internal.h): a chunk (DG_CUDA_CHUNK) is the CPU's
 * DG_LAMB_BLOCK, element e of it goes to lane e % 16, each lane adds in
 * element order in double, lanes are added 0..15, then a tensor's chunks in
 * order. Squares of floats are exact in double, so same adds, same bits.
 */
#include <stdlib.h>
#include <type_traits>

#include "dg_optim_math.h"
#include "mta.cuh"

/* csrc/optim_internal.h's DG_LAMB_LANES and DG_LAMB_BLOCK: the norm order */
#define LAMB_LANES 16
static_assert(DG_CUDA_CHUNK == 65536, "a chunk must be the CPU's Lamb block");

/* the copy dtype meaning "none", as the CPU's DG_NOCOPY (F32 copies never occur) */
#define NOCOPY DG_F32

/* list slots of the step table; AUX is Lamb's per-tensor -lr*trust pointer */
enum { LP, LG, LM, LV, LC, LAUX, LN };

template <dg_dtype V> using DT = std::integral_constant<dg_dtype, V>;

/* Adam, SGD and Lion: one read and one write of every element. */
template <int KIND, dg_dtype PT, dg_dtype GT, dg_dtype CT> struct StepOp {
	dg_optim_coef k;
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t) const
	{
		typename Elem<PT>::S *P = (typename Elem<PT>::S *)p[LP];
		const typename Elem<GT>::S *G = (const typename Elem<GT>::S *)p[LG];
		float *M = (float *)p[LM], *V = (float *)p[LV];
		typename Elem<CT>::S *C = (typename Elem<CT>::S *)p[LC];
		const dg_optim_coef kk = k; /* a local: taking a parameter's address would spill it */
		DG_FOR_STEPS(lo, hi, b)
		{
			float rp[DG_CU_ILP], rg[DG_CU_ILP], rm[DG_CU_ILP] = {0}, rv[DG_CU_ILP] = {0};
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi) {
					rp[k] = Elem<PT>::load(P[i]);
					rg[k] = Elem<GT>::load(G[i]);
					if (M != NULL) /* NULL only for SGD without momentum */
						rm[k] = M[i];
					if (KIND == DG_OPTIM_ADAM)
						rv[k] = V[i];
				}
			}
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i >= hi)
					continue;
				float np;
				if (KIND == DG_OPTIM_ADAM)
					np = dg_adam_elem(&kk, rp[k], rg[k], &rm[k], &rv[k]);
				else if (KIND == DG_OPTIM_SGD)
					np = dg_sgd_elem(&kk, rp[k], rg[k], M != NULL ? &rm[k] : NULL);
				else
					np = dg_lion_elem(&kk, rp[k], rg[k], &rm[k]);
				P[i] = Elem<PT>::store(np);
				if (CT != NOCOPY)
					C[i] = Elem<CT>::store(np);
				if (M != NULL)
					M[i] = rm[k];
				if (KIND == DG_OPTIM_ADAM)
					V[i] = rv[k];
			}
		}
	}
};

/* Lamb pass 1. The block computes a tile's squares in parallel into shared
 * memory; then one warp adds them in the CPU's order, threads 0..15 the
 * lanes of ||p||^2, 16..31 those of ||u||^2. The serial adds (4096 per lane
 * per chunk) overlap other blocks' loads, so the pass stays memory-bound. */
#define LAMB_TILE (DG_CU_BLOCK * DG_CU_ILP)
static_assert(LAMB_TILE % LAMB_LANES == 0, "tiles must start at lane 0");

template <dg_dtype PT, dg_dtype GT> struct LambMomOp {
	dg_optim_coef k;
	double *partials; /* 2 per chunk: sum p^2, sum u^2 */
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t chunk) const
	{
		__shared__ double sq[2][LAMB_TILE];
		__shared__ double lanes[2 * LAMB_LANES];
		const typename Elem<PT>::S *P = (const typename Elem<PT>::S *)p[LP];
		const typename Elem<GT>::S *G = (const typename Elem<GT>::S *)p[LG];
		float *M = (float *)p[LM], *V = (float *)p[LV];
		const dg_optim_coef kk = k;
		double acc = 0.0; /* threads < 32: one lane's running sum */
		DG_FOR_STEPS(lo, hi, b)
		{
			float rp[DG_CU_ILP], rg[DG_CU_ILP], rm[DG_CU_ILP], rv[DG_CU_ILP];
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi) {
					rp[k] = Elem<PT>::load(P[i]);
					rg[k] = Elem<GT>::load(G[i]);
					rm[k] = M[i];
					rv[k] = V[i];
				}
			}
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi) {
					float u = dg_lamb_moments(&kk, rp[k], rg[k], &rm[k], &rv[k]);
					M[i] = rm[k];
					V[i] = rv[k];
					int j = (int)(i - b); /* tile index; (i - lo) % 16 == j % 16 */
					sq[0][j] = (double)rp[k] * (double)rp[k];
					sq[1][j] = (double)u * (double)u;
				}
			}
			__syncthreads();
			if (threadIdx.x < 2 * LAMB_LANES) {
				const double *s = sq[threadIdx.x / LAMB_LANES];
				int n = (int)min((int64_t)LAMB_TILE, hi - b);
				for (int j = threadIdx.x % LAMB_LANES; j < n; j += LAMB_LANES)
					acc += s[j];
			}
			__syncthreads(); /* the tile is rewritten next step */
		}
		if (threadIdx.x < 2 * LAMB_LANES)
			lanes[threadIdx.x] = acc;
		__syncthreads();
		if (threadIdx.x < 2) {
			double s = 0.0;
			for (int j = 0; j < LAMB_LANES; j++)
				s += lanes[threadIdx.x * LAMB_LANES + j];
			partials[2 * chunk + threadIdx.x] = s;
		}
	}
};

/* Lamb between the passes: tensor b's chunks are [start[b], start[b+1]). */
#define TRUST_TENSORS 400
struct TrustTable {
	int64_t start[TRUST_TENSORS + 1];
};

__global__ void lamb_trust(const __grid_constant__ TrustTable tab, int m, const double *partials, double lr,
			   double min_coeff, double max_coeff, float *scale, double *trust)
{
	int b = blockIdx.x * blockDim.x + threadIdx.x;
	if (b >= m)
		return;
	double ps = 0.0, us = 0.0; /* optim.c's lamb_step, operation for operation */
	for (int64_t c = tab.start[b]; c < tab.start[b + 1]; c++) {
		ps += partials[2 * c];
		us += partials[2 * c + 1];
	}
	double tr = dg_lamb_trust(sqrt(ps), sqrt(us), min_coeff, max_coeff);
	scale[b] = (float)(-lr * tr);
	if (trust != NULL)
		trust[b] = tr;
}

/* Lamb pass 2: recompute u from the stored moments and apply. */
template <dg_dtype PT, dg_dtype CT> struct LambApplyOp {
	dg_optim_coef k;
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t) const
	{
		typename Elem<PT>::S *P = (typename Elem<PT>::S *)p[LP];
		const float *M = (const float *)p[LM], *V = (const float *)p[LV];
		typename Elem<CT>::S *C = (typename Elem<CT>::S *)p[LC];
		const float scale = *(const float *)p[LAUX];
		const dg_optim_coef kk = k;
		DG_FOR_STEPS(lo, hi, b)
		{
			float rp[DG_CU_ILP], rm[DG_CU_ILP], rv[DG_CU_ILP];
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi) {
					rp[k] = Elem<PT>::load(P[i]);
					rm[k] = M[i];
					rv[k] = V[i];
				}
			}
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi) {
					float np = dg_lamb_apply(rp[k], dg_lamb_dir(&kk, rp[k], rm[k], rv[k]), scale);
					P[i] = Elem<PT>::store(np);
					if (CT != NOCOPY)
						C[i] = Elem<CT>::store(np);
				}
			}
		}
	}
};

template <dg_dtype T> struct UnscaleOp {
	float s;
	int *found;
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t) const
	{
		typename Elem<T>::S *x = (typename Elem<T>::S *)p[0];
		int bad = 0;
		DG_FOR_STEPS(lo, hi, b)
		{
			typename Elem<T>::S r[DG_CU_ILP];
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi)
					r[k] = x[i];
			}
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi) {
					typename Elem<T>::S y = Elem<T>::store(Elem<T>::load(r[k]) * s);
					x[i] = y;
					/* the stored value, as the CPU: a finite float can round to Inf in 16 bits */
					bad |= !Elem<T>::finite(y);
				}
			}
		}
		if (__syncthreads_or(bad) && threadIdx.x == 0)
			*found = 1; /* every writer stores 1: a benign race */
	}
};

/* ---- host side ----------------------------------------------------------- */

/* with_t / with_pc turn run-time dtypes into template arguments: any float
 * dtype; params F32 with copy none/F16/BF16, or F16/BF16 with none. */
template <class F> static dg_status with_t(dg_dtype t, F f)
{
	if (t == DG_F16)
		return f(DT<DG_F16>());
	if (t == DG_BF16)
		return f(DT<DG_BF16>());
	return f(DT<DG_F32>());
}

template <class F> static dg_status with_pc(dg_dtype p, dg_dtype c, F f)
{
	if (p == DG_F16)
		return f(DT<DG_F16>(), DT<NOCOPY>());
	if (p == DG_BF16)
		return f(DT<DG_BF16>(), DT<NOCOPY>());
	if (c == DG_F16)
		return f(DT<DG_F32>(), DT<DG_F16>());
	if (c == DG_BF16)
		return f(DT<DG_F32>(), DT<DG_BF16>());
	return f(DT<DG_F32>(), DT<NOCOPY>());
}

struct Step {
	dg_cuda_ctx *ctx;
	const dg_optim_hparams *hp;
	dg_optim_coef k;
	const void *const *lists[LN];
	const int64_t *ns;
	int count;
	dg_dtype pt, gt, ct;
};

template <class Op> static dg_status run(const Step &s, const Op &op)
{
	return mta_apply<LN>(s.ctx, s.lists, s.ns, s.count, op, NULL);
}

template <int KIND> static dg_status step_as(const Step &s)
{
	return with_pc(s.pt, s.ct, [&](auto P, auto C) {
		return with_t(s.gt, [&](auto G) {
			StepOp<KIND, decltype(P)::value, decltype(G)::value, decltype(C)::value> op = {s.k};
			return run(s, op);
		});
	});
}

static dg_status lamb_run(Step &s, double *trust, const int64_t *start, const void **aux)
{
	int64_t nch = start[s.count];
	dg_status st = dg_cu_scratch(s.ctx, (size_t)nch * 2 * sizeof(double) + (size_t)s.count * sizeof(float));
	if (st != DG_OK)
		return st;
	double *partials = (double *)s.ctx->scratch;
	float *scale = (float *)(partials + 2 * nch);
	st = with_t(s.pt, [&](auto P) {
		return with_t(s.gt, [&](auto G) {
			LambMomOp<decltype(P)::value, decltype(G)::value> op = {s.k, partials};
			return run(s, op);
		});
	});
	if (st != DG_OK)
		return st;
	TrustTable tab;
	for (int first = 0; first < s.count; first += TRUST_TENSORS) {
		int m = s.count - first < TRUST_TENSORS ? s.count - first : TRUST_TENSORS;
		for (int b = 0; b <= m; b++)
			tab.start[b] = start[first + b];
		DG_CU_LAUNCH(s.ctx, lamb_trust, (m + 127) / 128, 128, tab, m, partials, s.hp->lr, s.hp->min_coeff,
			     s.hp->max_coeff, scale + first, trust != NULL ? trust + first : NULL);
	}
	for (int i = 0; i < s.count; i++)
		aux[i] = scale + i;
	s.lists[LAUX] = aux;
	return with_pc(s.pt, s.ct, [&](auto P, auto C) {
		LambApplyOp<decltype(P)::value, decltype(C)::value> op = {s.k};
		return run(s, op);
	});
}

static dg_status lamb_step(Step &s, double *trust)
{
	int64_t *start = (int64_t *)malloc(sizeof(int64_t) * ((size_t)s.count + 1));
	const void **aux = (const void **)malloc(sizeof(void *) * ((size_t)s.count + 1));
	dg_status st = DG_ERR_NOMEM;
	if (start != NULL && aux != NULL) {
		/* chunk numbering as mta_apply counts: zero-size tensors have none */
		start[0] = 0;
		for (int i = 0; i < s.count; i++)
			start[i + 1] = start[i] + (s.ns[i] + DG_CUDA_CHUNK - 1) / DG_CUDA_CHUNK;
		st = lamb_run(s, trust, start, aux);
	}
	free(start);
	free(aux);
	return st;
}

dg_status dg_cu_check_optim_lists(dg_cuda_ctx *ctx, const char *fn, const dg_optim_lists *l, int need_m, int need_v)
{
	if (l == NULL || l->count < 0 || (l->count > 0 && (l->ns == NULL || l->params == NULL || l->grads == NULL)))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "NULL lists or a negative count");
	if (!dg_cu_is_float(l->param_dtype) || !dg_cu_is_float(l->grad_dtype))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, fn, "params and grads: allowed F32, F16, BF16");
	if (l->copies != NULL && (l->param_dtype != DG_F32 || (l->copy_dtype != DG_F16 && l->copy_dtype != DG_BF16)))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, fn, "copies: F16 or BF16, with F32 params only");
	if (l->count > 0 && ((need_m && l->exp_avg == NULL) || (need_v && l->exp_avg_sq == NULL)))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "exp_avg or exp_avg_sq list is NULL");
	int64_t sum = 0;
	for (int i = 0; i < l->count; i++) {
		int64_t n = l->ns[i];
		if (n < 0)
			return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "a negative element count");
		if (n == 0)
			continue;
		if (l->params[i] == NULL || l->grads[i] == NULL || (need_m && l->exp_avg[i] == NULL) ||
		    (need_v && l->exp_avg_sq[i] == NULL) || (l->copies != NULL && l->copies[i] == NULL))
			return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "a NULL tensor");
		if (n > INT64_MAX - sum)
			return dg_cu_invalid(ctx, DG_ERR_SIZE, fn, "total element count overflows");
		sum += n;
	}
	return DG_OK;
}

dg_status dg_cuda_optim_step(dg_cuda_ctx *ctx, const dg_optim_hparams *hp, const dg_optim_lists *l, double *trust)
{
	DG_CU_ENTER(ctx);
	dg_status st = dg_optim_check_hparams(hp);
	if (st != DG_OK)
		return dg_cu_invalid(ctx, st, "dg_cuda_optim_step", "a hyperparameter out of range (see deepgo.h)");
	/* as optim.c: SGD without momentum ignores exp_avg, only Adam/Lamb read exp_avg_sq */
	int need_m = hp->kind != DG_OPTIM_SGD || hp->momentum != 0.0;
	int need_v = hp->kind == DG_OPTIM_ADAM || hp->kind == DG_OPTIM_LAMB;
	if ((st = dg_cu_check_optim_lists(ctx, "dg_cuda_optim_step", l, need_m, need_v)) != DG_OK)
		return st;
	/* unused slots point at a list of NULLs: mta_apply reads every slot */
	const void **nulls = (const void **)calloc((size_t)l->count + 1, sizeof(void *));
	if (nulls == NULL)
		return DG_ERR_NOMEM;
	Step s;
	s.ctx = ctx;
	s.hp = hp;
	dg_optim_coef_make(hp, &s.k);
	s.lists[LP] = (const void *const *)l->params;
	s.lists[LG] = l->grads;
	s.lists[LM] = need_m ? (const void *const *)l->exp_avg : nulls;
	s.lists[LV] = need_v ? (const void *const *)l->exp_avg_sq : nulls;
	s.lists[LC] = l->copies != NULL ? (const void *const *)l->copies : nulls;
	s.lists[LAUX] = nulls;
	s.ns = l->ns;
	s.count = l->count;
	s.pt = l->param_dtype;
	s.gt = l->grad_dtype;
	s.ct = l->copies != NULL ? l->copy_dtype : NOCOPY;
	switch (hp->kind) {
	case DG_OPTIM_ADAM: st = step_as<DG_OPTIM_ADAM>(s); break;
	case DG_OPTIM_SGD: st = step_as<DG_OPTIM_SGD>(s); break;
	case DG_OPTIM_LION: st = step_as<DG_OPTIM_LION>(s); break;
	case DG_OPTIM_LAMB: st = lamb_step(s, trust); break;
	}
	free(nulls);
	return st;
}

dg_status dg_cuda_unscale_check(dg_cuda_ctx *ctx, dg_dtype t, void *const *xs, const int64_t *ns, int count,
				float inv_scale, int *found)
{
	static const char fn[] = "dg_cuda_unscale_check";
	DG_CU_ENTER(ctx);
	if (!dg_cu_is_float(t))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, fn, "dtype: allowed F32, F16, BF16");
	if (found == NULL)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "found is NULL");
	dg_status st = dg_cu_check_list(ctx, fn, (const void *const *)xs, ns, count);
	if (st != DG_OK)
		return st;
	DG_CU_CTX(ctx, cudaMemsetAsync(found, 0, sizeof(int), ctx->stream));
	const void *const *lists[1] = {(const void *const *)xs};
	return with_t(t, [&](auto T) {
		UnscaleOp<decltype(T)::value> op = {inv_scale, found};
		return mta_apply<1>(ctx, lists, ns, count, op, NULL);
	});
}
