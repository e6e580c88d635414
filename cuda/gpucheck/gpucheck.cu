/*
 * gpucheck.cu — compares every dg_cuda_* kernel with its CPU twin (dg_*,
 * the C core linked into the same binary) on random data and edge values,
 * and prints one row per case: kernel, dtype, n, mismatching elements or
 * max relative difference, PASS/FAIL, GB/s of the GPU kernel. Exit status 1
 * on any failure. Build: scripts/build-cuda.sh; run: build/cuda/gpucheck.
 *
 * The nn rows (check_nn) have their own tolerances, stated there; the
 * runtime rows (runtime.cu) check the glue around the kernels.
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

#include "gpucheck.h"

int failures;

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

void row(const char *k, const char *dt, int64_t n, const char *diff, int ok, double bytes, float ms)
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

/* dg_cuda_adam_bf16_step against dg_adam_bf16_step (bf16 master weights):
 * the Adam cases, moments st (F32 or BF16), two steps, bit for bit. */
static void check_adam_bf16(dg_ctx *c, gpu *g, const optcase *oc, dg_dtype st, int64_t n)
{
	list p, gr, m, v;
	list_make(&p, DG_BF16, n, 0);
	list_make(&gr, DG_BF16, n, 0);
	list_make(&m, st, n, 0);
	list_make(&v, st, n, 0);
	fill_opt(c, DG_BF16, &p, 0);
	fill_opt(c, DG_BF16, &gr, 0);
	fill_opt(c, st, &m, 0);
	fill_opt(c, st, &v, 1);
	float ms = 0;
	for (int step = 1; step <= 2; step++) {
		dg_optim_hparams hp = oc->hp;
		hp.step = step;
		dg_optim_lists lh = {p.count, p.ns, DG_BF16, p.h, DG_BF16, (const void *const *)gr.h,
				     (float *const *)m.h, (float *const *)v.h, DG_F32, NULL};
		dg_optim_lists ld = lh;
		ld.params = p.d;
		ld.grads = (const void *const *)gr.d;
		ld.exp_avg = (float *const *)m.d;
		ld.exp_avg_sq = (float *const *)v.d;
		DG(NULL, dg_adam_bf16_step(c, &hp, &lh, st));
		tick(g);
		DG(g->ctx, dg_cuda_adam_bf16_step(g->ctx, &hp, &ld, st));
		ms = tock(g);
	}
	int64_t bad = list_diff(&p, DG_BF16, 0) + list_diff(&m, st, 0) + list_diff(&v, st, 0);
	char k[40], dt[24], diff[40];
	snprintf(k, sizeof k, "bf16m.%s", oc->name);
	snprintf(dt, sizeof dt, "bf16/%s", dname(st));
	snprintf(diff, sizeof diff, "%lld bad", (long long)bad);
	row(k, dt, p.total, diff, bad == 0, (double)p.total * (6.0 + 4.0 * dg_dtype_size(st)), ms);
	list_free(&p);
	list_free(&gr);
	list_free(&m);
	list_free(&v);
}

