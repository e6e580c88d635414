/* test_nn.c — the nn kernels against plain double-precision loops, on 1 and
 * 3 threads, plus the argument checks. Backward kernels are checked for
 * accumulation (+=) by starting from non-zero gradients. */
#include <float.h>
#include <math.h>

#include "dg_nn_math.h"
#include "test_util.h"

static float *randv(uint64_t *s, int64_t n)
{
	float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
	for (int64_t i = 0; i < n; i++)
		p[i] = rng_float(s);
	return p;
}

/* max |a-b| / (1 + |b|) */
static double maxrel(const float *a, const double *b, int64_t n)
{
	double m = 0;
	for (int64_t i = 0; i < n; i++) {
		double e = fabs((double)a[i] - b[i]) / (1.0 + fabs(b[i]));
		if (!(e <= m))
			m = isnan(e) ? INFINITY : e;
	}
	return m;
}

static double *tod(const float *x, int64_t n)
{
	double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
	for (int64_t i = 0; i < n; i++)
		p[i] = x[i];
	return p;
}

#define TOL 2e-5

/* Shapes pick each split: rows everywhere (37, 19, 23); outputs and inputs
 * wider than the batch (20, 61, 300); and weights with more inputs than
 * outputs too (24, 300, 50). */
static void test_matmul(dg_ctx *ctx, uint64_t *s, int64_t n, int64_t c, int64_t oc)
{
	float *x = randv(s, n * c), *w = randv(s, oc * c), *b = randv(s, oc), *dout = randv(s, n * oc);
	float *out = calloc((size_t)(n * oc), sizeof(float));
	float *dx = randv(s, n * c), *dw = randv(s, oc * c), *db = randv(s, oc);
	double *rout = malloc(sizeof(double) * n * oc), *rdx = tod(dx, n * c), *rdw = tod(dw, oc * c),
	       *rdb = tod(db, oc);
	for (int64_t r = 0; r < n; r++)
		for (int64_t o = 0; o < oc; o++) {
			double a = b[o];
			for (int64_t i = 0; i < c; i++)
				a += (double)x[r * c + i] * w[o * c + i];
			rout[r * oc + o] = a;
		}
	for (int64_t r = 0; r < n; r++)
		for (int64_t o = 0; o < oc; o++) {
			double d = dout[r * oc + o];
			rdb[o] += d;
			for (int64_t i = 0; i < c; i++) {
				rdx[r * c + i] += d * w[o * c + i];
				rdw[o * c + i] += d * x[r * c + i];
			}
		}
	CHECK_OK(dg_nn_matmul_forward(ctx, out, x, w, b, n, c, oc));
	CHECK(maxrel(out, rout, n * oc) < TOL);
	CHECK_OK(dg_nn_matmul_backward(ctx, dx, dw, db, dout, x, w, n, c, oc));
	CHECK(maxrel(dx, rdx, n * c) < TOL);
	CHECK(maxrel(dw, rdw, oc * c) < TOL);
	CHECK(maxrel(db, rdb, oc) < TOL);
	/* no bias: plain product */
	CHECK_OK(dg_nn_matmul_forward(ctx, out, x, w, NULL, n, c, oc));
	for (int64_t o = 0; o < oc; o++)
		rout[o] -= b[o];
	CHECK(maxrel(out, rout, oc) < TOL);
	CHECK(dg_nn_matmul_forward(ctx, NULL, x, w, b, n, c, oc) == DG_ERR_INVALID);
	CHECK(dg_nn_matmul_forward(ctx, out, x, w, b, -1, c, oc) == DG_ERR_INVALID);
	free(x), free(w), free(b), free(dout), free(out), free(dx), free(dw), free(db);
	free(rout), free(rdx), free(rdw), free(rdb);
}

static void test_layernorm(dg_ctx *ctx, uint64_t *s)
{
	const int64_t n = 41, c = 24;
	float *x = randv(s, n * c), *w = randv(s, c), *b = randv(s, c), *dout = randv(s, n * c);
	float *out = malloc(sizeof(float) * n * c), *mean = malloc(sizeof(float) * n), *rstd = malloc(sizeof(float) * n);
	float *dx = randv(s, n * c), *dw = randv(s, c), *db = randv(s, c);
	double *rout = malloc(sizeof(double) * n * c), *rdx = tod(dx, n * c), *rdw = tod(dw, c), *rdb = tod(db, c);
	for (int64_t r = 0; r < n; r++) {
		const float *xr = x + r * c;
		double m = 0, v = 0;
		for (int64_t i = 0; i < c; i++)
			m += xr[i];
		m /= c;
		for (int64_t i = 0; i < c; i++)
			v += (xr[i] - m) * (xr[i] - m);
		v /= c;
		double rs = 1 / sqrt(v + 1e-5);
		double a = 0, bb = 0;
		for (int64_t i = 0; i < c; i++) {
			double nm = (xr[i] - m) * rs;
			rout[r * c + i] = nm * w[i] + b[i];
			double dn = dout[r * c + i] * (double)w[i];
			a += dn;
			bb += dn * nm;
			rdw[i] += nm * dout[r * c + i];
			rdb[i] += dout[r * c + i];
		}
		a /= c, bb /= c;
		for (int64_t i = 0; i < c; i++) {
			double nm = (xr[i] - m) * rs;
			rdx[r * c + i] += (dout[r * c + i] * (double)w[i] - a - nm * bb) * rs;
		}
	}
	CHECK_OK(dg_nn_layernorm_forward(ctx, out, mean, rstd, x, w, b, 1e-5f, n, c));
	CHECK(maxrel(out, rout, n * c) < TOL);
	CHECK_OK(dg_nn_layernorm_backward(ctx, dx, dw, db, dout, x, w, mean, rstd, n, c));
	CHECK(maxrel(dx, rdx, n * c) < 1e-4);
	CHECK(maxrel(dw, rdw, c) < TOL);
	CHECK(maxrel(db, rdb, c) < TOL);
	CHECK(dg_nn_layernorm_forward(ctx, out, mean, rstd, x, w, b, 1e-5f, n, 0) == DG_ERR_INVALID);
	free(x), free(w), free(b), free(dout), free(out), free(mean), free(rstd), free(dx), free(dw), free(db);
	free(rout), free(rdx), free(rdw), free(rdb);
}

