/*
 * nn_attention.cu — device twin of csrc/nn_attention.c: causal multi-head
 * self-attention with an optional sliding window, same layouts (qkv
 * [B,T,3*NH*HS], out [B,T,NH*HS], att [B,NH,T,S], S = dg_nn_att_span(T, W),
 * key k of query q at slot k - first_key(q), zeros past the query), same
 * element math (dg_nn_math.h, the softmax's exponential included) and
 * every sum in a fixed order (nn.cuh): the CPU's products run in
 * OpenBLAS's order, this file's in its own, so the two agree to ~1e-6
 * relative, not bit for bit.
 *
 * Forward: one warp per (b, h, query): lanes take keys for the scores (each
 * lane a dot product over HS in order), the softmax sum is an ordered warp
 * sum, then lanes take channels for out = sum_k att[k] v_k, keys in order.
 *
 * Backward, two kernels, no float atomics:
 *   1. one warp per (b, h, q): dot_q = sum_k att[q,k] (dout_q . v_k), keys in
 *      order, saved in scratch (B*NH*T floats); then dq += ds[q,k] k_k for
 *      k in order, ds = att * (datt - dot) * scale;
 *   2. one warp per (b, h, k): dk += ds[q,k] q_q and dv += att[q,k] dout_q for
 *      the queries q that see k, in order, ds recomputed bit for bit.
 * Each thread keeps its running sum in its own dqkv elements, walking q in
 * order and for each q the keys in order. That was the CPU's order until
 * csrc/nn_attention.c moved to sgemm tiles; its sums now run in OpenBLAS's
 * blocking, which no kernel here reproduces, so the gradients agree with
 * the CPU to ~1e-6 relative (gpucheck and TestNNAttention allow 1e-5, as
 * for the forward), still deterministic run to run.
 */
#include <math.h>

#include "nn.cuh"

/* dot of a[0..hs) and b[0..hs) in order, as the CPU's `s += a[i] * b[i]` */
static __device__ __forceinline__ float seq_dot(const float *a, const float *b, int64_t hs)
{
	float s = 0.0f;
	for (int64_t i = 0; i < hs; i++)
		s += a[i] * b[i];
	return s;
}

__global__ void __launch_bounds__(NN_BLOCK)
	att_fwd(float *__restrict__ out, float *__restrict__ att, const float *__restrict__ qkv, int64_t B, int64_t T,
		int64_t NH, int64_t HS, int64_t window)
{
	int64_t u = blockIdx.x * (int64_t)NN_WARPS + threadIdx.x / 32; /* (b*NH + h)*T + q */
	int lane = threadIdx.x % 32;
	if (u >= B * NH * T)
		return;
	const int64_t C = NH * HS, C3 = 3 * C;
	const float scale = dg_nn_att_scale(HS);
	int64_t q = u % T, h = (u / T) % NH, b = u / (T * NH);
	const float *base = qkv + b * T * C3;
	const float *qv = base + q * C3 + h * HS;
	int64_t k0 = dg_nn_first_key(q, window);
	const int64_t span = dg_nn_att_span(T, window);
	float *row = att + u * span - k0; /* row[k] for k in k0..q */
	/* scores; lane l takes keys k0 + l, k0 + l + 32, ... here and below */
	float mx = -INFINITY;
	for (int64_t k = k0 + lane; k <= q; k += 32) {
		float s = seq_dot(qv, base + k * C3 + C + h * HS, HS);
		s *= scale;
		row[k] = s;
		if (s > mx)
			mx = s;
	}
	mx = nn_warp_max(mx);
	float sum = 0.0f;
	for (int64_t kb = k0; kb <= q; kb += 32) {
		int64_t k = kb + lane;
		float e = 0.0f;
		if (k <= q) {
			e = dg_nn_softmax_exp(row[k], mx);
			row[k] = e;
		}
		sum = nn_seq_add(sum, e, (int)min((int64_t)32, q - kb + 1));
	}
	float inv = 1.0f / sum;
	__syncwarp(); /* the lanes below read other lanes' row[k] */
	for (int64_t k = k0 + lane; k < k0 + span; k += 32)
		row[k] = k <= q ? row[k] * inv : 0.0f;
	__syncwarp(); /* and the weights, all of them, below */
	float *o = out + (b * T + q) * C + h * HS;
	for (int64_t i = lane; i < HS; i += 32) {
		float acc = 0.0f;
		for (int64_t k = k0; k <= q; k++)
			acc += row[k] * base[k * C3 + 2 * C + h * HS + i];
		o[i] = acc;
	}
}

