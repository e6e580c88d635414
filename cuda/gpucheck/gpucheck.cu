/*
 * gpucheck.cu — compares every dg_cuda_* kernel with its CPU twin (dg_*,
 * the C core linked into the same binary) on random data and edge values,
 * and prints one row per case: kernel, dtype, n, mismatching elements or
 * max relative difference, PASS/FAIL, GB/s of the GPU kernel. Exit status 1
 * on any failure. Build: scripts/build-cuda.sh; run: build/cuda/gpucheck.
 *
 * Bits must match exactly, except that a NaN produced by arithmetic (scale,
 * axpy, reduce sum) matches any NaN: GPUs return the canonical NaN where x86
 * propagates the input's payload. Casts, pack/unpack, max/min keep payloads
 * on both and are compared bit for bit.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepgo.h"
#include "deepgo_cuda.h"

static int failures;

#define CK(call)                                                                                               \
	do {                                                                                                   \
		cudaError_t e_ = (call);                                                                       \
		if (e_ != cudaSuccess) {                                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
			exit(2);                                                                               \
		}                                                                                              \
	} while (0)
#define DG(ctx, call)                                                                                          \
	do {                                                                                                   \
		dg_status s_ = (call);                                                                         \
		if (s_ != DG_OK) {                                                                             \
			fprintf(stderr, "%s:%d: %s: %s %s\n", __FILE__, __LINE__, #call, dg_strerror(s_),       \
				(ctx) ? dg_cuda_ctx_error((ctx), NULL) : "");                                  \
			exit(2);                                                                               \
		}                                                                                              \
	} while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static const char *dname(dg_dtype t)
{
	static const char *n[] = {"f32", "f16", "bf16", "i32", "i64", "u8", "bool", "f64"};
	return n[t];
}

/* fill writes edge values first (zeros, infinities, NaNs, subnormals,
 * rounding ties), then random values: mostly moderate floats, some random
 * bit patterns (every class, including NaN payloads). */
static void fill(dg_dtype t, void *p, int64_t n)
{
	static const uint32_t edge32[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001,
					  0x7f800001, 0x00000001, 0x807fffff, 0x3f801000, 0x3f803000, 0x3f808000,
					  0x3f818000, 0x477fe000, 0x477ff000, 0x33000000, 0x33000001, 0x387fc000,
					  0x7f7fffff, 0x38800000};
	static const uint16_t edge16[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfd01, 0x7c01, 0x0001, 0x83ff,
					  0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x0080, 0x807f, 0x7bff};
	for (int64_t i = 0; i < n; i++) {
		uint32_t r = rnd();
		switch (t) {
		case DG_F32: {
			uint32_t u;
			if (i < (int64_t)(sizeof edge32 / 4))
				u = edge32[i];
			else if (r % 16 == 0)
				u = rnd() << 16 | rnd();
			else {
				float f = ((float)(int32_t)rnd() / 2147483648.0f) * (float)(1 << (r % 12));
				memcpy(&u, &f, 4);
			}
			((uint32_t *)p)[i] = u;
			break;
		}
		case DG_F16:
		case DG_BF16:
			((uint16_t *)p)[i] = i < (int64_t)(sizeof edge16 / 2) ? edge16[i] : (uint16_t)r;
			break;
		case DG_I32: ((int32_t *)p)[i] = (int32_t)(rnd() << 16 | rnd()); break;
		case DG_I64: ((int64_t *)p)[i] = (int64_t)((uint64_t)rnd() << 48 ^ (uint64_t)rnd() << 24 ^ rnd()); break;
		default: ((uint8_t *)p)[i] = (uint8_t)r; break;
		}
	}
}

static int is_nan(dg_dtype t, const void *p, int64_t i)
{
	if (t == DG_F32)
		return (((const uint32_t *)p)[i] & 0x7fffffffu) > 0x7f800000u;
	uint16_t h = ((const uint16_t *)p)[i] & 0x7fff;
	return t == DG_F16 ? h > 0x7c00 : t == DG_BF16 ? h > 0x7f80 : 0;
}

/* mismatches counts elements whose bits differ (any NaN matching any NaN
 * when nan_any). */