static void test_gelu_add(dg_ctx *ctx, uint64_t *s)
{
	const int64_t n = 70001; /* over DG_INLINE_ELEMS, so the pool splits it */
	float *x = randv(s, n), *dout = randv(s, n), *out = malloc(sizeof(float) * n), *dx = randv(s, n);
	double *rout = malloc(sizeof(double) * n), *rdx = tod(dx, n);
	for (int64_t i = 0; i < n; i++)
		x[i] *= 4;
	for (int64_t i = 0; i < n; i++) {
		double v = x[i], k = sqrt(2 / 3.14159265358979323846), u = k * (v + 0.044715 * v * v * v), th = tanh(u);
		rout[i] = 0.5 * v * (1 + th);
		rdx[i] += (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * 0.044715 * v * v)) * dout[i];
	}
	CHECK_OK(dg_nn_gelu_forward(ctx, out, x, n));
	CHECK(maxrel(out, rout, n) < TOL);
	CHECK_OK(dg_nn_gelu_backward(ctx, dx, x, dout, n));
	CHECK(maxrel(dx, rdx, n) < TOL);
	CHECK_OK(dg_nn_add(ctx, out, x, dout, n));
	for (int64_t i = 0; i < n; i++)
		CHECK(out[i] == x[i] + dout[i]);
	free(x), free(dout), free(out), free(dx), free(rout), free(rdx);
}

/* worst_ulp is fn's largest error against the float64 ref, in ulps of the
 * rounded reference, over every 61st float in [lo, hi] whose rounded
 * reference is at least min in magnitude */
static double worst_ulp(float (*fn)(float), double (*ref)(double), float lo, float hi, float min)
{
	double worst = 0;
	for (uint64_t b = 0; b <= 0xffffffffu; b += 61) {
		uint32_t u32 = (uint32_t)b;
		float x;
		memcpy(&x, &u32, sizeof x);
		if (!(x >= lo && x <= hi))
			continue;
		double r = ref((double)x);
		float f = fabsf((float)r);
		if (f < min)
			continue;
		double e = fabs((double)fn(x) - r) / (nextafterf(f, INFINITY) - f);
		if (e > worst)
			worst = e;
	}
	return worst;
}

/* dg_nn_tanh within 7 ulp of the float64 tanh on every 61st float of
 * |u| <= 12 (beyond, the clamp returns the value at 7.905) and on the
 * special values; the exhaustive sweep measured 6.88 ulp at most */
static void test_tanh(void)
{
	double worst = worst_ulp(dg_nn_tanh, tanh, -12.0f, 12.0f, 0.0f);
	CHECK(worst <= 7.0);
	CHECK(dg_nn_tanh(INFINITY) == 1.0f && dg_nn_tanh(-INFINITY) == -1.0f);
	CHECK(dg_nn_tanh(1e30f) == 1.0f && dg_nn_tanh(-1e30f) == -1.0f);
	CHECK(isnan(dg_nn_tanh(NAN)));
	CHECK(dg_nn_tanh(0.0f) == 0.0f && signbit(dg_nn_tanh(-0.0f)));
	CHECK(dg_nn_tanh(1e-30f) == 1e-30f);
}

/* dg_nn_exp within 1 ulp of exp wherever e^x is a normal float (a stride
 * through every float; the whole range measured 0.99 ulp), 0 below, +Inf
 * above, NaN kept */
static void test_exp(void)
{
	double worst = worst_ulp(dg_nn_exp, exp, -87.3365402f, 88.7228317f, FLT_MIN);
	CHECK(worst < 1.0);
	CHECK(dg_nn_exp(0.0f) == 1.0f && dg_nn_exp(-0.0f) == 1.0f);
	CHECK(dg_nn_exp(-INFINITY) == 0.0f && dg_nn_exp(-88.0f) == 0.0f && dg_nn_exp(-1e30f) == 0.0f);
	CHECK(dg_nn_exp(INFINITY) == INFINITY && dg_nn_exp(89.0f) == INFINITY);
	CHECK(dg_nn_exp(88.72f) > 3.3e38f && dg_nn_exp(88.72f) < INFINITY);
	CHECK(isnan(dg_nn_exp(NAN)) && isnan(dg_nn_softmax_exp(-INFINITY, -INFINITY)));
}

/* GELU's vector loops (one per ISA) give the scalar element math's bits,
 * on random values, the clamp's and the small-argument branch's edges,
 * Inf and NaN, in place too */
