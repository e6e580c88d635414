/*
 * nn_linear.cu — the Linear layer with half-precision weights or gradients
 * (dg_cuda_nn_linear_*), and dg_cuda_add_f32, which folds a float32
 * contribution into a tensor of any floating dtype.
 *
 * The arithmetic stays float32 sgemm (nn_sgemm, pedantic math). A half w is
 * widened a tile of whole rows at a time (at most DG_CUDA_LINEAR_TILE
 * elements) into ctx->lin, so a vocabulary-sized matrix never needs a full
 * float32 copy. Tiling over output rows changes no element of out (each
 * depends on one row of w) nor of dw (each row of dw is one tile's), only
 * the grouping of dinp's sum over oc, which float32 rounding already makes
 * order-dependent. A half dw or dbias gets the call's float32 contribution
 * (beta 0 into the tile buffer, or a column sum from 0) and then one
 * rounding per element: dw = half(dw + contribution), as the CPU backend.
 */
#include "nn.cuh"

/* y[i] = T(y[i] + x[i]) */
template <dg_dtype T> __global__ void __launch_bounds__(NN_BLOCK) add_f32_k(typename Elem<T>::S *y, const float *x, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)NN_BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * NN_BLOCK)
		y[i] = Elem<T>::store(Elem<T>::load(y[i]) + x[i]);
}

template <dg_dtype T> static dg_status add_f32_as(dg_cuda_ctx *ctx, void *y, const float *x, int64_t n)
{
	DG_CU_LAUNCH(ctx, (add_f32_k<T>), nn_blocks(n), NN_BLOCK, (typename Elem<T>::S *)y, x, n);
	return DG_OK;
}

dg_status dg_cuda_add_f32(dg_cuda_ctx *ctx, dg_dtype t, void *y, const float *x, int64_t n)
{
	DG_CU_ENTER(ctx);
	if (!dg_cu_is_float(t))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, "dg_cuda_add_f32", "dtype: allowed F32, F16, BF16");
	if (n < 0 || (n > 0 && (y == NULL || x == NULL)))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_add_f32", "NULL tensor or negative size");
	if (n == 0)
		return DG_OK;
	return DG_CU_FLOAT_DISPATCH(t, add_f32_as, ctx, y, x, n);
}

/* out[r, :] = bias (or 0 when bias is NULL), every row */
__global__ void __launch_bounds__(NN_BLOCK) lin_fill_rows(float *out, const float *bias, int64_t n, int64_t oc)
{
	for (int64_t i = blockIdx.x * (int64_t)NN_BLOCK + threadIdx.x; i < n * oc; i += (int64_t)gridDim.x * NN_BLOCK)
		out[i] = bias ? bias[i % oc] : 0.0f;
}

/* db[o] = dout[0, o] + dout[1, o] + ... from 0, one row at a time (the
 * CPU's order), the contribution a half dbias then receives */
__global__ void __launch_bounds__(NN_BLOCK) lin_colsum(float *__restrict__ db, const float *__restrict__ dout, int64_t n, int64_t oc)
{
	int64_t o = blockIdx.x * (int64_t)NN_BLOCK + threadIdx.x;
	if (o >= oc)
		return;
	float acc = 0.0f;
	for (int64_t r = 0; r < n; r++)
		acc += dout[r * oc + o];
	db[o] = acc;
}

/* widen queues dst[0..n) = float(src[0..n)) (dtype t) with dg_cuda_cast. */
static dg_status widen(dg_cuda_ctx *ctx, dg_dtype t, float *dst, const void *src, int64_t n)
{
	const void *s[1] = {src};
	void *d[1] = {dst};
	return dg_cuda_cast(ctx, t, DG_F32, s, d, &n, 1);
}

/* at is element i of a tensor of dtype t. */
static const void *at(const void *p, dg_dtype t, int64_t i) { return (const char *)p + i * (int64_t)dg_cu_dtype_size(t); }

/* lin_sizes checks the common arguments; rows is the tile height. */
static dg_status lin_sizes(dg_cuda_ctx *ctx, const char *fn, dg_dtype wt, dg_dtype gt, int64_t n, int64_t c, int64_t oc,
			   int64_t *rows)
{
	if (!dg_cu_is_float(wt) || !dg_cu_is_float(gt))
		return dg_cu_invalid(ctx, DG_ERR_DTYPE, fn, "w and gradient dtypes: allowed F32, F16, BF16");
	if (n < 0 || c < 0 || oc < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "negative size");
	if (n > INT32_MAX || c > INT32_MAX || oc > INT32_MAX)
		return dg_cu_invalid(ctx, DG_ERR_SIZE, fn, "a size over INT32_MAX");
	int64_t r = DG_CUDA_LINEAR_TILE / (c > 0 ? c : 1);
	*rows = r < 1 ? 1 : r > oc ? oc : r;
	return DG_OK;
}

