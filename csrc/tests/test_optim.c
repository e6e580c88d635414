/*
 * test_optim.c — the optimizer kernels of every ISA this CPU has, on 1 and 3
 * threads, must give the scalar single-thread path's bits exactly: params,
 * moments, 16-bit copies and Lamb trust ratios, over several steps, for
 * every supported dtype combination and sizes around the vector widths and
 * Lamb's norm blocks. Also: dg_unscale_check, dg_adamw_naive_ref, and
 * rejected arguments.
 *
 * Build: cc -std=c11 -O2 -I csrc/include -I csrc csrc/tests/test_optim.c csrc/[a-z]*.c -lm -pthread
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepgo.h"
#include "dg_math.h"

static int failures;

#define CHECK(cond, ...)                                                                                           \
	do {                                                                                                       \
		if (!(cond)) {                                                                                     \
			failures++;                                                                                \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                       \
			fprintf(stderr, __VA_ARGS__);                                                              \
			fprintf(stderr, "\n");                                                                     \
		}                                                                                                  \
	} while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void) /* uniform in [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static size_t esz(dg_dtype t) { return t == DG_F32 ? 4 : 2; }

static void fill(dg_dtype t, void *p, int64_t n, float scale)
{
	for (int64_t i = 0; i < n; i++) {
		float v = frand() * scale;
		if (t == DG_F32)
			((float *)p)[i] = v;
		else if (t == DG_F16)
			((uint16_t *)p)[i] = dg_f32_to_f16(v);
		else
			((uint16_t *)p)[i] = dg_f32_to_bf16(v);
	}
}

#define NT 5
static const int64_t sizes[NT] = {0, 1, 17, 1031, 70001}; /* 70001 spans two Lamb blocks */

/* one run's buffers: params, grads (per step), m, v, copies */
typedef struct bufs {
	void *p[NT], *c[NT];
	float *m[NT], *v[NT];
} bufs;

static void bufs_init(bufs *b, dg_dtype pt, dg_dtype ct, int copy, uint64_t seed)
{
	rng = seed;
	for (int i = 0; i < NT; i++) {
		b->p[i] = calloc((size_t)sizes[i] + 1, esz(pt));
		b->c[i] = copy ? calloc((size_t)sizes[i] + 1, esz(ct)) : NULL;
		b->m[i] = calloc((size_t)sizes[i] + 1, 4);
		b->v[i] = calloc((size_t)sizes[i] + 1, 4);
		fill(pt, b->p[i], sizes[i], 1.0f);
	}
}

static void bufs_free(bufs *b)
{
	for (int i = 0; i < NT; i++) {
		free(b->p[i]);
		free(b->c[i]);
		free(b->m[i]);
		free(b->v[i]);
	}
}

static int run(dg_ctx *ctx, dg_optim_hparams hp, dg_dtype pt, dg_dtype gt, dg_dtype ct, int copy, bufs *b,
	       double *trust, int steps)
{
	void *g[NT];
	for (int i = 0; i < NT; i++)
		g[i] = calloc((size_t)sizes[i] + 1, esz(gt));
	rng = 12345;
	dg_optim_lists l = {NT, sizes, pt, b->p, gt, (const void *const *)g, b->m, b->v, ct, copy ? b->c : NULL};
	int st = DG_OK;
	for (int s = 1; s <= steps && st == DG_OK; s++) {
		for (int i = 0; i < NT; i++)
			fill(gt, g[i], sizes[i], 1024.0f); /* grads carry a loss scale of 1024 */
		hp.step = s;
		st = dg_optim_step(ctx, &hp, &l, trust);
	}
	for (int i = 0; i < NT; i++)
		free(g[i]);
	return st;
}

static int same(const void *a, const void *b, size_t n) { return n == 0 || memcmp(a, b, n) == 0; }