static void test_gelu_isas(dg_ctx *ctx, uint64_t *s)
{
	const int64_t n = 70001;
	float *x = randv(s, n), *dout = randv(s, n), *out = malloc(sizeof(float) * n), *dx = randv(s, n);
	float *dx0 = malloc(sizeof(float) * n), *in = malloc(sizeof(float) * n);
	const float special[] = {0.0f, -0.0f, 5e-4f, -5e-4f, 1e-3f, 9.0f, -9.0f, 10.0f, -10.0f, 40.0f, -40.0f,
				 INFINITY, -INFINITY, NAN, 1e-30f};
	for (int64_t i = 0; i < n; i++)
		x[i] *= 8;
	for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
		x[i * 37] = special[i];
	memcpy(dx0, dx, sizeof(float) * n);
	dg_isa isas[3];
	int nisa = test_isas(isas);
	for (int k = 0; k < nisa; k++) {
		CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
		CHECK_OK(dg_nn_gelu_forward(ctx, out, x, n));
		memcpy(dx, dx0, sizeof(float) * n);
		CHECK_OK(dg_nn_gelu_backward(ctx, dx, x, dout, n));
		memcpy(in, x, sizeof(float) * n);
		CHECK_OK(dg_nn_gelu_forward(ctx, in, in, n));
		int same = 1;
		for (int64_t i = 0; i < n; i++) {
			float y = dg_nn_gelu(x[i]), d = dx0[i] + dg_nn_gelu_grad(x[i]) * dout[i];
			same &= (memcmp(&out[i], &y, 4) == 0) & (memcmp(&dx[i], &d, 4) == 0) &
				(memcmp(&in[i], &y, 4) == 0);
		}
		CHECK(same);
	}
	CHECK_OK(dg_ctx_set_isa(ctx, DG_ISA_AUTO));
	free(x), free(dout), free(out), free(dx), free(dx0), free(in);
}

/* LayerNorm's loops (one per ISA) give the same bits on every ISA: outputs,
 * statistics and all three gradients, float32 and bfloat16 parameters and
 * gradients, over odd sizes (rows past a multiple of the row group, channels
 * past a vector) */
static void test_layernorm_isas(dg_ctx *ctx, uint64_t *s)
{
	const int64_t n = 37, c = 203, nc = n * c;
	float *x = randv(s, nc), *dout = randv(s, nc), *dx0 = randv(s, nc), *w = randv(s, c), *b = randv(s, c);
	float *g0 = randv(s, 2 * c);
	uint16_t wh[2 * 203], gh0[2 * 203];
	for (int64_t i = 0; i < c; i++) {
		wh[i] = dg_f32_to_bf16(w[i]), wh[c + i] = dg_f32_to_bf16(b[i]);
		gh0[i] = dg_f32_to_bf16(g0[i]), gh0[c + i] = dg_f32_to_bf16(g0[c + i]);
	}
	/* per ISA: out, mean, rstd, dx, then the gradients (float32 or bfloat16) */
	const size_t fbytes = sizeof(float) * (size_t)(2 * nc + 2 * n + 2 * c);
	unsigned char *got[3];
	dg_isa isas[3];
	int nisa = test_isas(isas);
	for (int half = 0; half < 2; half++) {
		const dg_dtype t = half ? DG_BF16 : DG_F32;
		const void *wp = half ? (const void *)wh : w, *bp = half ? (const void *)(wh + c) : b;
		for (int k = 0; k < nisa; k++) {
			got[k] = calloc(1, fbytes);
			float *out = (float *)got[k], *mean = out + nc, *rstd = mean + n, *dx = rstd + n;
			void *g = dx + nc;
			memcpy(dx, dx0, sizeof(float) * nc);
			if (half)
				memcpy(g, gh0, sizeof gh0);
			else
				memcpy(g, g0, sizeof(float) * 2 * c);
			void *dw = g, *db = half ? (void *)((uint16_t *)g + c) : (void *)((float *)g + c);
			CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
			CHECK_OK(dg_nn_layernorm_forward_mixed(ctx, out, mean, rstd, x, t, wp, bp, 1e-5f, n, c));
			CHECK_OK(dg_nn_layernorm_backward_mixed(ctx, dx, t, dw, db, dout, x, t, wp, mean, rstd, n, c));
		}
		for (int k = 1; k < nisa; k++) {
			if (memcmp(got[0], got[k], fbytes) != 0)
				fprintf(stderr, "layernorm %s differs from scalar (%s params)\n", isa_name(isas[k]),
					half ? "bf16" : "f32");
			CHECK(memcmp(got[0], got[k], fbytes) == 0);
		}
		for (int k = 0; k < nisa; k++)
			free(got[k]);
	}
	CHECK_OK(dg_ctx_set_isa(ctx, DG_ISA_AUTO));
	free(x), free(dout), free(dx0), free(w), free(b), free(g0);
}

