/* nn_layernorm.c — LayerNorm forward/backward; rows split over the pool for
 * the per-row work, channels split for the weight/bias gradient sums (so
 * they run in row order whatever the thread count). Half-precision w and b
 * are widened element by element as they are read (they are [C] vectors,
 * read once per row from cache). */
#if defined(__clang__)
/* clang contracts a * b + c into an FMA by default, which the AVX2 and
 * AVX-512 copies could use and the baseline cannot (see LN_LOOPS) */
#pragma clang fp contract(off)
#endif
#include "nn_internal.h"

typedef struct ln_job {
	float *out, *mean, *rstd, *dinp;
	void *dw, *db;
	const float *inp, *dout, *cmean, *crstd;
	const void *w, *b;
	dg_dtype wt, gt;
	dg_isa isa;
	const dg_kernels *k;
	float eps;
	int64_t c;
	int64_t n;
} ln_job;

/* channels per step of the half-gradient sums: two float32 accumulators of
 * this many on the stack */
#define LN_DW_BLOCK 256

/* A row's sums run in LN_LANES interleaved partial sums, element i into
 * lane i % LN_LANES, then a fixed pairwise tree over the lanes: one
 * chain per row in element order waited on the adder's latency, and the
 * GPT's rows (C = 384) spent most of LayerNorm there. The order is fixed by
 * C alone, and every ISA's copy runs it lane for lane (no reassociation),
 * so the bits do not depend on the ISA or the thread count. */
#define LN_LANES 16 /* cuda/nn.cuh NN_LANES runs the same lanes and tree */

/* A row's LN_LANES partial sums are one vector (GCC's vector extension:
 * one zmm on AVX-512, two ymm on AVX2, four xmm on the baseline, the same
 * lane arithmetic on each); lane_sum is the fixed pairwise tree over them. */
typedef float lanes_f __attribute__((vector_size(LN_LANES * sizeof(float))));
typedef double lanes_d __attribute__((vector_size(LN_LANES * sizeof(double))));

/* (macros, not functions: a vector argument or result would change the
 * baseline ABI, and the compiler warns about it even when inlined) */
#define LOAD_LANES(v, p) memcpy(&(v), (p), sizeof(v))

#define LN_LANE_SUM(name, vt, t)                                                                                   \
	DG_NN_INLINE t name(const vt *v)                                                                           \
	{                                                                                                          \
		t a[LN_LANES];                                                                                     \
		memcpy(a, v, sizeof a);                                                                            \
		for (int w = LN_LANES / 2; w >= 1; w /= 2)                                                         \
			for (int l = 0; l < w; l++)                                                                \
				a[l] += a[l + w];                                                                  \
		return a[0];                                                                                       \
	}
LN_LANE_SUM(lane_sum_f, lanes_f, float)
LN_LANE_SUM(lane_sum_d, lanes_d, double)

/* The double lanes are two halves of 8 (lanes 0-7 and 8-15): one zmm
 * each on AVX-512. As one 16-double vector GCC kept them on the stack and
 * every step waited on a store and its reload (LayerNorm forward at ~1
 * ns/element, bench-train -mode ops on an Intel Xeon); the halves are the
 * same lanes, added in the same order, so the bits are the same. */
typedef double half_d __attribute__((vector_size(LN_LANES / 2 * sizeof(double))));
typedef float half_f __attribute__((vector_size(LN_LANES / 2 * sizeof(float))));

/* the lane sum of halves lo and hi (lane_sum_d's tree: its first level adds
 * lane l + 8 to lane l) */
DG_NN_INLINE double halves_sum(const half_d *lo, const half_d *hi)
{
	lanes_d v;
	memcpy(&v, lo, sizeof *lo);
	memcpy((char *)&v + sizeof *lo, hi, sizeof *hi);
	return lane_sum_d(&v);
}

/* mean and rstd of row r, statistics in double: C is small, and it keeps the
 * float32 result within an ulp or two of the float64 reference */
DG_NN_INLINE void ln_stats(const ln_job *j, int64_t r, float *mf, float *sf)
{
	const int64_t c = j->c, cv = c - c % LN_LANES, h = LN_LANES / 2;
	const float *x = j->inp + r * c;
	half_d m0 = {0}, m1 = {0}, v0 = {0}, v1 = {0};
	for (int64_t i0 = 0; i0 < cv; i0 += LN_LANES) {
		half_f a, b;
		LOAD_LANES(a, x + i0);
		LOAD_LANES(b, x + i0 + h);
		m0 += __builtin_convertvector(a, half_d);
		m1 += __builtin_convertvector(b, half_d);
	}
	for (int64_t i = cv; i < c; i++) {
		if (i - cv < h)
			m0[i - cv] += x[i];
		else
			m1[i - cv - h] += x[i];
	}
	const double mean = halves_sum(&m0, &m1) / (double)c;
	for (int64_t i0 = 0; i0 < cv; i0 += LN_LANES) {
		half_f a, b;
		LOAD_LANES(a, x + i0);
		LOAD_LANES(b, x + i0 + h);
		half_d d0 = __builtin_convertvector(a, half_d) - mean, d1 = __builtin_convertvector(b, half_d) - mean;
		v0 += d0 * d0;
		v1 += d1 * d1;
	}
	for (int64_t i = cv; i < c; i++) {
		double d = x[i] - mean;
		if (i - cv < h)
			v0[i - cv] += d * d;
		else
			v1[i - cv - h] += d * d;
	}
	*sf = (float)(1.0 / sqrt(halves_sum(&v0, &v1) / (double)c + (double)j->eps));
	*mf = (float)mean;
}

