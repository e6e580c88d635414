/* test_nn_mixed.c — the *_mixed nn kernels (half-precision parameters and
 * gradients) against the float32 kernels run on the widened values, on 1
 * and 3 threads, every ISA:
 *   - with half parameters, forward and the input gradient equal the float32
 *     kernels' on the widened parameters (bit for bit where the summation
 *     order is the same, within TOL through sgemm's blocking);
 *   - a half gradient gets one rounding per element: with integer-valued
 *     activations every float32 sum is exact, so the result must be exactly
 *     narrow(widen(g0) + sum), which rounding per row or per block would miss;
 *   - the scratch stays within the documented bound (dg_ctx_scratch_peak). */
#include <math.h>

#include "dg_math.h"
#include "test_util.h"

#define TOL 2e-5

static size_t esize(dg_dtype t) { return t == DG_F32 ? 4 : 2; }

/* a buffer of n elements of t holding random values (integers in [-4, 4]
 * when ints), and its widened float32 copy in *wide */
static void *randt(uint64_t *s, dg_dtype t, int64_t n, int ints, float **wide)
{
	void *p = malloc((size_t)(n > 0 ? n : 1) * esize(t));
	*wide = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
	for (int64_t i = 0; i < n; i++) {
		float v = ints ? (float)((int)(rng_next(s) % 9) - 4) : rng_float(s);
		narrow(t, p, i, v);
		(*wide)[i] = widen(t, p, i);
	}
	return p;
}