dg_status dg_cuda_nn_linear_forward(dg_cuda_ctx *ctx, float *out, const float *inp, dg_dtype wt, const void *w,
				    const void *bias, int64_t n, int64_t c, int64_t oc)
{
	static const char fn[] = "dg_cuda_nn_linear_forward";
	DG_CU_ENTER(ctx);
	if (wt == DG_F32)
		return dg_cuda_nn_matmul_forward(ctx, out, inp, (const float *)w, (const float *)bias, n, c, oc);
	if (out == NULL || inp == NULL || w == NULL)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "NULL tensor");
	int64_t rows;
	dg_status s = lin_sizes(ctx, fn, wt, DG_F32, n, c, oc, &rows);
	if (s != DG_OK || n == 0 || oc == 0)
		return s;
	/* ctx->lin: one tile of w, then the widened bias */
	s = dg_cu_grow(ctx, &ctx->lin, &ctx->lin_bytes, (size_t)(rows * c + oc) * sizeof(float));
	if (s != DG_OK)
		return s;
	float *tile = (float *)ctx->lin, *b32 = tile + rows * c;
	if (bias != NULL && (s = widen(ctx, wt, b32, bias, oc)) != DG_OK)
		return s;
	/* as the CPU: the bias first, then sgemm adds the product (beta 1) */
	if (bias != NULL || c == 0)
		DG_CU_LAUNCH(ctx, lin_fill_rows, nn_blocks(n * oc), NN_BLOCK, out, bias ? b32 : (const float *)NULL, n, oc);
	for (int64_t o0 = 0; c > 0 && o0 < oc; o0 += rows) {
		int64_t k = oc - o0 < rows ? oc - o0 : rows;
		if ((s = widen(ctx, wt, tile, at(w, wt, o0 * c), k * c)) != DG_OK)
			return s;
		/* out[:, o0:o0+k] (ld oc) = inp @ tile^T: column-major out^T[k,N] */
		if ((s = nn_sgemm(ctx, 1, 0, k, n, c, tile, c, inp, c, bias ? 1.0f : 0.0f, out + o0, oc)) != DG_OK)
			return s;
	}
	return DG_OK;
}

dg_status dg_cuda_nn_linear_backward(dg_cuda_ctx *ctx, float *dinp, dg_dtype gt, void *dw, void *dbias,
				     const float *dout, const float *inp, dg_dtype wt, const void *w, int64_t n,
				     int64_t c, int64_t oc)
{
	static const char fn[] = "dg_cuda_nn_linear_backward";
	DG_CU_ENTER(ctx);
	if (wt == DG_F32 && gt == DG_F32)
		return dg_cuda_nn_matmul_backward(ctx, dinp, (float *)dw, (float *)dbias, dout, inp, (const float *)w, n,
						  c, oc);
	if (dout == NULL)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "NULL dout");
	if ((dinp != NULL && w == NULL) || (dw != NULL && inp == NULL))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, fn, "dinp needs w, dw needs inp");
	int64_t rows;
	dg_status s = lin_sizes(ctx, fn, wt, gt, n, c, oc, &rows);
	if (s != DG_OK || n == 0 || oc == 0)
		return s;
	/* ctx->lin: a tile of w widened, a tile of dw's contribution, dbias's */
	s = dg_cu_grow(ctx, &ctx->lin, &ctx->lin_bytes, (size_t)(2 * rows * c + oc) * sizeof(float));
	if (s != DG_OK)
		return s;
	float *wtile = (float *)ctx->lin, *gtile = wtile + rows * c, *db32 = gtile + rows * c;
	if (dinp != NULL && c > 0) {
		if (wt == DG_F32) {
			/* dinp[N,C] += dout[N,OC] @ w[OC,C]: column-major dinp^T[C,N] += w^T[C,OC] @ dout^T[OC,N] */
			if ((s = nn_sgemm(ctx, 0, 0, c, n, oc, (const float *)w, c, dout, oc, 1.0f, dinp, c)) != DG_OK)
				return s;
		}
		for (int64_t o0 = 0; wt != DG_F32 && o0 < oc; o0 += rows) {
			int64_t k = oc - o0 < rows ? oc - o0 : rows;
			if ((s = widen(ctx, wt, wtile, at(w, wt, o0 * c), k * c)) != DG_OK)
				return s;
			/* dinp += dout[:, o0:o0+k] (ld oc) @ tile[k,C] */
			if ((s = nn_sgemm(ctx, 0, 0, c, n, k, wtile, c, dout + o0, oc, 1.0f, dinp, c)) != DG_OK)
				return s;
		}
	}
	if (dw != NULL && c > 0) {
		if (gt == DG_F32) {
			/* dw[OC,C] += dout^T @ inp: column-major dw^T[C,OC] += inp^T[C,N] @ op_T(dout^T[OC,N]) */
			if ((s = nn_sgemm(ctx, 0, 1, c, oc, n, inp, c, dout, oc, 1.0f, (float *)dw, c)) != DG_OK)
				return s;
		}
		for (int64_t o0 = 0; gt != DG_F32 && o0 < oc; o0 += rows) {
			int64_t k = oc - o0 < rows ? oc - o0 : rows;
			/* the tile's contribution dout[:, o0:o0+k]^T @ inp, then one rounding into dw's rows */
			if ((s = nn_sgemm(ctx, 0, 1, c, k, n, inp, c, dout + o0, oc, 0.0f, gtile, c)) != DG_OK)
				return s;
			if ((s = dg_cuda_add_f32(ctx, gt, (void *)at(dw, gt, o0 * c), gtile, k * c)) != DG_OK)
				return s;
		}
	}
	if (dbias != NULL) {
		int64_t blocks = (oc + NN_BLOCK - 1) / NN_BLOCK;
		if (gt == DG_F32) {
			/* the float32 path's order: accumulate from dbias itself */
			return dg_cuda_nn_matmul_backward(ctx, NULL, NULL, (float *)dbias, dout, NULL, NULL, n, c, oc);
		}
		DG_CU_LAUNCH(ctx, lin_colsum, blocks, NN_BLOCK, db32, dout, n, oc);
		return dg_cuda_add_f32(ctx, gt, dbias, db32, oc);
	}
	return DG_OK;
}