/* every dtype combination for adamw and lamb, two for the other cases, and
 * the bf16-master Adam rows */
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
	const int adams[] = {0, 2, 3}; /* adamw, adam-l2, adamw-nobc */
	for (int i = 0; i < 3; i++) {
		check_adam_bf16(c, g, &optcases[adams[i]], DG_F32, n);
		check_adam_bf16(c, g, &optcases[adams[i]], DG_BF16, n);
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

/* ---- nn ops ---------------------------------------------------------------
 * dg_cuda_nn_* against dg_nn_* (the CPU twins, OpenBLAS or the stand-in
 * sgemm, see build-cuda.sh) on the same random inputs; the tolerances of
 * cuda/nn_test.go: "bits" rows must match exactly (the CUDA kernels add in
 * the CPU's order, no transcendental enters); "rel" rows are max|gpu-cpu| /
 * max|cpu| <= 1e-5 (cuBLAS vs OpenBLAS summation order; CUDA's vs glibc's
 * expf); gelu is |gpu-cpu| <= 1e-6 (1 + |x|) per element (tanhf). Backward
 * passes accumulate into non-zero gradients; the attention and layernorm
 * backward run from the CPU's saved weights and statistics. */

static float *nn_host(int64_t n, float scale)
{
	float *h = (float *)malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	for (int64_t i = 0; i < n; i++) /* sum of uniforms: roughly normal */
		h[i] = scale * (((float)rnd() + (float)rnd() + (float)rnd()) / 65536.0f / 65536.0f * 2.0f - 3.0f) * 1.2f;
	return h;
}

template <typename T> static T *nn_up(const T *h, int64_t bytes)
{
	T *d;
	CK(cudaMalloc(&d, bytes > 0 ? bytes : 4));
	if (bytes > 0)
		CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	return d;
}

static int32_t *nn_ids(int64_t n, int64_t v)
{
	int32_t *h = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
	for (int64_t i = 0; i < n; i++)
		h[i] = i % 5 == 3 ? (int32_t)(1 % v) : (int32_t)(rnd() % (uint32_t)v); /* repeats: ordered sums */
	return h;
}

/* nn_cmp downloads d (n floats) and compares it with h: tol < 0 bits, else
 * max|diff| <= tol * max|h|; one row. */
static void nn_cmp(const char *k, const char *cs, const float *h, const float *d, int64_t n, double tol, float ms,
		   double bytes)
{
	float *g = (float *)malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	CK(cudaMemcpy(g, d, sizeof(float) * n, cudaMemcpyDeviceToHost));
	char diff[40];
	int ok;
	if (tol < 0) {
		int64_t bad = 0;
		for (int64_t i = 0; i < n; i++)
			bad += memcmp(&h[i], &g[i], 4) != 0;
		snprintf(diff, sizeof diff, "%lld bad (bits)", (long long)bad);
		ok = bad == 0;
	} else {
		double mx = 0, df = 0;
		for (int64_t i = 0; i < n; i++) {
			mx = fmax(mx, fabs((double)h[i]));
			double e = fabs((double)h[i] - (double)g[i]);
			df = isnan(e) ? INFINITY : fmax(df, e);
		}
		double rel = mx > 0 ? df / mx : df;
		snprintf(diff, sizeof diff, "rel %.2e", rel);
		ok = rel <= tol;
	}
	row(k, cs, n, diff, ok, bytes, ms);
	free(g);
}

static void check_nn_matmul(dg_ctx *c, gpu *g, int64_t n, int64_t ci, int64_t oc)
{
	char cs[24];
	snprintf(cs, sizeof cs, "%lldx%lld", (long long)ci, (long long)oc);
	float *inp = nn_host(n * ci, 1), *w = nn_host(oc * ci, 0.5f), *bias = nn_host(oc, 1), *out = nn_host(n * oc, 1);
	float *dinp_ = nn_up(inp, 4 * n * ci), *dw_ = nn_up(w, 4 * oc * ci), *db_ = nn_up(bias, 4 * oc),
	      *dout_ = nn_up(out, 4 * n * oc);
	DG(NULL, dg_nn_matmul_forward(c, out, inp, w, bias, n, ci, oc));
	tick(g);
	DG(g->ctx, dg_cuda_nn_matmul_forward(g->ctx, dout_, dinp_, dw_, db_, n, ci, oc));
	float ms = tock(g);
	nn_cmp("mm.fwd", cs, out, dout_, n * oc, 1e-5, ms, 2.0 * n * ci * oc /* GFLOP/s */);
	float *gy = nn_host(n * oc, 1), *gx = nn_host(n * ci, 1), *gw = nn_host(oc * ci, 1), *gb = nn_host(oc, 1);
	float *dgy = nn_up(gy, 4 * n * oc), *dgx = nn_up(gx, 4 * n * ci), *dgw = nn_up(gw, 4 * oc * ci),
	      *dgb = nn_up(gb, 4 * oc);
	DG(NULL, dg_nn_matmul_backward(c, gx, gw, gb, gy, inp, w, n, ci, oc));
	tick(g);
	DG(g->ctx, dg_cuda_nn_matmul_backward(g->ctx, dgx, dgw, dgb, dgy, dinp_, dw_, n, ci, oc));
	ms = tock(g);
	nn_cmp("mm.dinp", cs, gx, dgx, n * ci, 1e-5, ms, 4.0 * n * ci * oc);
	nn_cmp("mm.dw", cs, gw, dgw, oc * ci, 1e-5, 0, 0);
	nn_cmp("mm.dbias", cs, gb, dgb, oc, -1, 0, 0);
	void *frees[] = {inp, w, bias, out, gy, gx, gw, gb};
	for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
		free(frees[i]);
	void *dfrees[] = {dinp_, dw_, db_, dout_, dgy, dgx, dgw, dgb};
	for (size_t i = 0; i < sizeof dfrees / sizeof dfrees[0]; i++)
		CK(cudaFree(dfrees[i]));
}

static void check_nn_layernorm(dg_ctx *c, gpu *g, int64_t n, int64_t ci)
{
	char cs[24];
	snprintf(cs, sizeof cs, "c%lld", (long long)ci);
	float *x = nn_host(n * ci, 3), *w = nn_host(ci, 1), *b = nn_host(ci, 1), *o = nn_host(n * ci, 1);
	float *m = nn_host(n, 1), *r = nn_host(n, 1);
	float *dx = nn_up(x, 4 * n * ci), *dw = nn_up(w, 4 * ci), *db = nn_up(b, 4 * ci), *dout = nn_up(o, 4 * n * ci),
	      *dm = nn_up(m, 4 * n), *dr = nn_up(r, 4 * n);
	DG(NULL, dg_nn_layernorm_forward(c, o, m, r, x, w, b, 1e-5f, n, ci));
	tick(g);
	DG(g->ctx, dg_cuda_nn_layernorm_forward(g->ctx, dout, dm, dr, dx, dw, db, 1e-5f, n, ci));
	float ms = tock(g);
	nn_cmp("ln.fwd", cs, o, dout, n * ci, -1, ms, 8.0 * n * ci);
	nn_cmp("ln.mean", cs, m, dm, n, -1, 0, 0);
	nn_cmp("ln.rstd", cs, r, dr, n, -1, 0, 0);
	CK(cudaMemcpy(dm, m, 4 * n, cudaMemcpyHostToDevice)); /* backward from the CPU's statistics */
	CK(cudaMemcpy(dr, r, 4 * n, cudaMemcpyHostToDevice));
	float *gy = nn_host(n * ci, 1), *gx = nn_host(n * ci, 1), *gw = nn_host(ci, 1), *gb = nn_host(ci, 1);
	float *dgy = nn_up(gy, 4 * n * ci), *dgx = nn_up(gx, 4 * n * ci), *dgw = nn_up(gw, 4 * ci), *dgb = nn_up(gb, 4 * ci);
	DG(NULL, dg_nn_layernorm_backward(c, gx, gw, gb, gy, x, w, m, r, n, ci));
	tick(g);
	DG(g->ctx, dg_cuda_nn_layernorm_backward(g->ctx, dgx, dgw, dgb, dgy, dx, dw, dm, dr, n, ci));
	ms = tock(g);
	nn_cmp("ln.dinp", cs, gx, dgx, n * ci, -1, ms, 16.0 * n * ci);
	nn_cmp("ln.dw", cs, gw, dgw, ci, -1, 0, 0);
	nn_cmp("ln.db", cs, gb, dgb, ci, -1, 0, 0);
	void *frees[] = {x, w, b, o, m, r, gy, gx, gw, gb};
	for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
		free(frees[i]);
	void *dfrees[] = {dx, dw, db, dout, dm, dr, dgy, dgx, dgw, dgb};
	for (size_t i = 0; i < sizeof dfrees / sizeof dfrees[0]; i++)
		CK(cudaFree(dfrees[i]));
}

static void check_nn_gelu_add(dg_ctx *c, gpu *g, int64_t n)
{
	float *x = nn_host(n, 3), *o = nn_host(n, 1), *gy = nn_host(n, 1), *gx = nn_host(n, 1);
	float *gx0 = (float *)malloc(4 * (size_t)(n > 0 ? n : 1)), *back = (float *)malloc(4 * (size_t)(n > 0 ? n : 1));
	memcpy(gx0, gx, 4 * n);
	float *dx = nn_up(x, 4 * n), *dout = nn_up(o, 4 * n), *dgy = nn_up(gy, 4 * n), *dgx = nn_up(gx, 4 * n);
	DG(NULL, dg_nn_gelu_forward(c, o, x, n));
	tick(g);
	DG(g->ctx, dg_cuda_nn_gelu_forward(g->ctx, dout, dx, n));
	float ms = tock(g);
	CK(cudaMemcpy(back, dout, 4 * n, cudaMemcpyDeviceToHost));
	int64_t bad = 0, ulps = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = fabs((double)o[i] - (double)back[i]);
		bad += !(d <= 1e-6 * (1 + fabs((double)x[i])));
		ulps += memcmp(&o[i], &back[i], 4) != 0;
	}
	char diff[64];
	snprintf(diff, sizeof diff, "%lld bad, %lld !bits", (long long)bad, (long long)ulps);
	row("gelu.fwd", "f32", n, diff, bad == 0, 8.0 * n, ms);
	DG(NULL, dg_nn_gelu_backward(c, gx, x, gy, n));
	tick(g);
	DG(g->ctx, dg_cuda_nn_gelu_backward(g->ctx, dgx, dx, dgy, n));
	ms = tock(g);
	CK(cudaMemcpy(back, dgx, 4 * n, cudaMemcpyDeviceToHost));
	bad = ulps = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = fabs((double)gx[i] - (double)back[i]);
		bad += !(d <= 1e-6 * (fabs((double)gx0[i]) + fabs((double)gy[i]) * (1 + fabs((double)x[i]))));
		ulps += memcmp(&gx[i], &back[i], 4) != 0;
	}
	snprintf(diff, sizeof diff, "%lld bad, %lld !bits", (long long)bad, (long long)ulps);
	row("gelu.bwd", "f32", n, diff, bad == 0, 16.0 * n, ms);
	/* add, in place on the GPU side (out aliases a) */
	DG(NULL, dg_nn_add(c, o, x, gy, n));
	tick(g);
	DG(g->ctx, dg_cuda_nn_add(g->ctx, dx, dx, dgy, n));
	ms = tock(g);
	nn_cmp("add", "f32", o, dx, n, -1, ms, 12.0 * n);
	free(x), free(o), free(gy), free(gx), free(gx0), free(back);
	CK(cudaFree(dx));
	CK(cudaFree(dout));
	CK(cudaFree(dgy));
	CK(cudaFree(dgx));
}