static void compare(const char *what, dg_optim_hparams hp, dg_dtype pt, dg_dtype gt, dg_dtype ct, int copy,
		    dg_isa isa, int threads)
{
	dg_ctx *ref, *ctx;
	dg_ctx_create(1, &ref);
	dg_ctx_set_isa(ref, DG_ISA_SCALAR);
	dg_ctx_create(threads, &ctx);
	if (dg_ctx_set_isa(ctx, isa) != DG_OK) {
		dg_ctx_destroy(ref);
		dg_ctx_destroy(ctx);
		return;
	}
	bufs a, b;
	double ta[NT], tb[NT];
	bufs_init(&a, pt, ct, copy, 7);
	bufs_init(&b, pt, ct, copy, 7);
	int sa = run(ref, hp, pt, gt, ct, copy, &a, ta, 3);
	int sb = run(ctx, hp, pt, gt, ct, copy, &b, tb, 3);
	CHECK(sa == DG_OK && sb == DG_OK, "%s: status %d %d", what, sa, sb);
	for (int i = 0; i < NT; i++) {
		size_t n = (size_t)sizes[i];
		CHECK(same(a.p[i], b.p[i], n * esz(pt)), "%s isa=%d thr=%d pt=%d gt=%d ct=%d n=%zu: params differ", what,
		      isa, threads, pt, gt, copy ? (int)ct : -1, n);
		CHECK(same(a.m[i], b.m[i], n * 4), "%s isa=%d n=%zu: exp_avg differs", what, isa, n);
		CHECK(same(a.v[i], b.v[i], n * 4), "%s isa=%d n=%zu: exp_avg_sq differs", what, isa, n);
		if (copy)
			CHECK(same(a.c[i], b.c[i], n * esz(ct)), "%s isa=%d n=%zu: copy differs", what, isa, n);
		if (hp.kind == DG_OPTIM_LAMB)
			CHECK(ta[i] == tb[i], "%s isa=%d n=%zu: trust %.17g vs %.17g", what, isa, n, ta[i], tb[i]);
	}
	/* the copy must be the rounded parameter */
	if (copy && pt == DG_F32)
		for (int i = 0; i < NT; i++)
			for (int64_t k = 0; k < sizes[i]; k++) {
				float p = ((float *)b.p[i])[k];
				uint16_t want = ct == DG_F16 ? dg_f32_to_f16(p) : dg_f32_to_bf16(p);
				if (((uint16_t *)b.c[i])[k] != want) {
					CHECK(0, "%s: copy[%d][%lld] is not the rounded param", what, i, (long long)k);
					break;
				}
			}
	bufs_free(&a);
	bufs_free(&b);
	dg_ctx_destroy(ref);
	dg_ctx_destroy(ctx);
}

static dg_optim_hparams base(dg_optim_kind kind)
{
	dg_optim_hparams hp = {0};
	hp.kind = kind;
	hp.lr = 1e-3;
	hp.beta1 = 0.9;
	hp.beta2 = 0.999;
	hp.eps = 1e-8;
	hp.weight_decay = 0.01;
	hp.adam_w_mode = 1;
	hp.bias_correction = 1;
	hp.max_coeff = 10;
	hp.min_coeff = 0.01;
	hp.grad_scale = 1024;
	return hp;
}

