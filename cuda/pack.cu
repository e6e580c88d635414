/*
 * pack.cu — bit copies between tensor lists and a flat buffer (dg_cuda_pack,
 * dg_cuda_unpack), and the same-dtype case of dg_cuda_cast. Copies move the
 * element's storage word (1, 2, 4 or 8 bytes), never through float, so every
 * bit pattern (NaN payloads, signalling NaNs) survives.
 */
#include <stdlib.h>

#include "mta.cuh"

template <typename U> struct CopyOp {
	__device__ void operator()(void *const *p, int64_t lo, int64_t hi, int64_t) const
	{
		const U *x = (const U *)p[0];
		U *y = (U *)p[1];
		DG_FOR_STEPS(lo, hi, b)
		{
			U r[DG_CU_ILP];
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
					y[i] = r[k];
			}
		}
	}
};

template <typename U>
static dg_status copy_as(dg_cuda_ctx *ctx, const void *const *srcs, void *const *dsts, const int64_t *ns, int count)
{
	const void *const *lists[2] = {srcs, (const void *const *)dsts};
	return mta_apply<2>(ctx, lists, ns, count, CopyOp<U>(), NULL);
}

dg_status dg_cu_copy_lists(dg_cuda_ctx *ctx, size_t esize, const void *const *srcs, void *const *dsts,
			   const int64_t *ns, int count)
{
	switch (esize) {
	case 1: return copy_as<uint8_t>(ctx, srcs, dsts, ns, count);
	case 2: return copy_as<uint16_t>(ctx, srcs, dsts, ns, count);
	case 4: return copy_as<uint32_t>(ctx, srcs, dsts, ns, count);
	case 8: return copy_as<uint64_t>(ctx, srcs, dsts, ns, count);
	}
	return dg_cu_invalid(ctx, DG_ERR_DTYPE, "copy", "element size not 1, 2, 4 or 8");
}

/* flat_ptrs checks the regions [offs[i], offs[i]+ns[i]) against flat_n and
 * returns malloc'd pointers flat + offs[i] (freed by the caller). */
static dg_status flat_ptrs(dg_cuda_ctx *ctx, const char *fn, dg_dtype t, const void *flat, int64_t flat_n,
			   const int64_t *offs, const int64_t *ns, int count, void ***out)
{
	size_t es = dg_cu_dtype_size(t);
	*out = NULL;
	if (es == 0)
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, fn, "unknown dtype");
	if (flat_n < 0 || (flat_n > 0 && flat == NULL) || (count > 0 && offs == NULL))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "bad flat buffer or offsets");
	void **p = (void **)malloc(sizeof(void *) * (count > 0 ? count : 1));
	if (p == NULL)
		return DG_ERR_NOMEM;
	for (int i = 0; i < count; i++) {
		if (offs[i] < 0 || offs[i] > flat_n - ns[i]) {
			free(p);
			return dg_cu_invalid(ctx, DG_ERR_SIZE, fn, "a region lies outside the flat buffer");
		}
		p[i] = (char *)flat + offs[i] * (int64_t)es;
	}
	*out = p;
	return DG_OK;
}

dg_status dg_cuda_pack(dg_cuda_ctx *ctx, dg_dtype t, const void *const *srcs, const int64_t *ns,
		       const int64_t *offs, int count, void *flat, int64_t flat_n)
{
	DG_CU_ENTER(ctx);
	dg_status s = dg_cu_check_list(ctx, "dg_cuda_pack", srcs, ns, count);
	void **dsts;
	if (s == DG_OK)
		s = flat_ptrs(ctx, "dg_cuda_pack", t, flat, flat_n, offs, ns, count, &dsts);
	if (s != DG_OK)
		return s;
	s = dg_cu_copy_lists(ctx, dg_cu_dtype_size(t), srcs, dsts, ns, count);
	free(dsts);
	return s;
}

dg_status dg_cuda_unpack(dg_cuda_ctx *ctx, dg_dtype t, const void *flat, int64_t flat_n, const int64_t *offs,
			 const int64_t *ns, void *const *dsts, int count)
{
	DG_CU_ENTER(ctx);
	dg_status s = dg_cu_check_list(ctx, "dg_cuda_unpack", (const void *const *)dsts, ns, count);
	void **srcs;
	if (s == DG_OK)
		s = flat_ptrs(ctx, "dg_cuda_unpack", t, flat, flat_n, offs, ns, count, &srcs);
	if (s != DG_OK)
		return s;
	s = dg_cu_copy_lists(ctx, dg_cu_dtype_size(t), (const void *const *)srcs, dsts, ns, count);
	free(srcs);
	return s;
}