static void test_encoder(dg_ctx *ctx, uint64_t *s)
{
	const int64_t B = 3, T = 5, C = 40, V = 7;
	int32_t tok[15];
	for (int i = 0; i < 15; i++)
		tok[i] = (int32_t)(rng_next(s) % V);
	tok[3] = tok[4] = 2; /* a repeated token: its gradient rows must sum */
	float *wte = randv(s, V * C), *wpe = randv(s, T * C), *dout = randv(s, B * T * C), *out = malloc(sizeof(float) * B * T * C);
	float *dwte = randv(s, V * C), *dwpe = randv(s, T * C);
	double *rdwte = tod(dwte, V * C), *rdwpe = tod(dwpe, T * C), *rout = malloc(sizeof(double) * B * T * C);
	for (int64_t r = 0; r < B * T; r++)
		for (int64_t i = 0; i < C; i++) {
			rout[r * C + i] = (double)wte[tok[r] * C + i] + wpe[(r % T) * C + i];
			rdwte[tok[r] * C + i] += dout[r * C + i];
			rdwpe[(r % T) * C + i] += dout[r * C + i];
		}
	CHECK_OK(dg_nn_encoder_forward(ctx, out, tok, wte, wpe, B, T, C, V));
	CHECK(maxrel(out, rout, B * T * C) < 1e-7);
	CHECK_OK(dg_nn_encoder_backward(ctx, dwte, dwpe, dout, tok, B, T, C, V));
	CHECK(maxrel(dwte, rdwte, V * C) < TOL);
	CHECK(maxrel(dwpe, rdwpe, T * C) < TOL);
	tok[7] = (int32_t)V;
	CHECK(dg_nn_encoder_forward(ctx, out, tok, wte, wpe, B, T, C, V) == DG_ERR_INVALID);
	free(wte), free(wpe), free(dout), free(out), free(dwte), free(dwpe), free(rdwte), free(rdwpe), free(rout);
}

/* attention against a double reference on T tokens (T <= ATT_MAX_T: more
 * than two query tiles, so the tiles' order and the write mode's first
 * tile are covered) */
#define ATT_MAX_T 80
static void test_attention(dg_ctx *ctx, uint64_t *s, int64_t T, int64_t window)
{
	const int64_t B = 2, NH = 3, HS = 4, C = NH * HS;
	float *qkv = randv(s, B * T * 3 * C), *dout = randv(s, B * T * C), *out = malloc(sizeof(float) * B * T * C);
	/* the saved weights are [B,NH,T,S]: key k of query q at slot
	 * k - dg_nn_first_key(q), so a window W keeps T*min(W,T) per head */
	const int64_t S = dg_nn_att_span(T, window);
	float *att = malloc(sizeof(float) * B * NH * T * S), *dqkv = randv(s, B * T * 3 * C);
	double *rout = calloc((size_t)(B * T * C), sizeof(double)), *ratt = calloc((size_t)(B * NH * T * S), sizeof(double));
	double *rdqkv = tod(dqkv, B * T * 3 * C);
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < NH; h++)
			for (int64_t q = 0; q < T; q++) {
				const float *Q = qkv + (b * T + q) * 3 * C + h * HS;
				int64_t k0 = window > 0 && q - window + 1 > 0 ? q - window + 1 : 0;
				double sc[ATT_MAX_T], mx = -1e300, sum = 0;
				for (int64_t k = k0; k <= q; k++) {
					const float *K = qkv + (b * T + k) * 3 * C + C + h * HS;
					double d = 0;
					for (int64_t i = 0; i < HS; i++)
						d += (double)Q[i] * K[i];
					sc[k] = d / sqrt((double)HS);
					mx = sc[k] > mx ? sc[k] : mx;
				}
				for (int64_t k = k0; k <= q; k++)
					sum += exp(sc[k] - mx);
				double A[ATT_MAX_T], dA[ATT_MAX_T], dot = 0;
				const float *D = dout + (b * T + q) * C + h * HS;
				for (int64_t k = k0; k <= q; k++) {
					A[k] = exp(sc[k] - mx) / sum;
					const float *Vv = qkv + (b * T + k) * 3 * C + 2 * C + h * HS;
					dA[k] = 0;
					for (int64_t i = 0; i < HS; i++) {
						rout[(b * T + q) * C + h * HS + i] += A[k] * Vv[i];
						dA[k] += (double)D[i] * Vv[i];
						rdqkv[(b * T + k) * 3 * C + 2 * C + h * HS + i] += A[k] * D[i];
					}
					dot += A[k] * dA[k];
				}
				for (int64_t k = k0; k <= q; k++)
					ratt[((b * NH + h) * T + q) * S + (k - k0)] = A[k];
				for (int64_t k = k0; k <= q; k++) {
					double ds = A[k] * (dA[k] - dot) / sqrt((double)HS);
					const float *K = qkv + (b * T + k) * 3 * C + C + h * HS;
					for (int64_t i = 0; i < HS; i++) {
						rdqkv[(b * T + q) * 3 * C + h * HS + i] += ds * K[i];
						rdqkv[(b * T + k) * 3 * C + C + h * HS + i] += ds * Q[i];
					}
				}
			}
	CHECK_OK(dg_nn_attention_forward(ctx, out, att, qkv, B, T, NH, HS, window));
	CHECK(maxrel(out, rout, B * T * C) < TOL);
	CHECK(maxrel(att, ratt, B * NH * T * S) < TOL);
	CHECK_OK(dg_nn_attention_backward(ctx, dqkv, dout, qkv, att, B, T, NH, HS, window));
	CHECK(maxrel(dqkv, rdqkv, B * T * 3 * C) < TOL);
	/* sgemm takes int sizes: a token row of 3*NH*HS floats past INT32_MAX
	 * is refused before anything is read */
	CHECK(dg_nn_attention_forward(ctx, out, att, qkv, 1, 1, (int64_t)1 << 30, 2, window) == DG_ERR_SIZE);
	CHECK(dg_nn_attention_backward(ctx, dqkv, dout, qkv, att, 1, 1, (int64_t)1 << 30, 2, window) == DG_ERR_SIZE);
	CHECK(dg_nn_attention_forward(ctx, out, att, qkv, 1, 1, 0, 2, window) == DG_ERR_INVALID);
	free(qkv), free(dout), free(out), free(att), free(dqkv), free(rout), free(ratt), free(rdqkv);
}