static void check_nn_encoder(dg_ctx *c, gpu *g, int64_t b, int64_t t, int64_t ci, int64_t v)
{
	char cs[24];
	snprintf(cs, sizeof cs, "v%lld", (long long)v);
	int64_t n = b * t;
	int32_t *tok = nn_ids(n, v);
	float *wte = nn_host(v * ci, 1), *wpe = nn_host(t * ci, 1), *o = nn_host(n * ci, 1);
	int32_t *dtok = (int32_t *)nn_up(tok, 4 * n);
	float *dwte = nn_up(wte, 4 * v * ci), *dwpe = nn_up(wpe, 4 * t * ci), *dout = nn_up(o, 4 * n * ci);
	int *dinv, inv = -1;
	CK(cudaMalloc(&dinv, sizeof(int)));
	DG(NULL, dg_nn_encoder_forward(c, o, tok, wte, wpe, b, t, ci, v));
	tick(g);
	DG(g->ctx, dg_cuda_nn_encoder_forward(g->ctx, dout, dtok, dwte, dwpe, b, t, ci, v, dinv));
	float ms = tock(g);
	nn_cmp("enc.fwd", cs, o, dout, n * ci, -1, ms, 12.0 * n * ci);
	/* gradients into wte/wpe's buffers (non-zero: accumulation) */
	float *gy = nn_host(n * ci, 1);
	float *dgy = nn_up(gy, 4 * n * ci);
	DG(NULL, dg_nn_encoder_backward(c, wte, wpe, gy, tok, b, t, ci, v));
	tick(g);
	DG(g->ctx, dg_cuda_nn_encoder_backward(g->ctx, dwte, dwpe, dgy, dtok, b, t, ci, v, dinv));
	ms = tock(g);
	nn_cmp("enc.dwte", cs, wte, dwte, v * ci, -1, ms, 12.0 * n * ci);
	nn_cmp("enc.dwpe", cs, wpe, dwpe, t * ci, -1, 0, 0);
	CK(cudaMemcpy(&inv, dinv, sizeof(int), cudaMemcpyDeviceToHost));
	/* a token out of range: flagged, nothing written */
	int32_t badtok = (int32_t)v;
	CK(cudaMemcpy(dtok + n / 2, &badtok, 4, cudaMemcpyHostToDevice));
	DG(g->ctx, dg_cuda_nn_encoder_forward(g->ctx, dgy, dtok, dwte, dwpe, b, t, ci, v, dinv));
	int inv2 = 0;
	CK(cudaMemcpy(&inv2, dinv, sizeof(int), cudaMemcpyDeviceToHost));
	nn_cmp("enc.bad", "untouched", gy, dgy, n * ci, -1, 0, 0);
	char diff[40];
	snprintf(diff, sizeof diff, "invalid %d then %d", inv, inv2);
	row("enc.check", cs, n, diff, inv == 0 && inv2 == 1, 0, 0);
	free(tok), free(wte), free(wpe), free(o), free(gy);
	CK(cudaFree(dtok));
	CK(cudaFree(dwte));
	CK(cudaFree(dwpe));
	CK(cudaFree(dout));
	CK(cudaFree(dgy));
	CK(cudaFree(dinv));
}