static int64_t mismatches(dg_dtype t, const void *a, const void *b, int64_t n, int nan_any)
{
	size_t es = dg_dtype_size(t);
	int64_t bad = 0;
	for (int64_t i = 0; i < n; i++) {
		if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) == 0)
			continue;
		if (nan_any && is_nan(t, a, i) && is_nan(t, b, i))
			continue;
		bad++;
	}
	return bad;
}

static void row(const char *k, const char *dt, int64_t n, const char *diff, int ok, double bytes, float ms)
{
	double gbs = ms > 0 ? bytes / (ms * 1e6) : 0;
	printf("%-10s %-10s %9lld  %-22s %-4s %8.1f\n", k, dt, (long long)n, diff, ok ? "PASS" : "FAIL", gbs);
	if (!ok)
		failures++;
}

/* A list: count tensors cut from one host and one device block. */
#define MAXT 5
typedef struct {
	int count;
	int64_t ns[MAXT], total;
	void *h[MAXT], *d[MAXT];
	char *hb, *db;
} list;

static void list_make(list *l, dg_dtype t, int64_t n, int do_fill)
{
	/* one big tensor plus small odd ones, so chunks and tables split */
	int64_t ns[MAXT] = {n, 1, 17, 0, n / 2};
	size_t es = dg_dtype_size(t);
	l->count = MAXT;
	l->total = 0;
	for (int i = 0; i < MAXT; i++)
		l->total += ns[i];
	l->hb = (char *)malloc(l->total * es + 64);
	CK(cudaMalloc(&l->db, l->total * es + 64));
	if (do_fill)
		fill(t, l->hb, l->total);
	CK(cudaMemcpy(l->db, l->hb, l->total * es, cudaMemcpyHostToDevice));
	int64_t off = 0;
	for (int i = 0; i < MAXT; i++) {
		l->ns[i] = ns[i];
		l->h[i] = l->hb + off * es;
		l->d[i] = l->db + off * es;
		off += ns[i];
	}
}

static void list_free(list *l)
{
	free(l->hb);
	CK(cudaFree(l->db));
}

/* list_diff downloads the device list and compares it with the host one */
static int64_t list_diff(list *l, dg_dtype t, int nan_any)
{
	size_t es = dg_dtype_size(t);
	char *back = (char *)malloc(l->total * es + 1);
	CK(cudaMemcpy(back, l->db, l->total * es, cudaMemcpyDeviceToHost));
	int64_t bad = mismatches(t, l->hb, back, l->total, nan_any);
	free(back);
	return bad;
}

typedef struct {
	dg_cuda_ctx *ctx;
	cudaEvent_t e0, e1;
} gpu;

static void tick(gpu *g) { CK(cudaEventRecord(g->e0, (cudaStream_t)dg_cuda_ctx_stream(g->ctx))); }
static float tock(gpu *g)
{
	float ms;
	CK(cudaEventRecord(g->e1, (cudaStream_t)dg_cuda_ctx_stream(g->ctx)));
	CK(cudaEventSynchronize(g->e1));
	CK(cudaEventElapsedTime(&ms, g->e0, g->e1));
	return ms;
}

static const dg_dtype floats[] = {DG_F32, DG_F16, DG_BF16};

static void check_cast(dg_ctx *c, gpu *g, dg_dtype a, dg_dtype b, int64_t n)
{
	list s, dc, dg;
	list_make(&s, a, n, 1);
	list_make(&dc, b, n, 0);
	list_make(&dg, b, n, 0);
	DG(NULL, dg_cast(c, a, b, (const void *const *)s.h, dc.h, s.ns, s.count));
	tick(g);
	DG(g->ctx, dg_cuda_cast(g->ctx, a, b, (const void *const *)s.d, dg.d, s.ns, s.count));
	float ms = tock(g);
	memcpy(dg.hb, dc.hb, dc.total * dg_dtype_size(b)); /* the CPU result is the reference */
	int64_t bad = list_diff(&dg, b, 0);
	char dt[16], diff[32];
	snprintf(dt, sizeof dt, "%s>%s", dname(a), dname(b));
	snprintf(diff, sizeof diff, "%lld bad", (long long)bad);
	row("cast", dt, s.total, diff, bad == 0, (double)s.total * (dg_dtype_size(a) + dg_dtype_size(b)), ms);
	list_free(&s);
	list_free(&dc);
	list_free(&dg);
}