/* A window of INT64_MAX ("unbounded") must give exactly the full causal
 * attention, forward and backward: the window arithmetic must not overflow
 * (k + window - 1 did in the CUDA twin, zeroing dk and dv). */
static void test_attention_unbounded(dg_ctx *ctx, uint64_t *s)
{
	const int64_t B = 2, T = 9, NH = 2, HS = 5, C = NH * HS, NQ = B * T * 3 * C, NO = B * T * C, NA = B * NH * T * T;
	float *qkv = randv(s, NQ), *dout = randv(s, NO), *g0 = randv(s, NQ);
	float *out[2], *att[2], *dqkv[2];
	const int64_t windows[2] = {0, INT64_MAX};
	for (int w = 0; w < 2; w++) {
		out[w] = malloc(sizeof(float) * NO), att[w] = malloc(sizeof(float) * NA), dqkv[w] = malloc(sizeof(float) * NQ);
		memcpy(dqkv[w], g0, sizeof(float) * NQ);
		CHECK_OK(dg_nn_attention_forward(ctx, out[w], att[w], qkv, B, T, NH, HS, windows[w]));
		CHECK_OK(dg_nn_attention_backward(ctx, dqkv[w], dout, qkv, att[w], B, T, NH, HS, windows[w]));
	}
	CHECK(memcmp(out[0], out[1], sizeof(float) * NO) == 0);
	CHECK(memcmp(att[0], att[1], sizeof(float) * NA) == 0);
	CHECK(memcmp(dqkv[0], dqkv[1], sizeof(float) * NQ) == 0);
	for (int w = 0; w < 2; w++)
		free(out[w]), free(att[w]), free(dqkv[w]);
	free(qkv), free(dout), free(g0);
}

/* The softmax's vector exponentials (one loop per ISA) give the scalar
 * element math's bits: the cross-entropy's probabilities equal the ones
 * built here from dg_nn_softmax_exp, a double sum in order and one
 * reciprocal, on logits spanning the flush-to-zero edge, Inf and NaN rows;
 * eleven rows, so both the eight-row block of the normaliser sums and the
 * rows after it run */
static void test_softmax_isas(dg_ctx *ctx, uint64_t *s)
{
	const int64_t N = 11, V = 1031;
	int32_t tg[11] = {0, 5, 1030, 7, 9, 1, 2, 3, 4, 1000, 6};
	float *x = randv(s, N * V), *p = malloc(sizeof(float) * N * V), *want = malloc(sizeof(float) * N * V);
	float *loss = malloc(sizeof(float) * N);
	for (int64_t i = 0; i < N * V; i++)
		x[i] *= 60; /* x - max down to -120: past -87.3, where weights flush to 0 */
	x[V + 9] = -INFINITY;
	x[2 * V + 3] = NAN;
	x[9 * V + 1030] = NAN;
	x[10 * V] = INFINITY;
	for (int64_t r = 0; r < N; r++) {
		const float *xr = x + r * V;
		float mx = -INFINITY;
		for (int64_t i = 0; i < V; i++)
			mx = xr[i] > mx ? xr[i] : mx;
		double sum = 0;
		for (int64_t i = 0; i < V; i++)
			sum += dg_nn_softmax_exp(xr[i], mx);
		float inv = (float)(1.0 / sum);
		for (int64_t i = 0; i < V; i++)
			want[r * V + i] = dg_nn_softmax_exp(xr[i], mx) * inv;
	}
	dg_isa isas[3];
	float loss0[11];
	int nisa = test_isas(isas);
	for (int k = 0; k < nisa; k++) {
		CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
		CHECK_OK(dg_nn_softmax_xent_forward(ctx, p, loss, x, tg, N, V));
		CHECK(memcmp(p, want, sizeof(float) * N * V) == 0);
		if (k == 0)
			memcpy(loss0, loss, sizeof loss0);
		CHECK(memcmp(loss, loss0, sizeof loss0) == 0); /* the losses too */
	}
	CHECK_OK(dg_ctx_set_isa(ctx, isas[nisa - 1]));
	free(x), free(p), free(want), free(loss);
}

static void test_xent(dg_ctx *ctx, uint64_t *s)
{
	const int64_t N = 9, V = 50;
	int32_t tg[9];
	for (int i = 0; i < 9; i++)
		tg[i] = (int32_t)(rng_next(s) % V);
	float *x = randv(s, N * V), *dl = randv(s, N), *p = malloc(sizeof(float) * N * V), *loss = malloc(sizeof(float) * N);
	for (int64_t i = 0; i < N * V; i++)
		x[i] *= 10;
	double *rp = malloc(sizeof(double) * N * V), *rl = malloc(sizeof(double) * N), *rd = malloc(sizeof(double) * N * V);
	for (int64_t r = 0; r < N; r++) {
		double mx = -1e300, sum = 0;
		for (int64_t i = 0; i < V; i++)
			mx = x[r * V + i] > mx ? x[r * V + i] : mx;
		for (int64_t i = 0; i < V; i++)
			sum += exp(x[r * V + i] - mx);
		for (int64_t i = 0; i < V; i++) {
			rp[r * V + i] = exp(x[r * V + i] - mx) / sum;
			rd[r * V + i] = (rp[r * V + i] - (i == tg[r])) * dl[r];
		}
		rl[r] = log(sum) - (x[r * V + tg[r]] - mx);
	}
	CHECK_OK(dg_nn_softmax_xent_forward(ctx, p, loss, x, tg, N, V));
	CHECK(maxrel(p, rp, N * V) < TOL);
	CHECK(maxrel(loss, rl, N) < TOL);
	/* in place: probs over the logits, then the gradient over the probs */
	CHECK_OK(dg_nn_softmax_xent_forward(ctx, x, loss, x, tg, N, V));
	CHECK(maxrel(loss, rl, N) < TOL);
	CHECK_OK(dg_nn_softmax_xent_backward(ctx, x, x, tg, dl, N, V));
	CHECK(maxrel(x, rd, N * V) < TOL);
	tg[0] = -1;
	CHECK(dg_nn_softmax_xent_forward(ctx, p, loss, p, tg, N, V) == DG_ERR_INVALID);
	free(x), free(dl), free(p), free(loss), free(rp), free(rl), free(rd);
}