static void check_nn_attention(dg_ctx *c, gpu *g, int64_t b, int64_t t, int64_t nh, int64_t hs, int64_t win)
{
	char cs[48];
	if (win == INT64_MAX) /* "unbounded": the same as no window */
		snprintf(cs, sizeof cs, "T%lld wmax", (long long)t);
	else
		snprintf(cs, sizeof cs, "T%lld w%lld", (long long)t, (long long)win);
	int64_t ci = nh * hs, nq = b * t * 3 * ci, no = b * t * ci, na = b * nh * t * t;
	float *qkv = nn_host(nq, 1), *o = nn_host(no, 1), *att = nn_host(na, 1);
	float *dqkv = nn_up(qkv, 4 * nq), *dout = nn_up(o, 4 * no), *datt = nn_up(att, 4 * na);
	DG(NULL, dg_nn_attention_forward(c, o, att, qkv, b, t, nh, hs, win));
	tick(g);
	DG(g->ctx, dg_cuda_nn_attention_forward(g->ctx, dout, datt, dqkv, b, t, nh, hs, win));
	float ms = tock(g);
	nn_cmp("att.fwd", cs, o, dout, no, 1e-5, ms, 4.0 * (nq + no + na));
	nn_cmp("att.att", cs, att, datt, na, 1e-5, 0, 0);
	CK(cudaMemcpy(datt, att, 4 * na, cudaMemcpyHostToDevice)); /* backward from the CPU's weights */
	float *gy = nn_host(no, 1), *gq = nn_host(nq, 1);
	float *dgy = nn_up(gy, 4 * no), *dgq = nn_up(gq, 4 * nq);
	DG(NULL, dg_nn_attention_backward(c, gq, gy, qkv, att, b, t, nh, hs, win));
	tick(g);
	DG(g->ctx, dg_cuda_nn_attention_backward(g->ctx, dgq, dgy, dqkv, datt, b, t, nh, hs, win));
	ms = tock(g);
	nn_cmp("att.bwd", cs, gq, dgq, nq, 1e-5, ms, 4.0 * (3 * nq + no + na));
	free(qkv), free(o), free(att), free(gy), free(gq);
	CK(cudaFree(dqkv));
	CK(cudaFree(dout));
	CK(cudaFree(datt));
	CK(cudaFree(dgy));
	CK(cudaFree(dgq));
}