static void check_scale_axpy(dg_ctx *c, gpu *g, dg_dtype t, int64_t n)
{
	list x, y;
	list_make(&x, t, n, 1);
	list_make(&y, t, n, 1);
	float alpha = 0.37f;
	DG(NULL, dg_scale(c, t, x.h, x.ns, x.count, alpha));
	tick(g);
	DG(g->ctx, dg_cuda_scale(g->ctx, t, x.d, x.ns, x.count, alpha));
	float ms = tock(g);
	int64_t bad = list_diff(&x, t, 1);
	char diff[32];
	snprintf(diff, sizeof diff, "%lld bad", (long long)bad);
	row("scale", dname(t), x.total, diff, bad == 0, 2.0 * x.total * dg_dtype_size(t), ms);
	/* axpy on the scaled x (now equal on both sides) */
	DG(NULL, dg_axpy(c, t, -1.5f, (const void *const *)x.h, y.h, x.ns, x.count));
	tick(g);
	DG(g->ctx, dg_cuda_axpy(g->ctx, t, -1.5f, (const void *const *)x.d, y.d, x.ns, x.count));
	ms = tock(g);
	bad = list_diff(&y, t, 1);
	snprintf(diff, sizeof diff, "%lld bad", (long long)bad);
	row("axpy", dname(t), x.total, diff, bad == 0, 3.0 * x.total * dg_dtype_size(t), ms);
	list_free(&x);
	list_free(&y);
}

/* finite_only replaces Inf/NaN so sums of squares are comparable numbers */
static void finite_only(dg_dtype t, list *l)
{
	for (int64_t i = 0; i < l->total; i++) {
		if (t == DG_F32 && (((uint32_t *)l->hb)[i] & 0x7f800000u) == 0x7f800000u)
			((uint32_t *)l->hb)[i] = 0x3f800000u;
		if (t != DG_F32 && (((uint16_t *)l->hb)[i] & (t == DG_F16 ? 0x7c00 : 0x7f80)) == (t == DG_F16 ? 0x7c00 : 0x7f80))
			((uint16_t *)l->hb)[i] = 0;
	}
	CK(cudaMemcpy(l->db, l->hb, l->total * dg_dtype_size(t), cudaMemcpyHostToDevice));
}

static void check_norms(dg_ctx *c, gpu *g, dg_dtype t, int64_t n)
{
	list x;
	list_make(&x, t, n, 1);
	/* nonfinite: with the edge values (has Inf/NaN when the list is big enough) */
	int fc = 0, fg = -1, *dfound;
	double *dres;
	CK(cudaMalloc(&dfound, sizeof(int)));
	CK(cudaMalloc(&dres, sizeof(double) * (MAXT + 1)));
	DG(NULL, dg_nonfinite(c, t, (const void *const *)x.h, x.ns, x.count, &fc));
	tick(g);
	DG(g->ctx, dg_cuda_nonfinite(g->ctx, t, (const void *const *)x.d, x.ns, x.count, dfound));
	float ms = tock(g);
	CK(cudaMemcpy(&fg, dfound, sizeof(int), cudaMemcpyDeviceToHost));
	char diff[40];
	snprintf(diff, sizeof diff, "cpu %d gpu %d", fc, fg);
	row("nonfinite", dname(t), x.total, diff, fc == fg, (double)x.total * dg_dtype_size(t), ms);
	finite_only(t, &x);
	DG(NULL, dg_nonfinite(c, t, (const void *const *)x.h, x.ns, x.count, &fc));
	DG(g->ctx, dg_cuda_nonfinite(g->ctx, t, (const void *const *)x.d, x.ns, x.count, dfound));
	CK(cudaMemcpy(&fg, dfound, sizeof(int), cudaMemcpyDeviceToHost));
	snprintf(diff, sizeof diff, "finite: cpu %d gpu %d", fc, fg);
	row("nonfinite", dname(t), x.total, diff, fc == 0 && fg == 0, 0, 0);
	/* sumsq on finite data: 1e-12 relative, per tensor and total */
	double pc[MAXT], tc, pg[MAXT + 1];
	DG(NULL, dg_sumsq(c, t, (const void *const *)x.h, x.ns, x.count, pc, &tc));
	tick(g);
	DG(g->ctx, dg_cuda_sumsq(g->ctx, t, (const void *const *)x.d, x.ns, x.count, dres + 1, dres));
	ms = tock(g);
	CK(cudaMemcpy(pg, dres, sizeof pg, cudaMemcpyDeviceToHost));
	double worst = fabs(pg[0] - tc) / (tc > 0 ? tc : 1);
	for (int i = 0; i < MAXT; i++) {
		double r = fabs(pg[i + 1] - pc[i]) / (pc[i] > 0 ? pc[i] : 1);
		worst = r > worst ? r : worst;
	}
	snprintf(diff, sizeof diff, "rel %.2e", worst);
	row("sumsq", dname(t), x.total, diff, worst <= 1e-12, (double)x.total * dg_dtype_size(t), ms);
	CK(cudaFree(dfound));
	CK(cudaFree(dres));
	list_free(&x);
}