DG_NN_INLINE void ln_fwd_rows(const ln_job *j, int64_t lo, int64_t hi, dg_dtype wt)
{
	const int64_t c = j->c;
	for (int64_t r = lo; r < hi; r++) {
		float mf, sf;
		ln_stats(j, r, &mf, &sf);
		const float *x = j->inp + r * c;
		float *o = j->out + r * c;
		for (int64_t i = 0; i < c; i++)
			o[i] = dg_nn_ln_out(x[i], mf, sf, dg_load_f(wt, j->w, i), dg_load_f(wt, j->b, i));
		j->mean[r] = mf;
		j->rstd[r] = sf;
	}
}

DG_NN_INLINE void ln_fwd_body(void *v, int64_t lo, int64_t hi)
{
	const ln_job *j = v;
	DG_NN_BY_DTYPE(j->wt, ln_fwd_rows, j, lo, hi);
}

/* dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * w */
DG_NN_INLINE void ln_dinp_rows(const ln_job *j, int64_t lo, int64_t hi, dg_dtype wt)
{
	const int64_t c = j->c, cv = c - c % LN_LANES;
	for (int64_t r = lo; r < hi; r++) {
		const float *x = j->inp + r * c, *d = j->dout + r * c;
		const float m = j->cmean[r], s = j->crstd[r];
		lanes_f a = {0}, b = {0};
		for (int64_t i0 = 0; i0 < cv; i0 += LN_LANES) {
			lanes_f dn, norm;
			for (int l = 0; l < LN_LANES; l++) {
				norm[l] = dg_nn_ln_norm(x[i0 + l], m, s);
				dn[l] = dg_load_f(wt, j->w, i0 + l) * d[i0 + l];
			}
			a += dn;
			b += dn * norm;
		}
		for (int64_t i = cv; i < c; i++) {
			float norm = dg_nn_ln_norm(x[i], m, s);
			float dn = dg_load_f(wt, j->w, i) * d[i];
			a[i - cv] += dn;
			b[i - cv] += dn * norm;
		}
		const float ak = lane_sum_f(&a) / (float)c, bk = lane_sum_f(&b) / (float)c;
		float *dx = j->dinp + r * c;
		for (int64_t i = 0; i < c; i++) {
			float norm = dg_nn_ln_norm(x[i], m, s);
			float dn = dg_load_f(wt, j->w, i) * d[i];
			dx[i] += dg_nn_ln_dinp(dn, norm, ak, bk, s);
		}
	}
}

DG_NN_INLINE void ln_dinp_body(void *v, int64_t lo, int64_t hi)
{
	const ln_job *j = v;
	DG_NN_BY_DTYPE(j->wt, ln_dinp_rows, j, lo, hi);
}

DG_NN_INLINE void ln_dw_body(void *v, int64_t lo, int64_t hi)
{
	const ln_job *j = v;
	const int64_t c = j->c;
	float *dw = j->dw, *db = j->db;
	for (int64_t r = 0; r < j->n; r++) {
		const float *x = j->inp + r * c, *d = j->dout + r * c;
		float m = j->cmean[r], s = j->crstd[r];
		for (int64_t i = lo; i < hi; i++) {
			if (dw != NULL)
				dw[i] += dg_nn_ln_norm(x[i], m, s) * d[i];
			if (db != NULL)
				db[i] += d[i];
		}
	}
}

/* half gradients: the rows' sums, in row order, go into float32
 * accumulators first, then into the gradients with one rounding */
DG_NN_INLINE void ln_dw_half_body(void *v, int64_t lo, int64_t hi)
{
	const ln_job *j = v;
	const int64_t c = j->c;
	float aw[LN_DW_BLOCK], ab[LN_DW_BLOCK];
	for (int64_t c0 = lo; c0 < hi; c0 += LN_DW_BLOCK) {
		const int64_t w = hi - c0 < LN_DW_BLOCK ? hi - c0 : LN_DW_BLOCK;
		memset(aw, 0, sizeof aw);
		memset(ab, 0, sizeof ab);
		for (int64_t r = 0; r < j->n; r++) {
			const float *x = j->inp + r * c + c0, *d = j->dout + r * c + c0;
			float m = j->cmean[r], s = j->crstd[r];
			for (int64_t i = 0; i < w; i++) {
				aw[i] += dg_nn_ln_norm(x[i], m, s) * d[i];
				ab[i] += d[i];
			}
		}
		if (j->dw != NULL)
			dg_nn_grad_add(j->k, j->gt, j->dw, c0, aw, w);
		if (j->db != NULL)
			dg_nn_grad_add(j->k, j->gt, j->db, c0, ab, w);
	}
}