/* dg_nn_vxent_exp is glibc's exp in double rounded to float (which is Go's
 * float32(math.Exp(float64(x))), checked in Go) on a stride through [-104,
 * 89], 0 below, +Inf above, NaN kept; dg_nn_vxent_max prefers +0 and NaN */
static void test_vxent_math(void)
{
	int bad = 0;
	const uint32_t ends[2][2] = {{0x00000000u, dg_f32_bits(89.0f)}, {0x80000000u, dg_f32_bits(-104.0f)}};
	for (int k = 0; k < 2; k++)
		for (uint32_t b = ends[k][0]; b <= ends[k][1]; b += 4001) {
			float x = dg_bits_f32(b), e = dg_nn_vxent_exp(x), want = (float)exp((double)x);
			bad += memcmp(&e, &want, 4) != 0;
		}
	CHECK(bad == 0);
	CHECK(dg_nn_vxent_exp(0.0f) == 1.0f && dg_nn_vxent_exp(-0.0f) == 1.0f);
	CHECK(dg_nn_vxent_exp(-INFINITY) == 0.0f && dg_nn_vxent_exp(-104.5f) == 0.0f);
	CHECK(dg_nn_vxent_exp(INFINITY) == INFINITY && dg_nn_vxent_exp(89.5f) == INFINITY);
	CHECK(isnan(dg_nn_vxent_exp(NAN)));
	CHECK(!signbit(dg_nn_vxent_max(-0.0f, 0.0f)) && !signbit(dg_nn_vxent_max(0.0f, -0.0f)));
	CHECK(signbit(dg_nn_vxent_max(-0.0f, -0.0f)) && dg_nn_vxent_max(-INFINITY, -1.0f) == -1.0f);
	CHECK(isnan(dg_nn_vxent_max(NAN, 1.0f)) && isnan(dg_nn_vxent_max(1.0f, NAN)));
}

/* The vocabulary-parallel steps on the slice [V, 2V) of 3V against plain
 * loops of the element math: the max, weights, sums (double, in order),
 * target logits and gradient bit for bit; the row mask; a target outside
 * the vocabulary refused with nothing written. */
static void test_vocab_xent(dg_ctx *ctx, uint64_t *s)
{
	const int64_t N = 19, V = 77, lo = V, vocab = 3 * V;
	int32_t tg[19];
	for (int i = 0; i < 19; i++)
		tg[i] = (int32_t)(rng_next(s) % vocab);
	float *x = randv(s, N * V), *w = malloc(sizeof(float) * N * V), mx[19], sums[19], tl[19];
	for (int64_t i = 0; i < N * V; i++)
		x[i] *= 10;
	memcpy(w, x, sizeof(float) * N * V);
	CHECK_OK(dg_nn_vocab_xent_max(ctx, mx, w, N, V));
	CHECK_OK(dg_nn_vocab_xent_exp(ctx, w, sums, tl, mx, tg, N, V, lo, vocab));
	int same = 1;
	for (int64_t r = 0; r < N; r++) {
		float m = -INFINITY, t = 0.0f;
		for (int64_t i = 0; i < V; i++)
			m = x[r * V + i] > m ? x[r * V + i] : m;
		if (tg[r] >= lo && tg[r] < lo + V)
			t = x[r * V + tg[r] - lo] - m;
		double sum = 0.0;
		for (int64_t i = 0; i < V; i++) {
			float e = (float)exp((double)(x[r * V + i] - m));
			same &= memcmp(&w[r * V + i], &e, 4) == 0;
			sum += e;
		}
		float fs = (float)sum;
		same &= memcmp(&mx[r], &m, 4) == 0 && memcmp(&sums[r], &fs, 4) == 0 && memcmp(&tl[r], &t, 4) == 0;
	}
	CHECK(same);
	memcpy(x, w, sizeof(float) * N * V);
	CHECK_OK(dg_nn_vocab_xent_grad(ctx, w, sums, tg, 0.37f, N, V, lo));
	for (int64_t r = 0; r < N; r++)
		for (int64_t i = 0; i < V; i++) {
			float g = (x[r * V + i] * (1.0f / sums[r]) - (i == tg[r] - lo ? 1.0f : 0.0f)) * 0.37f;
			same &= memcmp(&w[r * V + i], &g, 4) == 0;
		}
	CHECK(same);
	memcpy(x, w, sizeof(float) * N * V);
	CHECK_OK(dg_nn_vocab_clear_rows(ctx, x, tg, N, V, lo, V));
	for (int64_t r = 0; r < N; r++) {
		int held = tg[r] >= lo && tg[r] < lo + V;
		for (int64_t i = 0; i < V; i++)
			same &= held ? memcmp(&x[r * V + i], &w[r * V + i], 4) == 0 : dg_f32_bits(x[r * V + i]) == 0;
	}
	CHECK(same);
	tg[3] = (int32_t)vocab;
	memcpy(x, w, sizeof(float) * N * V);
	CHECK(dg_nn_vocab_xent_exp(ctx, w, sums, tl, mx, tg, N, V, lo, vocab) == DG_ERR_INVALID);
	CHECK(memcmp(x, w, sizeof(float) * N * V) == 0);
	CHECK(dg_nn_vocab_xent_exp(ctx, w, sums, tl, mx, tg, N, V, 2 * V + 1, vocab) == DG_ERR_INVALID);
	free(x), free(w);
}