static void check_pack(dg_ctx *c, gpu *g, dg_dtype t, int64_t n)
{
	list x, y;
	list_make(&x, t, n, 1);
	list_make(&y, t, n, 0);
	size_t es = dg_dtype_size(t);
	int64_t offs[MAXT], flat_n = 0;
	for (int i = MAXT - 1; i >= 0; i--) { /* reversed, with 3-element gaps */
		offs[i] = flat_n;
		flat_n += x.ns[i] + 3;
	}
	char *hf = (char *)calloc(flat_n + 1, es), *back = (char *)malloc(flat_n * es + 1), *df;
	CK(cudaMalloc(&df, flat_n * es + 1));
	CK(cudaMemset(df, 0, flat_n * es + 1));
	DG(NULL, dg_pack(c, t, (const void *const *)x.h, x.ns, offs, x.count, hf, flat_n));
	tick(g);
	DG(g->ctx, dg_cuda_pack(g->ctx, t, (const void *const *)x.d, x.ns, offs, x.count, df, flat_n));
	float ms = tock(g);
	CK(cudaMemcpy(back, df, flat_n * es, cudaMemcpyDeviceToHost));
	int64_t bad = mismatches(t, hf, back, flat_n, 0);
	char diff[32];
	snprintf(diff, sizeof diff, "%lld bad", (long long)bad);
	row("pack", dname(t), x.total, diff, bad == 0, 2.0 * x.total * es, ms);
	DG(NULL, dg_unpack(c, t, hf, flat_n, offs, y.ns, y.h, y.count));
	tick(g);
	DG(g->ctx, dg_cuda_unpack(g->ctx, t, df, flat_n, offs, y.ns, y.d, y.count));
	ms = tock(g);
	bad = list_diff(&y, t, 0) + mismatches(t, x.hb, y.hb, x.total, 0);
	snprintf(diff, sizeof diff, "%lld bad", (long long)bad);
	row("unpack", dname(t), x.total, diff, bad == 0, 2.0 * x.total * es, ms);
	free(hf);
	free(back);
	CK(cudaFree(df));
	list_free(&x);
	list_free(&y);
}

static void check_reduce(dg_ctx *c, gpu *g, dg_dtype t, dg_redop op, int64_t n)
{
	enum { NS = 4 };
	size_t es = dg_dtype_size(t);
	char *h[NS], *d[NS], *hd = (char *)malloc(n * es + 1), *back = (char *)malloc(n * es + 1), *dd;
	for (int q = 0; q < NS; q++) {
		h[q] = (char *)malloc(n * es + 1);
		fill(t, h[q], n);
		CK(cudaMalloc(&d[q], n * es + 1));
		CK(cudaMemcpy(d[q], h[q], n * es, cudaMemcpyHostToDevice));
	}
	CK(cudaMalloc(&dd, n * es + 1));
	DG(NULL, dg_reduce_into(c, t, op, (const void *const *)h, NS, hd, n));
	tick(g);
	DG(g->ctx, dg_cuda_reduce_into(g->ctx, t, op, (const void *const *)d, NS, dd, n));
	float ms = tock(g);
	CK(cudaMemcpy(back, dd, n * es, cudaMemcpyDeviceToHost));
	int64_t bad = mismatches(t, hd, back, n, op == DG_SUM);
	/* in place: dst aliases srcs[1] */
	DG(g->ctx, dg_cuda_reduce_into(g->ctx, t, op, (const void *const *)d, NS, d[1], n));
	CK(cudaMemcpy(back, d[1], n * es, cudaMemcpyDeviceToHost));
	bad += mismatches(t, hd, back, n, op == DG_SUM);
	static const char *on[] = {"sum", "max", "min"};
	char k[32], diff[32];
	snprintf(k, sizeof k, "reduce.%s", on[op]);
	snprintf(diff, sizeof diff, "%lld bad", (long long)bad);
	row(k, dname(t), n, diff, bad == 0, (double)(NS + 1) * n * es, ms);
	for (int q = 0; q < NS; q++) {
		free(h[q]);
		CK(cudaFree(d[q]));
	}
	free(hd);
	free(back);
	CK(cudaFree(dd));
}