static void test_isas(void)
{
	dg_optim_hparams cases[8];
	const char *names[8] = {"adamw", "adam-l2", "adam-nobc", "sgd-mom", "sgd-nesterov", "sgd-plain", "lamb", "lion"};
	cases[0] = base(DG_OPTIM_ADAM);
	cases[1] = base(DG_OPTIM_ADAM);
	cases[1].adam_w_mode = 0;
	cases[2] = base(DG_OPTIM_ADAM);
	cases[2].bias_correction = 0;
	cases[3] = base(DG_OPTIM_SGD);
	cases[3].momentum = 0.9;
	cases[3].dampening = 0.1;
	cases[4] = base(DG_OPTIM_SGD);
	cases[4].momentum = 0.9;
	cases[4].nesterov = 1;
	cases[5] = base(DG_OPTIM_SGD);
	cases[6] = base(DG_OPTIM_LAMB);
	cases[7] = base(DG_OPTIM_LION);
	cases[7].beta2 = 0.99;
	struct {
		dg_dtype p, c;
		int copy;
	} pc[5] = {{DG_F32, DG_F32, 0}, {DG_F32, DG_F16, 1}, {DG_F32, DG_BF16, 1}, {DG_F16, DG_F32, 0}, {DG_BF16, DG_F32, 0}};
	dg_dtype gts[3] = {DG_F32, DG_F16, DG_BF16};
	dg_isa isas[3] = {DG_ISA_SCALAR, DG_ISA_AVX2, DG_ISA_AVX512};
	for (int c = 0; c < 8; c++)
		for (int d = 0; d < 5; d++)
			for (int g = 0; g < 3; g++)
				for (int s = 0; s < 3; s++) {
					compare(names[c], cases[c], pc[d].p, gts[g], pc[d].c, pc[d].copy, isas[s], 1);
					if (d == 0 && g == 0)
						compare(names[c], cases[c], pc[d].p, gts[g], pc[d].c, pc[d].copy, isas[s], 3);
				}
}

static void test_unscale(void)
{
	dg_dtype ts[3] = {DG_F32, DG_F16, DG_BF16};
	dg_isa isas[3] = {DG_ISA_SCALAR, DG_ISA_AVX2, DG_ISA_AVX512};
	for (int t = 0; t < 3; t++)
		for (int s = 0; s < 3; s++)
			for (int bad = 0; bad < 3; bad++) { /* 0: finite, 1: Inf in the tail, 2: NaN in the body */
				dg_ctx *ref, *ctx;
				dg_ctx_create(1, &ref);
				dg_ctx_set_isa(ref, DG_ISA_SCALAR);
				dg_ctx_create(2, &ctx);
				if (dg_ctx_set_isa(ctx, isas[s]) != DG_OK) {
					dg_ctx_destroy(ref);
					dg_ctx_destroy(ctx);
					continue;
				}
				int64_t ns[2] = {1000, 40003};
				void *a[2], *b[2];
				for (int i = 0; i < 2; i++) {
					a[i] = calloc((size_t)ns[i], esz(ts[t]));
					b[i] = calloc((size_t)ns[i], esz(ts[t]));
					rng = 99 + (uint64_t)i;
					fill(ts[t], a[i], ns[i], 100.0f);
				}
				if (bad == 1) /* a value that is finite but overflows f16 once multiplied */
					((uint16_t *)a[1])[ns[1] - 1] = ts[t] == DG_F32 ? 0 : (ts[t] == DG_F16 ? 0x7c00 : 0x7f80);
				if (bad == 1 && ts[t] == DG_F32)
					((float *)a[1])[ns[1] - 1] = INFINITY;
				if (bad == 2) {
					if (ts[t] == DG_F32)
						((float *)a[0])[5] = NAN;
					else
						((uint16_t *)a[0])[5] = 0x7fc0;
				}
				for (int i = 0; i < 2; i++)
					memcpy(b[i], a[i], (size_t)ns[i] * esz(ts[t]));
				int fa = -1, fb = -1;
				CHECK(dg_unscale_check(ref, ts[t], a, ns, 2, 1.0f / 64, &fa) == DG_OK, "unscale status");
				CHECK(dg_unscale_check(ctx, ts[t], b, ns, 2, 1.0f / 64, &fb) == DG_OK, "unscale status");
				CHECK(fa == (bad != 0) && fb == fa, "unscale t=%d isa=%d bad=%d: found %d %d", ts[t], isas[s],
				      bad, fa, fb);
				for (int i = 0; i < 2; i++) {
					CHECK(same(a[i], b[i], (size_t)ns[i] * esz(ts[t])), "unscale t=%d isa=%d: bits differ",
					      ts[t], isas[s]);
					free(a[i]);
					free(b[i]);
				}
				dg_ctx_destroy(ref);
				dg_ctx_destroy(ctx);
			}
}