dg_status dg_cuda_nn_attention_forward(dg_cuda_ctx *ctx, float *out, float *att, const float *qkv, int64_t b,
				       int64_t t, int64_t nh, int64_t hs, int64_t window)
{
	DG_CU_ENTER(ctx);
	if (out == NULL || att == NULL || qkv == NULL || b < 0 || t < 0 || nh <= 0 || hs <= 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_attention_forward",
				     "NULL tensor, b or t < 0, nh or hs <= 0");
	int64_t units = b * nh * t;
	if (units == 0)
		return DG_OK;
	DG_CU_LAUNCH(ctx, att_fwd, nn_warp_blocks(units), NN_BLOCK, out, att, qkv, b, t, nh, hs, window);
	return DG_OK;
}

/* kernel 1: one warp per (b, h, q) */
__global__ void __launch_bounds__(NN_BLOCK)
	att_bwd_q(float *__restrict__ dqkv, float *__restrict__ dots, const float *__restrict__ dout,
		  const float *__restrict__ qkv, const float *__restrict__ att, int64_t B, int64_t T, int64_t NH,
		  int64_t HS, int64_t window)
{
	int64_t u = blockIdx.x * (int64_t)NN_WARPS + threadIdx.x / 32; /* (b*NH + h)*T + q */
	int lane = threadIdx.x % 32;
	if (u >= B * NH * T)
		return;
	const int64_t C = NH * HS, C3 = 3 * C;
	const float scale = dg_nn_att_scale(HS);
	int64_t q = u % T, h = (u / T) % NH, b = u / (T * NH);
	const float *base = qkv + b * T * C3;
	int64_t k0 = dg_nn_first_key(q, window);
	const float *row = att + u * dg_nn_att_span(T, window) - k0;
	const float *d = dout + (b * T + q) * C + h * HS;
	/* pass 1: dot = sum_k att[k] * datt[k], keys in order; datt[k] = d . v_k */
	float dot = 0.0f;
	for (int64_t kb = k0; kb <= q; kb += 32) {
		int64_t k = kb + lane;
		float term = 0.0f;
		if (k <= q)
			term = row[k] * seq_dot(d, base + k * C3 + 2 * C + h * HS, HS);
		dot = nn_seq_add(dot, term, (int)min((int64_t)32, q - kb + 1));
	}
	if (lane == 0)
		dots[u] = dot;
	/* pass 2: dq += ds[k] * k_k, keys in order; lane l computes ds for key
	 * kb + l, then the warp applies the 32 keys one after another */
	float *dq = dqkv + b * T * C3 + q * C3 + h * HS;
	for (int64_t kb = k0; kb <= q; kb += 32) {
		int64_t k = kb + lane;
		float ds = 0.0f;
		if (k <= q)
			ds = dg_nn_att_dscore(row[k], seq_dot(d, base + k * C3 + 2 * C + h * HS, HS), dot, scale);
		int m = (int)min((int64_t)32, q - kb + 1);
		for (int j = 0; j < m; j++) {
			float dsj = __shfl_sync(NN_FULL, ds, j);
			const float *kv = base + (kb + j) * C3 + C + h * HS;
			for (int64_t i = lane; i < HS; i += 32)
				dq[i] += dsj * kv[i];
		}
	}
}