/* ---- optimizers ----------------------------------------------------------
 * dg_cuda_optim_step against dg_optim_step: two steps from random state on
 * moderate finite data, params, moments, copies and Lamb trust ratios bit
 * for bit (the CUDA Lamb norms add in the CPU's order). */

typedef struct {
	const char *name;
	dg_optim_hparams hp;
} optcase;

static optcase optcases[9];

static void optcases_init(void)
{
	dg_optim_hparams z;
	memset(&z, 0, sizeof z);
	z.grad_scale = 1000;
	for (int i = 0; i < 9; i++)
		optcases[i].hp = z;
	dg_optim_hparams *h;
#define OC(i, nm, k) (optcases[i].name = nm, h = &optcases[i].hp, h->kind = k)
	OC(0, "adamw", DG_OPTIM_ADAM), h->lr = 1e-3, h->beta1 = 0.9, h->beta2 = 0.999, h->eps = 1e-8,
		h->weight_decay = 0.01, h->adam_w_mode = 1, h->bias_correction = 1;
	OC(1, "lamb", DG_OPTIM_LAMB), h->lr = 1e-3, h->beta1 = 0.9, h->beta2 = 0.999, h->eps = 1e-6,
		h->weight_decay = 0.01, h->bias_correction = 1, h->max_coeff = 10, h->min_coeff = 0.01;
	OC(2, "adam-l2", DG_OPTIM_ADAM), h->lr = 1e-3, h->beta1 = 0.9, h->beta2 = 0.999, h->eps = 1e-8,
		h->weight_decay = 0.01, h->bias_correction = 1;
	OC(3, "adamw-nobc", DG_OPTIM_ADAM), h->lr = 3e-4, h->beta1 = 0.8, h->beta2 = 0.99, h->eps = 1e-6,
		h->weight_decay = 0.1, h->adam_w_mode = 1;
	OC(4, "sgd", DG_OPTIM_SGD), h->lr = 0.1, h->weight_decay = 1e-4;
	OC(5, "sgd-mom", DG_OPTIM_SGD), h->lr = 0.1, h->momentum = 0.9, h->dampening = 0.1, h->weight_decay = 1e-4;
	OC(6, "sgd-nest", DG_OPTIM_SGD), h->lr = 0.05, h->momentum = 0.9, h->nesterov = 1;
	OC(7, "lamb-clamp", DG_OPTIM_LAMB), h->lr = 2e-3, h->beta1 = 0.9, h->beta2 = 0.99, h->eps = 1e-8,
		h->max_coeff = 0.5, h->min_coeff = 0.1;
	OC(8, "lion", DG_OPTIM_LION), h->lr = 1e-4, h->beta1 = 0.9, h->beta2 = 0.99, h->weight_decay = 0.1;
#undef OC
}

/* fill_opt fills l with moderate finite values (mode 0 signed, 1 >= 0, 2
 * zeros), rounded from float32 by the CPU cast, and uploads them. */
static void fill_opt(dg_ctx *c, dg_dtype t, list *l, int mode)
{
	float *f = (float *)malloc(l->total * 4 + 4);
	for (int64_t i = 0; i < l->total; i++) {
		float x = ((float)(int32_t)rnd() / 2147483648.0f) * (float)(1 << (rnd() % 8)) / 16.0f;
		if (mode == 2 || i % 61 == 5)
			x = 0;
		else if (i % 67 == 7) { /* a subnormal */
			uint32_t u = rnd() & 0x807fffffu;
			memcpy(&x, &u, 4);
		}
		f[i] = mode == 1 ? fabsf(x) : x;
	}
	const void *src[1] = {f};
	void *dst[1] = {l->hb};
	DG(NULL, dg_cast(c, DG_F32, t, src, dst, &l->total, 1));
	CK(cudaMemcpy(l->db, l->hb, l->total * dg_dtype_size(t), cudaMemcpyHostToDevice));
	free(f);
}