static float *zeros(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* where the reference float32 kernel's gradient starts: from zero, to get
 * the bare sum a half gradient adds once; from g0 for a float32 gradient */
static float *start(dg_dtype gt, const float *g0f, int64_t n)
{
	float *p = zeros(n);
	if (gt == DG_F32)
		memcpy(p, g0f, (size_t)n * sizeof(float));
	return p;
}

static double maxdiff(const float *a, const float *b, int64_t n)
{
	double m = 0;
	for (int64_t i = 0; i < n; i++) {
		double e = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
		if (!(e <= m))
			m = isnan(e) ? INFINITY : e;
	}
	return m;
}

/* g (dtype gt) == narrow(widen(g0) + sum) element for element. A float32
 * gradient is the plain kernels' business (they add row by row), so for one
 * the caller passes in sum the plain kernel's result from g0 and g0 = NULL. */
static int one_rounding(dg_dtype gt, const void *g, const void *g0, const float *sum, int64_t n)
{
	if (gt == DG_F32)
		return memcmp(g, sum, (size_t)n * sizeof(float)) == 0;
	for (int64_t i = 0; i < n; i++) {
		char want[4];
		narrow(gt, want, 0, widen(gt, g0, i) + sum[i]);
		if (memcmp((const char *)g + (size_t)i * esize(gt), want, esize(gt)) != 0)
			return 0;
	}
	return 1;
}

static void *dup(const void *p, size_t bytes)
{
	void *q = malloc(bytes > 0 ? bytes : 1);
	memcpy(q, p, bytes);
	return q;
}

static void test_matmul(dg_ctx *ctx, uint64_t *s, dg_dtype wt, dg_dtype gt, int64_t n, int64_t c, int64_t oc)
{
	float *x, *dout, *wf, *bf, *g0f, *gb0f;
	void *xt = randt(s, DG_F32, n * c, 1, &x), *dt = randt(s, DG_F32, n * oc, 1, &dout);
	void *w = randt(s, wt, oc * c, 0, &wf), *b = randt(s, wt, oc, 0, &bf);
	void *g0 = randt(s, gt, oc * c, 0, &g0f), *gb0 = randt(s, gt, oc, 0, &gb0f);
	float *out = zeros(n * oc), *rout = zeros(n * oc), *dx = zeros(n * c), *rdx = zeros(n * c);
	float *rdw = start(gt, g0f, oc * c), *rdb = start(gt, gb0f, oc);
	/* the float32 kernels on the widened weights */
	CHECK_OK(dg_nn_matmul_forward(ctx, rout, x, wf, bf, n, c, oc));
	CHECK_OK(dg_nn_matmul_backward(ctx, rdx, rdw, rdb, dout, x, wf, n, c, oc));

	CHECK_OK(dg_nn_matmul_forward_mixed(ctx, out, x, wt, w, b, n, c, oc));
	CHECK(maxdiff(out, rout, n * oc) < TOL);
	void *dw = dup(g0, (size_t)(oc * c) * esize(gt)), *db = dup(gb0, (size_t)oc * esize(gt));
	CHECK_OK(dg_nn_matmul_backward_mixed(ctx, dx, gt, dw, db, dout, x, wt, w, n, c, oc));
	CHECK(maxdiff(dx, rdx, n * c) < TOL);
	CHECK(one_rounding(gt, dw, g0, rdw, oc * c));
	CHECK(one_rounding(gt, db, gb0, rdb, oc));
	/* no bias */
	CHECK_OK(dg_nn_matmul_forward(ctx, rout, x, wf, NULL, n, c, oc));
	CHECK_OK(dg_nn_matmul_forward_mixed(ctx, out, x, wt, w, NULL, n, c, oc));
	CHECK(maxdiff(out, rout, n * oc) < TOL);

	CHECK(dg_nn_matmul_forward_mixed(ctx, out, x, DG_I32, w, b, n, c, oc) == DG_ERR_DTYPE);
	CHECK(dg_nn_matmul_backward_mixed(ctx, dx, DG_F64, dw, db, dout, x, wt, w, n, c, oc) == DG_ERR_DTYPE);
	CHECK(dg_nn_matmul_forward_mixed(ctx, out, x, wt, NULL, b, n, c, oc) == DG_ERR_INVALID);
	free(xt), free(dt), free(w), free(b), free(g0), free(gb0), free(dw), free(db);
	free(x), free(dout), free(wf), free(bf), free(g0f), free(gb0f);
	free(out), free(rout), free(dx), free(rdx), free(rdw), free(rdb);
}

static void test_layernorm(dg_ctx *ctx, uint64_t *s, dg_dtype wt, dg_dtype gt)
{
	const int64_t n = 9, c = 300;
	float *x, *dout, *wf, *bf, *g0f, *gb0f;
	void *xt = randt(s, DG_F32, n * c, 0, &x), *dt = randt(s, DG_F32, n * c, 0, &dout);
	void *w = randt(s, wt, c, 0, &wf), *b = randt(s, wt, c, 0, &bf);
	void *g0 = randt(s, gt, c, 0, &g0f), *gb0 = randt(s, gt, c, 0, &gb0f);
	float *out = zeros(n * c), *rout = zeros(n * c), *m = zeros(n), *r = zeros(n), *rm = zeros(n), *rr = zeros(n);
	float *dx = zeros(n * c), *rdx = zeros(n * c), *rdw = start(gt, g0f, c), *rdb = start(gt, gb0f, c);
	CHECK_OK(dg_nn_layernorm_forward(ctx, rout, rm, rr, x, wf, bf, 1e-5f, n, c));
	CHECK_OK(dg_nn_layernorm_backward(ctx, rdx, rdw, rdb, dout, x, wf, rm, rr, n, c));
	CHECK_OK(dg_nn_layernorm_forward_mixed(ctx, out, m, r, x, wt, w, b, 1e-5f, n, c));
	/* same element math in the same order: the same bits */
	CHECK(memcmp(out, rout, sizeof(float) * n * c) == 0);
	CHECK(memcmp(m, rm, sizeof(float) * n) == 0 && memcmp(r, rr, sizeof(float) * n) == 0);
	void *dw = dup(g0, (size_t)c * esize(gt)), *db = dup(gb0, (size_t)c * esize(gt));
	CHECK_OK(dg_nn_layernorm_backward_mixed(ctx, dx, gt, dw, db, dout, x, wt, w, m, r, n, c));
	CHECK(memcmp(dx, rdx, sizeof(float) * n * c) == 0);
	/* the float32 kernel summed the rows from zero in row order, as the
	 * mixed one does before its one rounding */
	CHECK(one_rounding(gt, dw, g0, rdw, c));
	CHECK(one_rounding(gt, db, gb0, rdb, c));
	CHECK(dg_nn_layernorm_forward_mixed(ctx, out, m, r, x, DG_U8, w, b, 1e-5f, n, c) == DG_ERR_DTYPE);
	free(xt), free(dt), free(w), free(b), free(g0), free(gb0), free(dw), free(db);
	free(x), free(dout), free(wf), free(bf), free(g0f), free(gb0f);
	free(out), free(rout), free(m), free(r), free(rm), free(rr), free(dx), free(rdx), free(rdw), free(rdb);
}

static void test_encoder(dg_ctx *ctx, uint64_t *s, dg_dtype wt, dg_dtype gt)
{
	const int64_t B = 3, T = 5, C = 40, V = 7, N = B * T;
	int32_t tok[15];
	for (int i = 0; i < 15; i++)
		tok[i] = (int32_t)(rng_next(s) % V);
	tok[3] = tok[4] = tok[11] = 2; /* a repeated token: its rows sum before the rounding */
	float *dout, *tef, *pef, *g0f, *gp0f;
	void *dt = randt(s, DG_F32, N * C, 1, &dout);
	void *te = randt(s, wt, V * C, 0, &tef), *pe = randt(s, wt, T * C, 0, &pef);
	void *g0 = randt(s, gt, V * C, 0, &g0f), *gp0 = randt(s, gt, T * C, 0, &gp0f);
	float *out = zeros(N * C), *rout = zeros(N * C), *rdte = start(gt, g0f, V * C), *rdpe = start(gt, gp0f, T * C);
	CHECK_OK(dg_nn_encoder_forward(ctx, rout, tok, tef, pef, B, T, C, V));
	CHECK_OK(dg_nn_encoder_backward(ctx, rdte, rdpe, dout, tok, B, T, C, V));
	CHECK_OK(dg_nn_encoder_forward_mixed(ctx, out, tok, wt, te, pe, B, T, C, V));
	CHECK(memcmp(out, rout, sizeof(float) * N * C) == 0);
	void *dte = dup(g0, (size_t)(V * C) * esize(gt)), *dpe = dup(gp0, (size_t)(T * C) * esize(gt));
	CHECK_OK(dg_nn_encoder_backward_mixed(ctx, gt, dte, dpe, dout, tok, B, T, C, V));
	CHECK(one_rounding(gt, dte, g0, rdte, V * C));
	CHECK(one_rounding(gt, dpe, gp0, rdpe, T * C));
	/* one table only */
	memcpy(dpe, gp0, (size_t)(T * C) * esize(gt));
	CHECK_OK(dg_nn_encoder_backward_mixed(ctx, gt, NULL, dpe, dout, tok, B, T, C, V));
	CHECK(one_rounding(gt, dpe, gp0, rdpe, T * C));
	tok[7] = (int32_t)V;
	CHECK(dg_nn_encoder_backward_mixed(ctx, gt, dte, dpe, dout, tok, B, T, C, V) == DG_ERR_INVALID);
	CHECK(dg_nn_encoder_forward_mixed(ctx, out, tok, DG_I64, te, pe, B, T, C, V) == DG_ERR_DTYPE);
	free(dt), free(te), free(pe), free(g0), free(gp0), free(dte), free(dpe);
	free(dout), free(tef), free(pef), free(g0f), free(gp0f), free(out), free(rout), free(rdte), free(rdpe);
}

/* a weight of 4 MiB widened in tiles: the scratch peak stays at one tile per
 * thread, far below the 8 MiB a float32 copy would take */
static void test_scratch_bound(dg_ctx *ctx, uint64_t *s)
{
	const int64_t n = 8, c = 1024, oc = 2048;
	float *x, *dout, *wf, *g0f;
	void *xt = randt(s, DG_F32, n * c, 0, &x), *dt = randt(s, DG_F32, n * oc, 0, &dout);
	void *w = randt(s, DG_BF16, oc * c, 0, &wf), *dw = randt(s, DG_BF16, oc * c, 0, &g0f);
	float *out = zeros(n * oc), *dx = zeros(n * c);
	int64_t peak = -1;
	CHECK_OK(dg_ctx_scratch_peak(ctx, 1, &peak));
	CHECK_OK(dg_nn_matmul_forward_mixed(ctx, out, x, DG_BF16, w, NULL, n, c, oc));
	CHECK_OK(dg_nn_matmul_backward_mixed(ctx, dx, DG_BF16, dw, NULL, dout, x, DG_BF16, w, n, c, oc));
	CHECK_OK(dg_ctx_scratch_peak(ctx, 0, &peak));
	int64_t bound = (int64_t)dg_ctx_threads(ctx) * DG_NN_TILE_FLOATS * (int64_t)sizeof(float);
	CHECK(peak > 0 && peak <= bound);
	CHECK(peak < oc * c * (int64_t)sizeof(float) / 8);
	/* a row longer than a tile: one row (plus a bias value) per thread */
	const int64_t c2 = DG_NN_TILE_FLOATS + 100;
	float *x2, *w2f;
	void *x2t = randt(s, DG_F32, 2 * c2, 0, &x2), *w2 = randt(s, DG_F16, 3 * c2, 0, &w2f);
	float *o2 = zeros(6), *r2 = zeros(6);
	CHECK_OK(dg_ctx_scratch_peak(ctx, 1, &peak));
	CHECK_OK(dg_nn_matmul_forward_mixed(ctx, o2, x2, DG_F16, w2, NULL, 2, c2, 3));
	CHECK_OK(dg_nn_matmul_forward(ctx, r2, x2, w2f, NULL, 2, c2, 3));
	CHECK(maxdiff(o2, r2, 6) < TOL);
	CHECK_OK(dg_ctx_scratch_peak(ctx, 0, &peak));
	CHECK(peak > 0 && peak <= (int64_t)dg_ctx_threads(ctx) * (c2 + 1) * (int64_t)sizeof(float));
	CHECK(dg_ctx_scratch_peak(NULL, 0, &peak) == DG_ERR_INVALID);
	CHECK(dg_ctx_scratch_peak(ctx, 0, NULL) == DG_ERR_INVALID);
	free(xt), free(dt), free(w), free(dw), free(x), free(dout), free(wf), free(g0f), free(out), free(dx);
	free(x2t), free(w2), free(x2), free(w2f), free(o2), free(r2);
}

int main(void)
{
	const dg_dtype ts[3] = {DG_F32, DG_F16, DG_BF16};
	dg_isa isas[3];
	int nisa = test_isas(isas);
	int threads[] = {1, 3};
	for (int ti = 0; ti < 2; ti++) {
		dg_ctx *ctx;
		CHECK_OK(dg_ctx_create(threads[ti], &ctx));
		uint64_t s = 42;
		for (int k = 0; k < nisa; k++) {
			CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
			for (int a = 0; a < 3; a++)
				for (int b = 0; b < 3; b++) {
					test_matmul(ctx, &s, ts[a], ts[b], 37, 19, 23);
					/* several tiles per thread (rows of 217 weights) */
					test_matmul(ctx, &s, ts[a], ts[b], 20, 300, 700);
					test_layernorm(ctx, &s, ts[a], ts[b]);
					test_encoder(ctx, &s, ts[a], ts[b]);
				}
		}
		test_scratch_bound(ctx, &s);
		dg_ctx_destroy(ctx);
	}
	return test_done("test_nn_mixed");
}