static void check_nn_xent(dg_ctx *c, gpu *g, int64_t n, int64_t v)
{
	char cs[24];
	snprintf(cs, sizeof cs, "v%lld", (long long)v);
	float *x = nn_host(n * v, 4), *p = nn_host(n * v, 1), *l = nn_host(n, 1);
	int32_t *tg = nn_ids(n, v);
	float *dx = nn_up(x, 4 * n * v), *dl = nn_up(l, 4 * n);
	int32_t *dtg = (int32_t *)nn_up(tg, 4 * n);
	int *dinv;
	CK(cudaMalloc(&dinv, sizeof(int)));
	DG(NULL, dg_nn_softmax_xent_forward(c, p, l, x, tg, n, v));
	tick(g);
	DG(g->ctx, dg_cuda_nn_softmax_xent_forward(g->ctx, dx, dl, dx, dtg, n, v, dinv)); /* in place */
	float ms = tock(g);
	nn_cmp("xent.prob", cs, p, dx, n * v, 1e-5, ms, 12.0 * n * v);
	float *back = (float *)malloc(4 * (size_t)n);
	CK(cudaMemcpy(back, dl, 4 * n, cudaMemcpyDeviceToHost));
	double worst = 0;
	for (int64_t i = 0; i < n; i++)
		worst = fmax(worst, fabs((double)back[i] - (double)l[i]) / (1 + fabs((double)l[i])));
	char diff[40];
	snprintf(diff, sizeof diff, "rel %.2e", worst);
	row("xent.loss", cs, n, diff, worst <= 1e-5, 0, 0);
	CK(cudaMemcpy(dx, p, 4 * n * v, cudaMemcpyHostToDevice)); /* backward from the CPU's probs */
	float *gl = nn_host(n, 1);
	float *dgl = nn_up(gl, 4 * n);
	DG(NULL, dg_nn_softmax_xent_backward(c, p, p, tg, gl, n, v)); /* in place on both */
	tick(g);
	DG(g->ctx, dg_cuda_nn_softmax_xent_backward(g->ctx, dx, dx, dtg, dgl, n, v, dinv));
	ms = tock(g);
	nn_cmp("xent.bwd", cs, p, dx, n * v, -1, ms, 8.0 * n * v);
	free(x), free(p), free(l), free(tg), free(back), free(gl);
	CK(cudaFree(dx));
	CK(cudaFree(dl));
	CK(cudaFree(dtg));
	CK(cudaFree(dinv));
	CK(cudaFree(dgl));
}