static void check_optim(dg_ctx *c, gpu *g, const optcase *oc, dg_dtype pt, dg_dtype gt, int copy, dg_dtype ct,
			int64_t n)
{
	const dg_optim_hparams *hp0 = &oc->hp;
	int need_m = hp0->kind != DG_OPTIM_SGD || hp0->momentum != 0;
	int need_v = hp0->kind == DG_OPTIM_ADAM || hp0->kind == DG_OPTIM_LAMB;
	list p, gr, m, v, cp;
	list_make(&p, pt, n, 0);
	list_make(&gr, gt, n, 0);
	list_make(&m, DG_F32, n, 0);
	list_make(&v, DG_F32, n, 0);
	list_make(&cp, copy ? ct : DG_F16, n, 0);
	fill_opt(c, pt, &p, 0);
	fill_opt(c, gt, &gr, 0);
	fill_opt(c, DG_F32, &m, 0);
	fill_opt(c, DG_F32, &v, 1);
	fill_opt(c, copy ? ct : DG_F16, &cp, 2);
	double tc[MAXT], tg[MAXT], *dtrust;
	CK(cudaMalloc(&dtrust, sizeof tg));
	int64_t bad_trust = 0;
	float ms = 0;
	for (int step = 1; step <= 2; step++) {
		dg_optim_hparams hp = *hp0;
		hp.step = step;
		dg_optim_lists lh = {p.count, p.ns, pt, p.h, gt, (const void *const *)gr.h,
				     need_m ? (float *const *)m.h : NULL, need_v ? (float *const *)v.h : NULL,
				     ct, copy ? cp.h : NULL};
		dg_optim_lists ld = lh;
		ld.params = p.d;
		ld.grads = (const void *const *)gr.d;
		ld.exp_avg = need_m ? (float *const *)m.d : NULL;
		ld.exp_avg_sq = need_v ? (float *const *)v.d : NULL;
		ld.copies = copy ? cp.d : NULL;
		DG(NULL, dg_optim_step(c, &hp, &lh, tc));
		tick(g);
		DG(g->ctx, dg_cuda_optim_step(g->ctx, &hp, &ld, dtrust));
		ms = tock(g);
		if (hp.kind == DG_OPTIM_LAMB) {
			CK(cudaMemcpy(tg, dtrust, sizeof tg, cudaMemcpyDeviceToHost));
			for (int i = 0; i < MAXT; i++)
				bad_trust += memcmp(&tc[i], &tg[i], sizeof(double)) != 0;
		}
	}
	int64_t bad = list_diff(&p, pt, 1) + list_diff(&m, DG_F32, 1) + list_diff(&v, DG_F32, 1) +
		      (copy ? list_diff(&cp, ct, 1) : 0);
	char dt[24], diff[40];
	snprintf(dt, sizeof dt, "%s/%s%s%s", dname(pt), dname(gt), copy ? ">" : "", copy ? dname(ct) : "");
	snprintf(diff, sizeof diff, "%lld bad, %lld trust", (long long)bad, (long long)bad_trust);
	double bytes = (double)p.total * (2.0 * dg_dtype_size(pt) + dg_dtype_size(gt) + 8.0 * need_m +
					  8.0 * need_v + (copy ? dg_dtype_size(ct) : 0));
	if (hp0->kind == DG_OPTIM_LAMB) /* pass 2 reads p, m, v and writes p again */
		bytes += (double)p.total * (2.0 * dg_dtype_size(pt) + 8.0);
	row(oc->name, dt, p.total, diff, bad == 0 && bad_trust == 0, bytes, ms);
	CK(cudaFree(dtrust));
	list_free(&p);
	list_free(&gr);
	list_free(&m);
	list_free(&v);
	list_free(&cp);
}