/* Each loop is compiled for the baseline and, with a target attribute, for
 * AVX2 and AVX-512; the ctx's ISA picks one. Without them the elementwise
 * passes ran 4 floats wide (cgo's -O2 targets baseline x86-64). Every
 * element is the same sequence of IEEE float operations in each, sums in
 * the same order (no reassociation, no FMA in ISO C11 mode), so the three
 * give the same bits (test_layernorm_isas). LN_LOOP stamps one pass's loop,
 * name_sfx, around name_body for a target; LN_LOOPS all four. */
#define LN_LOOP(name, sfx, target)                                                                                 \
	static target DG_VECTORISE void name##_##sfx(void *v, int64_t lo, int64_t hi)                              \
	{                                                                                                          \
		name##_body(v, lo, hi);                                                                            \
	}
#define LN_LOOPS(sfx, target)                                                                                      \
	LN_LOOP(ln_fwd, sfx, target)                                                                               \
	LN_LOOP(ln_dinp, sfx, target)                                                                              \
	LN_LOOP(ln_dw, sfx, target)                                                                                \
	LN_LOOP(ln_dw_half, sfx, target)

LN_LOOPS(scalar, )
#if DG_HAVE_X86
LN_LOOPS(avx2, DG_TARGET_AVX2)
LN_LOOPS(avx512, DG_TARGET_AVX512)
#define LN_TASK(name)                                                                                              \
	static void name##_task(void *v, int64_t lo, int64_t hi)                                                   \
	{                                                                                                          \
		const dg_isa isa = ((const ln_job *)v)->isa;                                                       \
		if (isa == DG_ISA_AVX512)                                                                          \
			name##_avx512(v, lo, hi);                                                                  \
		else if (isa == DG_ISA_AVX2)                                                                       \
			name##_avx2(v, lo, hi);                                                                    \
		else                                                                                               \
			name##_scalar(v, lo, hi);                                                                  \
	}
#else
#define LN_TASK(name)                                                                                              \
	static void name##_task(void *v, int64_t lo, int64_t hi) { name##_scalar(v, lo, hi); }
#endif
LN_TASK(ln_fwd)
LN_TASK(ln_dinp)
LN_TASK(ln_dw)
LN_TASK(ln_dw_half)

dg_status dg_nn_layernorm_forward(dg_ctx *ctx, float *out, float *mean, float *rstd, const float *inp,
				  const float *w, const float *b, float eps, int64_t n, int64_t c)
{
	return dg_nn_layernorm_forward_mixed(ctx, out, mean, rstd, inp, DG_F32, w, b, eps, n, c);
}

dg_status dg_nn_layernorm_forward_mixed(dg_ctx *ctx, float *out, float *mean, float *rstd, const float *inp,
					dg_dtype wt, const void *w, const void *b, float eps, int64_t n, int64_t c)
{
	if (ctx == NULL || out == NULL || mean == NULL || rstd == NULL || inp == NULL || w == NULL || b == NULL ||
	    n < 0 || c <= 0 || !(eps >= 0.0f))
		return DG_ERR_INVALID;
	if (!dg_is_float(wt))
		return DG_ERR_DTYPE;
	ln_job j = {.out = out, .mean = mean, .rstd = rstd, .inp = inp, .w = w, .b = b, .wt = wt, .isa = ctx->isa,
		    .eps = eps, .c = c, .n = n};
	dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * c * 3, ln_fwd_task, &j);
	return DG_OK;
}

dg_status dg_nn_layernorm_backward(dg_ctx *ctx, float *dinp, float *dw, float *db, const float *dout,
				   const float *inp, const float *w, const float *mean, const float *rstd, int64_t n,
				   int64_t c)
{
	return dg_nn_layernorm_backward_mixed(ctx, dinp, DG_F32, dw, db, dout, inp, DG_F32, w, mean, rstd, n, c);
}

dg_status dg_nn_layernorm_backward_mixed(dg_ctx *ctx, float *dinp, dg_dtype gt, void *dw, void *db,
					 const float *dout, const float *inp, dg_dtype wt, const void *w,
					 const float *mean, const float *rstd, int64_t n, int64_t c)
{
	if (ctx == NULL || dout == NULL || inp == NULL || w == NULL || mean == NULL || rstd == NULL || n < 0 ||
	    c <= 0)
		return DG_ERR_INVALID;
	if (!dg_is_float(wt) || !dg_is_float(gt))
		return DG_ERR_DTYPE;
	ln_job j = {.dinp = dinp, .dw = dw, .db = db, .inp = inp, .w = w, .wt = wt, .gt = gt, .isa = ctx->isa, .k = ctx->k,
		    .dout = dout, .cmean = mean, .crstd = rstd, .c = c, .n = n};
	if (dinp != NULL)
		dg_parallel_for(ctx, n, DG_NN_ROW_GRAIN, n * c * 4, ln_dinp_task, &j);
	if (dw != NULL || db != NULL)
		dg_parallel_for(ctx, c, DG_NN_COL_GRAIN, n * c * 3, gt == DG_F32 ? ln_dw_task : ln_dw_half_task, &j);
	return DG_OK;
}
