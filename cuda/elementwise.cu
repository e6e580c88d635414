/*
 * elementwise.cu — dg_cuda_cast, dg_cuda_scale, dg_cuda_axpy: one pass over
 * each list, element math from dg_math.h in float32, halves rounded to
 * nearest even on store. Built with -fmad=false so y + a*x is a multiply and
 * an add, as on the CPU.
 */
#include "mta.cuh"

template <dg_dtype A, dg_dtype B> struct CastOp {
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t) const
	{
		const typename Elem<A>::S *x = (const typename Elem<A>::S *)p[0];
		typename Elem<B>::S *y = (typename Elem<B>::S *)p[1];
		DG_FOR_STEPS(lo, hi, b)
		{
			typename Elem<A>::S r[DG_CU_ILP];
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi)
					r[k] = x[i];
			}
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi)
					y[i] = Elem<B>::store(Elem<A>::load(r[k]));
			}
		}
	}
};

template <dg_dtype T> struct ScaleOp {
	float alpha;
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t) const
	{
		typename Elem<T>::S *x = (typename Elem<T>::S *)p[0];
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
				if (i < hi)
					x[i] = Elem<T>::store(Elem<T>::load(r[k]) * alpha);
			}
		}
	}
};

/* y = narrow(dg_axpy_f32(alpha, widen(x), widen(y))): the CPU's
 * dg_axpy_mixed, which adds a float32 list into a half one as well */
template <dg_dtype TX, dg_dtype TY> struct AxpyOp {
	float alpha;
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t) const
	{
		const typename Elem<TX>::S *x = (const typename Elem<TX>::S *)p[0];
		typename Elem<TY>::S *y = (typename Elem<TY>::S *)p[1];
		DG_FOR_STEPS(lo, hi, b)
		{
			typename Elem<TX>::S rx[DG_CU_ILP];
			typename Elem<TY>::S ry[DG_CU_ILP];
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi) {
					rx[k] = x[i];
					ry[k] = y[i];
				}
			}
#pragma unroll
			for (int k = 0; k < DG_CU_ILP; k++) {
				int64_t i = DG_STEP_INDEX(b, k);
				if (i < hi)
					y[i] = Elem<TY>::store(dg_axpy_f32(alpha, Elem<TX>::load(rx[k]), Elem<TY>::load(ry[k])));
			}
		}
	}
};

template <dg_dtype A, dg_dtype B>
static dg_status cast_to(dg_cuda_ctx *ctx, const void *const *srcs, void *const *dsts, const int64_t *ns, int count)
{
	const void *const *lists[2] = {srcs, (const void *const *)dsts};
	return mta_apply<2>(ctx, lists, ns, count, CastOp<A, B>(), NULL);
}

template <dg_dtype A>
static dg_status cast_from(dg_cuda_ctx *ctx, dg_dtype dst, const void *const *srcs, void *const *dsts,
			   const int64_t *ns, int count)
{
	switch (dst) {
	case DG_F32: return cast_to<A, DG_F32>(ctx, srcs, dsts, ns, count);
	case DG_F16: return cast_to<A, DG_F16>(ctx, srcs, dsts, ns, count);
	default: return cast_to<A, DG_BF16>(ctx, srcs, dsts, ns, count);
	}
}

dg_status dg_cuda_cast(dg_cuda_ctx *ctx, dg_dtype src, dg_dtype dst, const void *const *srcs, void *const *dsts,
		       const int64_t *ns, int count)
{
	DG_CU_ENTER(ctx);
	if (!dg_cu_is_float(src) || !dg_cu_is_float(dst))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, "dg_cuda_cast", "dtypes: allowed F32, F16, BF16");
	dg_status s = dg_cu_check_list(ctx, "dg_cuda_cast", srcs, ns, count);
	if (s == DG_OK)
		s = dg_cu_check_list(ctx, "dg_cuda_cast", (const void *const *)dsts, ns, count);
	if (s != DG_OK)
		return s;
	if (src == dst) /* a bit copy: a cast through float would quiet signalling NaNs */
		return dg_cu_copy_lists(ctx, dg_cu_dtype_size(src), srcs, dsts, ns, count);
	return DG_CU_FLOAT_DISPATCH(src, cast_from, ctx, dst, srcs, dsts, ns, count);
}

template <dg_dtype T> static dg_status scale_as(dg_cuda_ctx *ctx, void *const *xs, const int64_t *ns, int count, float alpha)
{
	const void *const *lists[1] = {(const void *const *)xs};
	ScaleOp<T> op = {alpha};
	return mta_apply<1>(ctx, lists, ns, count, op, NULL);
}

dg_status dg_cuda_scale(dg_cuda_ctx *ctx, dg_dtype t, void *const *xs, const int64_t *ns, int count, float alpha)
{
	DG_CU_ENTER(ctx);
	if (!dg_cu_is_float(t))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, "dg_cuda_scale", "dtype: allowed F32, F16, BF16");
	dg_status s = dg_cu_check_list(ctx, "dg_cuda_scale", (const void *const *)xs, ns, count);
	if (s != DG_OK)
		return s;
	return DG_CU_FLOAT_DISPATCH(t, scale_as, ctx, xs, ns, count, alpha);
}

template <dg_dtype TX, dg_dtype TY>
static dg_status axpy_to(dg_cuda_ctx *ctx, float alpha, const void *const *xs, void *const *ys, const int64_t *ns,
			 int count)
{
	const void *const *lists[2] = {xs, (const void *const *)ys};
	AxpyOp<TX, TY> op = {alpha};
	return mta_apply<2>(ctx, lists, ns, count, op, NULL);
}

template <dg_dtype TX>
static dg_status axpy_from(dg_cuda_ctx *ctx, dg_dtype ty, float alpha, const void *const *xs, void *const *ys,
			   const int64_t *ns, int count)
{
	switch (ty) {
	case DG_F32: return axpy_to<TX, DG_F32>(ctx, alpha, xs, ys, ns, count);
	case DG_F16: return axpy_to<TX, DG_F16>(ctx, alpha, xs, ys, ns, count);
	default: return axpy_to<TX, DG_BF16>(ctx, alpha, xs, ys, ns, count);
	}
}

dg_status dg_cuda_axpy_mixed(dg_cuda_ctx *ctx, dg_dtype tx, dg_dtype ty, float alpha, const void *const *xs,
			     void *const *ys, const int64_t *ns, int count)
{
	DG_CU_ENTER(ctx);
	if (!dg_cu_is_float(tx) || !dg_cu_is_float(ty))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, "dg_cuda_axpy", "dtypes: allowed F32, F16, BF16");
	dg_status s = dg_cu_check_list(ctx, "dg_cuda_axpy", xs, ns, count);
	if (s == DG_OK)
		s = dg_cu_check_list(ctx, "dg_cuda_axpy", (const void *const *)ys, ns, count);
	if (s != DG_OK)
		return s;
	return DG_CU_FLOAT_DISPATCH(tx, axpy_from, ctx, ty, alpha, xs, ys, ns, count);
}

dg_status dg_cuda_axpy(dg_cuda_ctx *ctx, dg_dtype t, float alpha, const void *const *xs, void *const *ys,
		       const int64_t *ns, int count)
{
	return dg_cuda_axpy_mixed(ctx, t, t, alpha, xs, ys, ns, count);
}