static void test_naive_and_errors(void)
{
	dg_ctx *ctx;
	dg_ctx_create(1, &ctx);
	dg_ctx_set_isa(ctx, DG_ISA_AUTO);
	enum { N = 1001 };
	static float p1[N], p2[N], g[N], m1[N], m2[N], v1[N], v2[N];
	rng = 5;
	for (int i = 0; i < N; i++) {
		p1[i] = p2[i] = frand();
		g[i] = frand();
	}
	dg_optim_hparams hp = base(DG_OPTIM_ADAM);
	hp.step = 1;
	void *pp[1] = {p2};
	const void *gg[1] = {g};
	float *mm[1] = {m2}, *vv[1] = {v2};
	int64_t ns[1] = {N};
	dg_optim_lists l = {1, ns, DG_F32, pp, DG_F32, gg, mm, vv, DG_F32, NULL};
	CHECK(dg_adamw_naive_ref(&hp, p1, g, m1, v1, N) == DG_OK, "naive status");
	CHECK(dg_optim_step(ctx, &hp, &l, NULL) == DG_OK, "step status");
	CHECK(same(p1, p2, sizeof p1) && same(m1, m2, sizeof m1) && same(v1, v2, sizeof v1),
	      "naive reference differs from the fused step");

	dg_optim_hparams bad = hp;
	bad.lr = -1;
	CHECK(dg_optim_step(ctx, &bad, &l, NULL) == DG_ERR_INVALID, "negative lr accepted");
	bad = hp;
	bad.beta2 = 1.0;
	CHECK(dg_optim_step(ctx, &bad, &l, NULL) == DG_ERR_INVALID, "beta2 = 1 accepted");
	bad = hp;
	bad.grad_scale = 0;
	CHECK(dg_optim_step(ctx, &bad, &l, NULL) == DG_ERR_INVALID, "grad_scale 0 accepted");
	bad = hp;
	bad.step = 0;
	CHECK(dg_optim_step(ctx, &bad, &l, NULL) == DG_ERR_INVALID, "step 0 accepted");
	bad = base(DG_OPTIM_SGD);
	bad.step = 1;
	bad.nesterov = 1;
	CHECK(dg_optim_step(ctx, &bad, &l, NULL) == DG_ERR_INVALID, "nesterov without momentum accepted");
	dg_optim_lists bl = l;
	bl.copies = pp;
	bl.copy_dtype = DG_F32;
	CHECK(dg_optim_step(ctx, &hp, &bl, NULL) == DG_ERR_DTYPE, "f32 copy accepted");
	bl = l;
	bl.param_dtype = DG_I32;
	CHECK(dg_optim_step(ctx, &hp, &bl, NULL) == DG_ERR_DTYPE, "i32 params accepted");
	bl = l;
	bl.exp_avg_sq = NULL;
	CHECK(dg_optim_step(ctx, &hp, &bl, NULL) == DG_ERR_INVALID, "missing exp_avg_sq accepted");
	int64_t neg[1] = {-1};
	bl = l;
	bl.ns = neg;
	CHECK(dg_optim_step(ctx, &hp, &bl, NULL) == DG_ERR_INVALID, "negative size accepted");
	CHECK(same(p1, p2, sizeof p1), "a rejected call wrote the params");
	dg_ctx_destroy(ctx);
}

int main(void)
{
	test_isas();
	test_unscale();
	test_naive_and_errors();
	if (failures) {
		fprintf(stderr, "test_optim: %d failures\n", failures);
		return 1;
	}
	printf("test_optim: ok (best isa %d)\n", (int)dg_cpu_best_isa());
	return 0;
}