/* the block transpose moves every block, refuses overlapping buffers */
static void test_transpose_blocks(dg_ctx *ctx, uint64_t *s)
{
	const int64_t A = 13, B = 7, W = 5;
	float *x = randv(s, A * B * W), *y = malloc(sizeof(float) * A * B * W);
	CHECK_OK(dg_nn_transpose_blocks(ctx, y, x, A, B, W));
	int same = 1;
	for (int64_t i = 0; i < A; i++)
		for (int64_t j = 0; j < B; j++)
			same &= memcmp(&y[(j * A + i) * W], &x[(i * B + j) * W], sizeof(float) * W) == 0;
	CHECK(same);
	CHECK(dg_nn_transpose_blocks(ctx, x + W, x, A - 1, 1, W) == DG_ERR_INVALID);
	CHECK_OK(dg_nn_transpose_blocks(ctx, NULL, NULL, A, 0, W));
	free(x), free(y);
}

/* Attention's softmax rows (max, exponentials with masked tails, the
 * eight-row sums) and score gradients give the same bits on every ISA: rows
 * of 1 to T keys, T past a tile and not a multiple of a vector, with and
 * without a window, a -inf score included */
static void test_attention_isas(dg_ctx *ctx, uint64_t *s)
{
	const int64_t B = 2, T = 45, NH = 2, HS = 8, C3 = 3 * NH * HS;
	const int64_t windows[] = {0, 7};
	for (int w = 0; w < 2; w++) {
		const int64_t span = dg_nn_att_span(T, windows[w]);
		float *qkv = randv(s, B * T * C3), *dout = randv(s, B * T * NH * HS);
		for (int64_t i = 0; i < B * T * C3; i++)
			qkv[i] *= 4;
		qkv[5 * C3 + 1] = -INFINITY; /* a query whose scores are all -inf or NaN */
		float *ref[3] = {0};
		dg_isa isas[3];
		int nisa = test_isas(isas);
		for (int k = 0; k < nisa; k++) {
			CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
			float *out = malloc(sizeof(float) * B * T * NH * HS), *att = malloc(sizeof(float) * B * NH * T * span);
			float *dqkv = calloc((size_t)(B * T * C3), sizeof(float));
			CHECK_OK(dg_nn_attention_forward(ctx, out, att, qkv, B, T, NH, HS, windows[w]));
			CHECK_OK(dg_nn_attention_backward(ctx, dqkv, dout, qkv, att, B, T, NH, HS, windows[w]));
			if (k == 0) {
				ref[0] = out, ref[1] = att, ref[2] = dqkv;
				continue;
			}
			CHECK(memcmp(out, ref[0], sizeof(float) * B * T * NH * HS) == 0);
			CHECK(memcmp(att, ref[1], sizeof(float) * B * NH * T * span) == 0);
			CHECK(memcmp(dqkv, ref[2], sizeof(float) * B * T * C3) == 0);
			free(out), free(att), free(dqkv);
		}
		CHECK_OK(dg_ctx_set_isa(ctx, DG_ISA_AUTO));
		free(ref[0]), free(ref[1]), free(ref[2]), free(qkv), free(dout);
	}
}

/* The _write entries give the bits of clearing the input gradient and
 * accumulating (whatever it held before: NaN here), on every ISA, with
 * float32 and bfloat16 weights and gradients and every split; an empty
 * product (oc 0) writes zeros. dw and dbias accumulate alike. */