/* kernel 2: one warp per (b, h, k) */
__global__ void __launch_bounds__(NN_BLOCK)
	att_bwd_kv(float *__restrict__ dqkv, const float *__restrict__ dots, const float *__restrict__ dout,
		   const float *__restrict__ qkv, const float *__restrict__ att, int64_t B, int64_t T, int64_t NH,
		   int64_t HS, int64_t window)
{
	int64_t u = blockIdx.x * (int64_t)NN_WARPS + threadIdx.x / 32; /* (b*NH + h)*T + k */
	int lane = threadIdx.x % 32;
	if (u >= B * NH * T)
		return;
	const int64_t C = NH * HS, C3 = 3 * C;
	const float scale = dg_nn_att_scale(HS);
	int64_t k = u % T, bh = u / T, h = bh % NH, b = bh / NH;
	const float *base = qkv + b * T * C3;
	const float *vk = base + k * C3 + 2 * C + h * HS;
	float *dk = dqkv + b * T * C3 + k * C3 + C + h * HS;
	float *dv = dk + C;
	/* the queries that see key k: k .. k + window - 1 (all later ones without
	 * a window). window - 1 is compared with the distance to the last query,
	 * not added to k: k + window - 1 overflows for a window meaning
	 * "unbounded" (the maximum int), which would leave dk and dv at zero. */
	int64_t qmax = window > 0 && window - 1 < T - 1 - k ? k + window - 1 : T - 1;
	const int64_t span = dg_nn_att_span(T, window);
	for (int64_t qb = k; qb <= qmax; qb += 32) {
		int64_t q = qb + lane;
		float a = 0.0f, ds = 0.0f;
		if (q <= qmax) {
			const float *d = dout + (b * T + q) * C + h * HS;
			a = att[(bh * T + q) * span + k - dg_nn_first_key(q, window)];
			ds = dg_nn_att_dscore(a, seq_dot(d, vk, HS), dots[bh * T + q], scale);
		}
		int m = (int)min((int64_t)32, qmax - qb + 1);
		for (int j = 0; j < m; j++) {
			float dsj = __shfl_sync(NN_FULL, ds, j), aj = __shfl_sync(NN_FULL, a, j);
			const float *qv = base + (qb + j) * C3 + h * HS;
			const float *d = dout + (b * T + qb + j) * C + h * HS;
			for (int64_t i = lane; i < HS; i += 32) {
				dk[i] += dsj * qv[i];
				dv[i] += aj * d[i];
			}
		}
	}
}

dg_status dg_cuda_nn_attention_backward(dg_cuda_ctx *ctx, float *dqkv, const float *dout, const float *qkv,
					const float *att, int64_t b, int64_t t, int64_t nh, int64_t hs,
					int64_t window)
{
	DG_CU_ENTER(ctx);
	if (dqkv == NULL || dout == NULL || qkv == NULL || att == NULL || b < 0 || t < 0 || nh <= 0 || hs <= 0)
		return dg_cu_invalid(ctx, DG_ERR_INVALID, "dg_cuda_nn_attention_backward",
				     "NULL tensor, b or t < 0, nh or hs <= 0");
	int64_t units = b * nh * t;
	if (units == 0)
		return DG_OK;
	dg_status s = dg_cu_scratch(ctx, (size_t)units * sizeof(float));
	if (s != DG_OK)
		return s;
	float *dots = (float *)ctx->scratch;
	DG_CU_LAUNCH(ctx, att_bwd_q, nn_warp_blocks(units), NN_BLOCK, dqkv, dots, dout, qkv, att, b, t, nh, hs,
		     window);
	DG_CU_LAUNCH(ctx, att_bwd_kv, nn_warp_blocks(units), NN_BLOCK, dqkv, dots, dout, qkv, att, b, t, nh, hs,
		     window);
	return DG_OK;
}