/* every dtype combination for adamw and lamb, two for the other cases */
static void check_optims(dg_ctx *c, gpu *g, int64_t n)
{
	for (int oi = 0; oi < 9; oi++)
		for (int a = 0; a < 3; a++)
			for (int b = 0; b < 3; b++)
				for (int cc = 0; cc < 3; cc++) {
					dg_dtype pt = floats[a], gt = floats[b], ct = floats[cc];
					int copy = ct != DG_F32;
					if (copy && pt != DG_F32)
						continue; /* copies need float32 params */
					if (oi >= 2 && !((pt == DG_F32 && gt == DG_F32 && !copy) ||
							 (pt == DG_F32 && gt == DG_BF16 && ct == DG_BF16)))
						continue;
					check_optim(c, g, &optcases[oi], pt, gt, copy, ct, n);
				}
}

static void check_unscale(dg_ctx *c, gpu *g, dg_dtype t, int64_t n, float s)
{
	list x;
	list_make(&x, t, n, 1);
	int fc = 0, fg = -1, *dfound;
	CK(cudaMalloc(&dfound, sizeof(int)));
	DG(NULL, dg_unscale_check(c, t, x.h, x.ns, x.count, s, &fc));
	tick(g);
	DG(g->ctx, dg_cuda_unscale_check(g->ctx, t, x.d, x.ns, x.count, s, dfound));
	float ms = tock(g);
	CK(cudaMemcpy(&fg, dfound, sizeof(int), cudaMemcpyDeviceToHost));
	int64_t bad = list_diff(&x, t, 1);
	char diff[40];
	snprintf(diff, sizeof diff, "%lld bad, found %d/%d", (long long)bad, fc, fg);
	row("unscale", dname(t), x.total, diff, bad == 0 && fc == fg, 2.0 * x.total * dg_dtype_size(t), ms);
	CK(cudaFree(dfound));
	list_free(&x);
}

int main(void)
{
	int ndev = 0;
	DG(NULL, dg_cuda_device_count(&ndev, NULL));
	if (ndev == 0) {
		fprintf(stderr, "gpucheck: no CUDA device\n");
		return 2;
	}
	struct cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("gpucheck: %s (sm_%d%d), runtime %d, driver %d\n", prop.name, prop.major, prop.minor,
	       dg_cuda_runtime_version(), dg_cuda_driver_version());
	dg_ctx *c;
	DG(NULL, dg_ctx_create(0, &c));
	gpu g;
	DG(NULL, dg_cuda_ctx_create(0, NULL, &g.ctx, NULL));
	CK(cudaEventCreate(&g.e0));
	CK(cudaEventCreate(&g.e1));
	optcases_init();
	printf("%-10s %-10s %9s  %-22s %-4s %8s\n", "kernel", "dtype", "n", "diff", "", "GB/s");
	/* list of 5 tensors {n, 1, 17, 0, n/2}; the last size is for bandwidth */
	const int64_t sizes[] = {0, 1, 17, 4097, (1 << 20) + 3, 1 << 26};
	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		int64_t n = sizes[si];
		for (int a = 0; a < 3; a++)
			for (int b = 0; b < 3; b++)
				check_cast(c, &g, floats[a], floats[b], n);
		for (int a = 0; a < 3; a++) {
			check_scale_axpy(c, &g, floats[a], n);
			check_norms(c, &g, floats[a], n);
		}
		const dg_dtype packs[] = {DG_F32, DG_F16, DG_U8, DG_I64};
		for (int a = 0; a < 4; a++)
			check_pack(c, &g, packs[a], n);
		const dg_dtype reds[] = {DG_F32, DG_F16, DG_BF16, DG_I32, DG_I64};
		for (int a = 0; a < 5; a++)
			for (int op = 0; op < 3; op++)
				check_reduce(c, &g, reds[a], (dg_redop)op, n > 0 ? n : 1);
		for (int a = 0; a < 3; a++) {
			check_unscale(c, &g, floats[a], n, 1.0f / 1024);
			check_unscale(c, &g, floats[a], n, 1000.0f); /* 16-bit overflow */
		}
		if (n < (1 << 26)) {
			check_optims(c, &g, n);
		} else { /* bandwidth rows: float32 lists only, CPU time bounded */
			const int big[] = {0, 1, 5, 8};
			for (int i = 0; i < 4; i++)
				check_optim(c, &g, &optcases[big[i]], DG_F32, DG_F32, 0, DG_F32, n);
		}
	}
	dg_cuda_ctx_destroy(g.ctx);
	dg_ctx_destroy(c);
	printf("gpucheck: %s (%d failing rows)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