/* the vocabulary-parallel cross-entropy on the slice [v, 2v) of 3v: every
 * step's outputs bit for bit (no log enters) */
static void check_nn_vocab_xent(dg_ctx *c, gpu *g, int64_t n, int64_t v)
{
	char cs[24];
	snprintf(cs, sizeof cs, "v%lld", (long long)v);
	float *x = nn_host(n * v, 4), *m = nn_host(n, 1), *s = nn_host(n, 1), *tl = nn_host(n, 1);
	int32_t *tg = nn_ids(n, 3 * v);
	float *dx = nn_up(x, 4 * n * v), *dm = nn_up(m, 4 * n), *ds = nn_up(s, 4 * n), *dtl = nn_up(tl, 4 * n);
	int32_t *dtg = (int32_t *)nn_up(tg, 4 * n);
	int *dinv;
	CK(cudaMalloc(&dinv, sizeof(int)));
	DG(NULL, dg_nn_vocab_xent_max(c, m, x, n, v));
	tick(g);
	DG(g->ctx, dg_cuda_nn_vocab_xent_max(g->ctx, dm, dx, n, v));
	float ms = tock(g);
	nn_cmp("vxent.max", cs, m, dm, n, -1, ms, 4.0 * n * v);
	DG(NULL, dg_nn_vocab_xent_exp(c, x, s, tl, m, tg, n, v, v, 3 * v));
	tick(g);
	DG(g->ctx, dg_cuda_nn_vocab_xent_exp(g->ctx, dx, ds, dtl, dm, dtg, n, v, v, 3 * v, dinv));
	ms = tock(g);
	nn_cmp("vxent.exp", cs, x, dx, n * v, -1, ms, 8.0 * n * v);
	nn_cmp("vxent.sum", cs, s, ds, n, -1, 0, 0);
	nn_cmp("vxent.tgt", cs, tl, dtl, n, -1, 0, 0);
	DG(NULL, dg_nn_vocab_xent_grad(c, x, s, tg, 0.37f, n, v, v));
	tick(g);
	DG(g->ctx, dg_cuda_nn_vocab_xent_grad(g->ctx, dx, ds, dtg, 0.37f, n, v, v));
	ms = tock(g);
	nn_cmp("vxent.grad", cs, x, dx, n * v, -1, ms, 8.0 * n * v);
	free(x), free(m), free(s), free(tl), free(tg);
	CK(cudaFree(dx));
	CK(cudaFree(dm));
	CK(cudaFree(ds));
	CK(cudaFree(dtl));
	CK(cudaFree(dtg));
	CK(cudaFree(dinv));
}

