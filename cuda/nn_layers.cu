/*
 * nn_layers.cu — device twins of csrc/nn_layernorm.c, nn_gelu.c,
 * nn_encoder.c and nn_crossentropy.c. Same checks, layouts and rules
 * (backward passes accumulate, the cross-entropy backward writes); element
 * math from dg_nn_math.h (its own tanh and exp); every sum in the CPU's
 * order (nn.cuh), so only the loss's log can make the bits differ
 * (deepgo_cuda.h).
 *
 * Parallel shapes (the CPU's summation order fixes what may run at once):
 *   row kernels (layernorm, softmax): one warp per row, ordered warp sums;
 *   column sums (layernorm dw/db, embedding gradients): one thread per
 *     channel walking the rows in order, as each CPU thread does;
 *   elementwise (gelu, add, encoder forward, xent backward): grid-stride.
 */
#include <math.h>

#include "nn.cuh"

/* ---- token / target checks ---------------------------------------------- */

__global__ void __launch_bounds__(NN_BLOCK) nn_check_ids(const int32_t *ids, int64_t n, int64_t v, int *flag)
{
	int bad = 0;
	for (int64_t i = blockIdx.x * (int64_t)NN_BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * NN_BLOCK)
		bad |= ids[i] < 0 || ids[i] >= v;
	if (__syncthreads_or(bad) && threadIdx.x == 0)
		*flag = 1;
}

dg_status nn_ids_flag(dg_cuda_ctx *ctx, const int32_t *ids, int64_t n, int64_t v, int *invalid, int **flag)
{
	if (invalid == NULL) {
		if (ctx->nn_flag == NULL) {
			dg_status s = dg_cu_ctx_alloc(ctx, (void **)&ctx->nn_flag, sizeof(int));
			if (s != DG_OK)
				return s;
		}
		invalid = ctx->nn_flag;
	}
	DG_CU_CTX(ctx, cudaMemsetAsync(invalid, 0, sizeof(int), ctx->stream));
	if (n > 0) {
		DG_CU_LAUNCH(ctx, nn_check_ids, nn_blocks(n), NN_BLOCK, ids, n, v, invalid);
	}
	*flag = invalid;
	return DG_OK;
}

/* ---- layernorm ----------------------------------------------------------- */

/* one warp per row: mean and variance in double, summed in the CPU's 16
 * interleaved lanes and tree (nn_lanes_add) */
__global__ void __launch_bounds__(NN_BLOCK)
	ln_fwd(float *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
	       const float *__restrict__ inp, const float *__restrict__ w, const float *__restrict__ b, float eps,
	       int64_t n, int64_t c)
{
	int64_t r = blockIdx.x * (int64_t)NN_WARPS + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (r >= n) /* the whole warp */
		return;
	const float *x = inp + r * c;
	double m = 0.0;
	for (int64_t base = 0; base < c; base += 32) {
		int64_t i = base + lane;
		double xi = i < c ? (double)x[i] : 0.0;
		m = nn_lanes_add(m, xi, (int)min((int64_t)32, c - base));
	}
	m = nn_lanes_sum(m) / (double)c;
	double var = 0.0;
	for (int64_t base = 0; base < c; base += 32) {
		int64_t i = base + lane;
		double d = i < c ? x[i] - m : 0.0;
		var = nn_lanes_add(var, d * d, (int)min((int64_t)32, c - base));
	}
	var = nn_lanes_sum(var) / (double)c;
	float s = (float)(1.0 / sqrt(var + (double)eps));
	float mf = (float)m;
	float *o = out + r * c;
	for (int64_t i = lane; i < c; i += 32)
		o[i] = dg_nn_ln_out(x[i], mf, s, w[i], b[i]);
	if (lane == 0) {
		mean[r] = mf;
		rstd[r] = s;
	}
}

dg_status dg_cuda_nn_layernorm_forward(dg_cuda_ctx *ctx, float *out, float *mean, float *rstd, const float *inp,
				       const float *w, const float *b, float eps, int64_t n, int64_t c)
{
	DG_CU_ENTER(ctx);
	if (out == NULL || mean == NULL || rstd == NULL || inp == NULL || w == NULL || b == NULL || n < 0 || c <= 0 ||
	    !(eps >= 0.0f))
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_layernorm_forward",
				     "NULL tensor, n < 0, c <= 0 or eps not >= 0");
	if (n == 0)
		return DG_OK;
	DG_CU_LAUNCH(ctx, ln_fwd, nn_warp_blocks(n), NN_BLOCK, out, mean, rstd, inp, w, b, eps, n, c);
	return DG_OK;
}