static void test_backward_write(dg_ctx *ctx, uint64_t *s)
{
	static const int64_t shapes[][3] = {{37, 19, 23}, {20, 61, 300}, {24, 300, 50}, {9, 7, 0}};
	dg_isa isas[3];
	int nisa = test_isas(isas);
	for (int k = 0; k < nisa; k++) {
		CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
		for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
			for (int half = 0; half < 2; half++) {
				const int64_t n = shapes[sh][0], c = shapes[sh][1], oc = shapes[sh][2];
				dg_dtype t = half ? DG_BF16 : DG_F32;
				size_t es = half ? 2 : 4;
				float *x = randv(s, n * c), *dout = randv(s, n * oc), *wf = randv(s, oc * c + 1);
				float *g0 = randv(s, oc * c + oc + 2);
				float *dxa = malloc(sizeof(float) * (size_t)(n * c + 1)), *dxb = calloc((size_t)(n * c + 1), sizeof(float));
				char *dwa = malloc(es * (size_t)(oc * c + oc + 2)), *dwb = malloc(es * (size_t)(oc * c + oc + 2));
				for (int64_t i = 0; i < n * c; i++)
					dxa[i] = NAN;
				/* row 0 of dout all -0 and positive weights: each product
				 * is -0, and a cleared dinp makes the sum +0 */
				for (int64_t o = 0; o < oc; o++)
					dout[o] = -0.0f;
				for (int64_t i = 0; i < oc * c; i++)
					wf[i] = fabsf(wf[i]);
				if (half) { /* bfloat16: the top half of each float's bits */
					uint16_t *h = (uint16_t *)wf;
					for (int64_t i = 0; i < oc * c; i++) {
						uint32_t u;
						memcpy(&u, &wf[i], 4);
						h[i] = (uint16_t)(u >> 16);
					}
					for (int64_t i = 0; i < oc * c + oc + 2; i++) {
						uint32_t u;
						memcpy(&u, &g0[i], 4);
						((uint16_t *)dwa)[i] = (uint16_t)(u >> 16);
					}
				} else {
					memcpy(dwa, g0, es * (size_t)(oc * c + oc + 2));
				}
				memcpy(dwb, dwa, es * (size_t)(oc * c + oc + 2));
				char *dba = dwa + es * (size_t)(oc * c), *dbb = dwb + es * (size_t)(oc * c);
				CHECK_OK(dg_nn_matmul_backward_write(ctx, dxa, t, dwa, dba, dout, x, t, wf, n, c, oc));
				CHECK_OK(dg_nn_matmul_backward_mixed(ctx, dxb, t, dwb, dbb, dout, x, t, wf, n, c, oc));
				CHECK(memcmp(dxa, dxb, sizeof(float) * (size_t)(n * c)) == 0);
				CHECK(memcmp(dwa, dwb, es * (size_t)(oc * c + oc)) == 0);
				CHECK(c == 0 || !signbit(dxa[0]));
				free(x), free(dout), free(wf), free(g0), free(dxa), free(dxb), free(dwa), free(dwb);
			}
		/* GELU: the products' -0 become +0 as in a cleared dinp */
		const int64_t n = 1037;
		float *x = randv(s, n), *dout = randv(s, n), *dxa = malloc(sizeof(float) * n), *dxb = calloc(n, sizeof(float));
		for (int64_t i = 0; i < n; i++)
			dxa[i] = NAN;
		for (int64_t i = 0; i < n; i += 5)
			dout[i] = -0.0f;
		CHECK_OK(dg_nn_gelu_backward_write(ctx, dxa, x, dout, n));
		CHECK_OK(dg_nn_gelu_backward(ctx, dxb, x, dout, n));
		CHECK(memcmp(dxa, dxb, sizeof(float) * n) == 0);
		CHECK(!signbit(dxa[0]));
		free(x), free(dout), free(dxa), free(dxb);
		/* attention, full and windowed, two sequences of 37 and of 70
		 * tokens (two and three query tiles) */
		for (int64_t cs = 0; cs < 4; cs++) {
			const int64_t window = cs < 2 ? 0 : 5, T = cs % 2 ? 70 : 37;
			const int64_t B = 2, NH = 3, HS = 8, C3 = 3 * NH * HS, span = window > 0 ? window : T;
			float *qkv = randv(s, B * T * C3), *o = malloc(sizeof(float) * B * T * NH * HS);
			float *att = malloc(sizeof(float) * B * NH * T * span), *d = randv(s, B * T * NH * HS);
			float *qa = malloc(sizeof(float) * B * T * C3), *qb = calloc((size_t)(B * T * C3), sizeof(float));
			for (int64_t i = 0; i < B * T * C3; i++)
				qa[i] = NAN;
			CHECK_OK(dg_nn_attention_forward(ctx, o, att, qkv, B, T, NH, HS, window));
			CHECK_OK(dg_nn_attention_backward_write(ctx, qa, d, qkv, att, B, T, NH, HS, window));
			CHECK_OK(dg_nn_attention_backward(ctx, qb, d, qkv, att, B, T, NH, HS, window));
			CHECK(memcmp(qa, qb, sizeof(float) * (size_t)(B * T * C3)) == 0);
			free(qkv), free(o), free(att), free(d), free(qa), free(qb);
		}
	}
	CHECK_OK(dg_ctx_set_isa(ctx, DG_ISA_AUTO));
	CHECK(dg_nn_gelu_backward_write(ctx, NULL, NULL, NULL, 1) == DG_ERR_INVALID);
}

int main(void)
{
	test_tanh();
	test_exp();
	test_vxent_math();
	int threads[] = {1, 3};
	for (int ti = 0; ti < 2; ti++) {
		dg_ctx *ctx;
		CHECK_OK(dg_ctx_create(threads[ti], &ctx));
		uint64_t s = 42;
		test_matmul(ctx, &s, 37, 19, 23);
		test_matmul(ctx, &s, 20, 61, 300);
		test_matmul(ctx, &s, 24, 300, 50);
		test_layernorm(ctx, &s);
		test_layernorm_isas(ctx, &s);
		test_gelu_add(ctx, &s);
		test_gelu_isas(ctx, &s);
		test_backward_write(ctx, &s);
		test_encoder(ctx, &s);
		test_attention(ctx, &s, 7, 0);
		test_attention(ctx, &s, 7, 3);
		test_attention(ctx, &s, 7, 1);
		test_attention(ctx, &s, 7, INT64_MAX);
		test_attention(ctx, &s, 70, 0);
		test_attention(ctx, &s, 70, 40);
		test_attention_unbounded(ctx, &s);
		test_attention_isas(ctx, &s);
		test_xent(ctx, &s);
		test_vocab_xent(ctx, &s);
		test_transpose_blocks(ctx, &s);
		test_softmax_isas(ctx, &s);
		dg_ctx_destroy(ctx);
	}
	return test_done("test_nn");
}