static void check_nn(dg_ctx *c, gpu *g)
{
	printf("nn ops (GB/s column: GFLOP/s for mm rows)\n");
	check_nn_matmul(c, g, 37, 70, 45);
	check_nn_matmul(c, g, 5, 0, 3);
	check_nn_matmul(c, g, 512, 768, 2304);
	check_nn_layernorm(c, g, 33, 100);
	check_nn_layernorm(c, g, 1024, 768);
	check_nn_gelu_add(c, g, 10007);
	check_nn_gelu_add(c, g, 1 << 22);
	check_nn_encoder(c, g, 3, 11, 50, 23);
	check_nn_encoder(c, g, 4, 256, 768, 8192);
	check_nn_attention(c, g, 2, 37, 3, 40, 0);
	check_nn_attention(c, g, 2, 37, 3, 40, 5);
	check_nn_attention(c, g, 2, 37, 3, 40, INT64_MAX); /* k + window - 1 must not overflow */
	check_nn_attention(c, g, 2, 256, 12, 64, 0);
	check_nn_attention(c, g, 2, 256, 12, 64, 64);
	check_nn_xent(c, g, 19, 1000);
	check_nn_xent(c, g, 256, 50257);
	check_nn_vocab_xent(c, g, 19, 1000);
	check_nn_vocab_xent(c, g, 1024, 25129);
}

int main(void)
{
	int ndev = 0, cuerr = 0;
	if (dg_cuda_device_count(&ndev, &cuerr) != DG_OK) {
		int drv = dg_cuda_driver_version(), rt = dg_cuda_runtime_version();
		if (cuerr == DG_CUDA_ERR_INSUFFICIENT_DRIVER)
			fprintf(stderr, "gpucheck: the NVIDIA driver is too old for this CUDA: it supports CUDA %d.%d, "
					"this build's runtime is CUDA %d.%d\n",
				drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
		else
			fprintf(stderr, "gpucheck: cannot count CUDA devices: %s\n", dg_cuda_error_string(cuerr));
		return 2;
	}
	if (ndev == 0) {
		fprintf(stderr, "gpucheck: no GPU: no NVIDIA driver or no CUDA device on this machine\n");
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
	check_runtime(&g);
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
	check_nn(c, &g);
	dg_cuda_ctx_destroy(g.ctx);
	dg_ctx_destroy(c);
	printf("gpucheck: %s (%d failing rows)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