/* one warp per row: dx += (dnorm - mean(dnorm) - norm * mean(dnorm*norm)) * rstd,
 * the two means summed in the CPU's lanes (nn_lanes_add) */
__global__ void __launch_bounds__(NN_BLOCK)
	ln_dinp(float *__restrict__ dinp, const float *__restrict__ dout, const float *__restrict__ inp,
		const float *__restrict__ w, const float *__restrict__ mean, const float *__restrict__ rstd,
		int64_t n, int64_t c)
{
	int64_t r = blockIdx.x * (int64_t)NN_WARPS + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (r >= n)
		return;
	const float *x = inp + r * c, *d = dout + r * c;
	float m = mean[r], s = rstd[r];
	float a = 0.0f, bsum = 0.0f;
	for (int64_t base = 0; base < c; base += 32) {
		int64_t i = base + lane;
		float dn = 0.0f, norm = 0.0f;
		if (i < c) {
			norm = dg_nn_ln_norm(x[i], m, s);
			dn = w[i] * d[i];
		}
		int k = (int)min((int64_t)32, c - base);
		a = nn_lanes_add(a, dn, k);
		bsum = nn_lanes_add(bsum, dn * norm, k);
	}
	a = nn_lanes_sum(a) / (float)c;
	bsum = nn_lanes_sum(bsum) / (float)c;
	float *dx = dinp + r * c;
	for (int64_t i = lane; i < c; i += 32) {
		float norm = dg_nn_ln_norm(x[i], m, s);
		float dn = w[i] * d[i];
		dx[i] += dg_nn_ln_dinp(dn, norm, a, bsum, s);
	}
}

/* one thread per channel, rows in order (the CPU's ln_dw_task) */
__global__ void __launch_bounds__(NN_BLOCK)
	ln_dwdb(float *__restrict__ dw, float *__restrict__ db, const float *__restrict__ dout,
		const float *__restrict__ inp, const float *__restrict__ mean, const float *__restrict__ rstd,
		int64_t n, int64_t c)
{
	int64_t i = blockIdx.x * (int64_t)NN_BLOCK + threadIdx.x;
	if (i >= c)
		return;
	float aw = dw ? dw[i] : 0.0f, ab = db ? db[i] : 0.0f;
	for (int64_t r = 0; r < n; r++) {
		float d = dout[r * c + i];
		aw += dg_nn_ln_norm(inp[r * c + i], mean[r], rstd[r]) * d;
		ab += d;
	}
	if (dw)
		dw[i] = aw;
	if (db)
		db[i] = ab;
}

dg_status dg_cuda_nn_layernorm_backward(dg_cuda_ctx *ctx, float *dinp, float *dw, float *db, const float *dout,
					const float *inp, const float *w, const float *mean, const float *rstd,
					int64_t n, int64_t c)
{
	DG_CU_ENTER(ctx);
	if (dout == NULL || inp == NULL || w == NULL || mean == NULL || rstd == NULL || n < 0 || c <= 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_layernorm_backward",
				     "NULL tensor, n < 0 or c <= 0");
	if (n == 0)
		return DG_OK;
	if (dinp != NULL) {
		DG_CU_LAUNCH(ctx, ln_dinp, nn_warp_blocks(n), NN_BLOCK, dinp, dout, inp, w, mean, rstd, n, c);
	}
	if (dw != NULL || db != NULL) {
		DG_CU_LAUNCH(ctx, ln_dwdb, (c + NN_BLOCK - 1) / NN_BLOCK, NN_BLOCK, dw, db, dout, inp, mean, rstd, n, c);
	}
	return DG_OK;
}

/* ---- gelu, add ------------------------------------------------------------ */

__global__ void __launch_bounds__(NN_BLOCK) gelu_fwd(float *out, const float *inp, int64_t n)
{
	NN_GRID_STRIDE(i, n) out[i] = dg_nn_gelu(inp[i]);
}

__global__ void __launch_bounds__(NN_BLOCK) gelu_bwd(float *dinp, const float *inp, const float *dout, int64_t n)
{
	NN_GRID_STRIDE(i, n) dinp[i] += dg_nn_gelu_grad(inp[i]) * dout[i];
}

/* out may alias a or b: each element is read before it is written, by one thread */
__global__ void __launch_bounds__(NN_BLOCK) nn_add(float *out, const float *a, const float *b, int64_t n)
{
	NN_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

dg_status dg_cuda_nn_gelu_forward(dg_cuda_ctx *ctx, float *out, const float *inp, int64_t n)
{
	DG_CU_ENTER(ctx);
	if (out == NULL || inp == NULL || n < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_gelu_forward", "NULL tensor or n < 0");
	if (n == 0)
		return DG_OK;
	DG_CU_LAUNCH(ctx, gelu_fwd, nn_blocks(n), NN_BLOCK, out, inp, n);
	return DG_OK;
}

dg_status dg_cuda_nn_gelu_backward(dg_cuda_ctx *ctx, float *dinp, const float *inp, const float *dout, int64_t n)
{
	DG_CU_ENTER(ctx);
	if (dinp == NULL || inp == NULL || dout == NULL || n < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_gelu_backward", "NULL tensor or n < 0");
	if (n == 0)
		return DG_OK;
	DG_CU_LAUNCH(ctx, gelu_bwd, nn_blocks(n), NN_BLOCK, dinp, inp, dout, n);
	return DG_OK;
}

dg_status dg_cuda_nn_add(dg_cuda_ctx *ctx, float *out, const float *a, const float *b, int64_t n)
{
	DG_CU_ENTER(ctx);
	if (out == NULL || a == NULL || b == NULL || n < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_add", "NULL tensor or n < 0");
	if (n == 0)
		return DG_OK;
	DG_CU_LAUNCH(ctx, nn_add, nn_blocks(n), NN_BLOCK, out, a, b, n);
	return DG_OK;
}

/* ---- encoder (token + position embedding) -------------------------------- */

__global__ void __launch_bounds__(NN_BLOCK)
	enc_fwd(float *__restrict__ out, const int32_t *__restrict__ tok, const float *__restrict__ wte,
		const float *__restrict__ wpe, int64_t t, int64_t c, int64_t n, const int *flag)
{
	if (*flag)
		return;
	NN_GRID_STRIDE(e, n * c)
	{
		int64_t r = e / c, i = e % c;
		out[e] = wte[(int64_t)tok[r] * c + i] + wpe[(r % t) * c + i];
	}
}

/* dwpe[t, i] += dout[b, t, i] for b = 0, 1, ...: one thread per (t, i) */
__global__ void __launch_bounds__(NN_BLOCK)
	enc_dwpe(float *__restrict__ dwpe, const float *__restrict__ dout, int64_t b, int64_t t, int64_t c,
		 const int *flag)
{
	if (*flag)
		return;
	NN_GRID_STRIDE(e, t * c)
	{
		float acc = dwpe[e];
		for (int64_t s = 0; s < b; s++)
			acc += dout[s * t * c + e];
		dwpe[e] = acc;
	}
}

/* dwte[tok[r], i] += dout[r, i] for r = 0, 1, ...: one thread per channel,
 * tokens in order, so a repeated token's sum runs as on the CPU. Only c
 * threads: a token sort (llm.c's bucketed backward) would parallelise
 * it, at the price of the CPU's order. */
__global__ void __launch_bounds__(NN_BLOCK)
	enc_dwte(float *__restrict__ dwte, const float *__restrict__ dout, const int32_t *__restrict__ tok,
		 int64_t n, int64_t c, const int *flag)
{
	int64_t i = blockIdx.x * (int64_t)NN_BLOCK + threadIdx.x;
	if (i >= c || *flag)
		return;
	for (int64_t r = 0; r < n; r++)
		dwte[(int64_t)tok[r] * c + i] += dout[r * c + i];
}

dg_status dg_cuda_nn_encoder_forward(dg_cuda_ctx *ctx, float *out, const int32_t *tok, const float *wte,
				     const float *wpe, int64_t b, int64_t t, int64_t c, int64_t v, int *invalid)
{
	DG_CU_ENTER(ctx);
	if (out == NULL || tok == NULL || wte == NULL || wpe == NULL || b < 0 || t < 0 || c < 0 || v < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_encoder_forward", "NULL tensor or negative size");
	int *flag;
	dg_status s = nn_ids_flag(ctx, tok, b * t, v, invalid, &flag);
	if (s != DG_OK || b * t * c == 0)
		return s;
	DG_CU_LAUNCH(ctx, enc_fwd, nn_blocks(b * t * c), NN_BLOCK, out, tok, wte, wpe, t, c, b * t, flag);
	return DG_OK;
}

dg_status dg_cuda_nn_encoder_backward(dg_cuda_ctx *ctx, float *dwte, float *dwpe, const float *dout,
				      const int32_t *tok, int64_t b, int64_t t, int64_t c, int64_t v, int *invalid)
{
	DG_CU_ENTER(ctx);
	if (dout == NULL || tok == NULL || b < 0 || t < 0 || c < 0 || v < 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_encoder_backward", "NULL tensor or negative size");
	int *flag;
	dg_status s = nn_ids_flag(ctx, tok, b * t, v, invalid, &flag);
	if (s != DG_OK || b * t * c == 0)
		return s;
	if (dwte != NULL) {
		DG_CU_LAUNCH(ctx, enc_dwte, (c + NN_BLOCK - 1) / NN_BLOCK, NN_BLOCK, dwte, dout, tok, b * t, c, flag);
	}
	if (dwpe != NULL) {
		DG_CU_LAUNCH(ctx, enc_dwpe, nn_blocks(t * c), NN_BLOCK, dwpe, dout, b, t, c, flag);
	}
	return DG_OK;
}

/* ---- softmax cross-entropy ------------------------------------------------ */

/* one warp per row; probs may alias logits (each lane writes only the
 * elements it read, after the warp has read the target's logit) */
__global__ void __launch_bounds__(NN_BLOCK)
	xent_fwd(float *probs, float *__restrict__ losses, const float *logits, const int32_t *__restrict__ targets,
		 int64_t n, int64_t v, const int *flag)
{
	int64_t r = blockIdx.x * (int64_t)NN_WARPS + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (r >= n || *flag)
		return;
	const float *x = logits + r * v;
	float *p = probs + r * v;
	float xt = x[targets[r]];
	float mx = -INFINITY;
	for (int64_t i = lane; i < v; i += 32)
		if (x[i] > mx)
			mx = x[i];
	mx = nn_warp_max(mx);
	__syncwarp(); /* every lane has read xt before p (maybe x) is written */
	double sum = 0.0;
	for (int64_t base = 0; base < v; base += 32) {
		int64_t i = base + lane;
		float e = 0.0f;
		if (i < v) {
			e = dg_nn_softmax_exp(x[i], mx);
			p[i] = e;
		}
		sum = nn_seq_add(sum, (double)e, (int)min((int64_t)32, v - base));
	}
	float inv = (float)(1.0 / sum);
	for (int64_t i = lane; i < v; i += 32)
		p[i] *= inv;
	if (lane == 0)
		losses[r] = (float)(log(sum) - ((double)xt - (double)mx));
}

/* dlogits may alias probs: one thread reads and writes each element */
__global__ void __launch_bounds__(NN_BLOCK)
	xent_bwd(float *dlogits, const float *probs, const int32_t *__restrict__ targets,
		 const float *__restrict__ dlosses, int64_t n, int64_t v, const int *flag)
{
	if (*flag)
		return;
	NN_GRID_STRIDE(e, n * v)
	{
		int64_t r = e / v, i = e % v;
		dlogits[e] = dg_nn_xent_grad(probs[e], i == targets[r], dlosses[r]);
	}
}

dg_status dg_cuda_nn_softmax_xent_forward(dg_cuda_ctx *ctx, float *probs, float *losses, const float *logits,
					  const int32_t *targets, int64_t n, int64_t v, int *invalid)
{
	DG_CU_ENTER(ctx);
	if (probs == NULL || losses == NULL || logits == NULL || targets == NULL || n < 0 || v <= 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_softmax_xent_forward",
				     "NULL tensor, n < 0 or v <= 0");
	int *flag;
	dg_status s = nn_ids_flag(ctx, targets, n, v, invalid, &flag);
	if (s != DG_OK || n == 0)
		return s;
	DG_CU_LAUNCH(ctx, xent_fwd, nn_warp_blocks(n), NN_BLOCK, probs, losses, logits, targets, n, v, flag);
	return DG_OK;
}

dg_status dg_cuda_nn_softmax_xent_backward(dg_cuda_ctx *ctx, float *dlogits, const float *probs,
					   const int32_t *targets, const float *dlosses, int64_t n, int64_t v,
					   int *invalid)
{
	DG_CU_ENTER(ctx);
	if (dlogits == NULL || probs == NULL || targets == NULL || dlosses == NULL || n < 0 || v <= 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_softmax_xent_backward",
				     "NULL tensor, n < 0 or v <= 0");
	int *flag;
	dg_status s = nn_ids_flag(ctx, targets, n, v, invalid, &flag);
	if (s != DG_OK || n == 0)
		return s;
	DG_CU_LAUNCH(ctx, xent_bwd, nn_blocks(n * v), NN_BLOCK, dlogits, probs, targets, dlosses, n, v, flag);
	return DG_OK;
}
