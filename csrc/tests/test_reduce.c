/* test_reduce.c — dg_sumsq, dg_nonfinite, dg_reduce_into, dg_reduce_bcast. */
#include <math.h>
#include <string.h>

#include "dg_internal.h"
#include "dg_math.h"
#include "test_util.h"

static size_t esize(dg_dtype t) { return t == DG_F32 ? 4 : t == DG_I64 ? 8 : t == DG_I32 ? 4 : 2; }

static void fill(dg_dtype t, void *p, int64_t n, uint64_t *seed)
{
	for (int64_t i = 0; i < n; i++)
		narrow(t, p, i, rng_float(seed) * 4.0f);
}

static void test_sumsq(void)
{
	dg_isa isas[3];
	int nisa = test_isas(isas);
	dg_dtype ts[3] = {DG_F32, DG_F16, DG_BF16};
	/* a list mixing every test size plus one tensor spanning many blocks */
	enum { NT = N_TEST_SIZES + 2 };
	int64_t ns[NT];
	void *xs[NT];
	uint64_t seed = 7;
	for (int d = 0; d < 3; d++) {
		dg_dtype t = ts[d];
		for (int i = 0; i < NT; i++) {
			ns[i] = i < N_TEST_SIZES ? test_sizes[i] : i == N_TEST_SIZES ? 5 * 65536 + 3 : 65536;
			xs[i] = malloc((size_t)ns[i] * esize(t) + 1);
			fill(t, xs[i], ns[i], &seed);
		}
		long double ref_total = 0;
		double ref_per[NT];
		for (int i = 0; i < NT; i++) {
			long double s = 0;
			for (int64_t k = 0; k < ns[i]; k++) {
				long double v = widen(t, xs[i], k);
				s += v * v;
			}
			ref_per[i] = (double)s;
			ref_total += s;
		}
		for (int k = 0; k < nisa; k++) {
			double first_total = 0, first_per[NT];
			static const int threads[] = {1, 2, 3, 7};
			for (int th = 0; th < 4; th++) {
				dg_ctx *ctx;
				CHECK_OK(dg_ctx_create(threads[th], &ctx));
				CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
				double per[NT], total = -1;
				CHECK_OK(dg_sumsq(ctx, t, (const void *const *)xs, ns, NT, per, &total));
				CHECK(fabs(total - (double)ref_total) <= 1e-12 * (double)ref_total);
				for (int i = 0; i < NT; i++)
					CHECK(fabs(per[i] - ref_per[i]) <= 1e-12 * ref_per[i]);
				if (th == 0) {
					first_total = total;
					memcpy(first_per, per, sizeof per);
				} else {
					/* bit-identical across thread counts */
					CHECK(memcmp(&total, &first_total, sizeof total) == 0);
					CHECK(memcmp(per, first_per, sizeof per) == 0);
				}
				double t2 = -1;
				CHECK_OK(dg_sumsq(ctx, t, (const void *const *)xs, ns, NT, NULL, &t2));
				CHECK(memcmp(&t2, &first_total, sizeof t2) == 0);
				dg_ctx_destroy(ctx);
			}
		}
		for (int i = 0; i < NT; i++)
			free(xs[i]);
	}

	dg_ctx *ctx;
	CHECK_OK(dg_ctx_create(2, &ctx));
	/* more blocks than the inline stack window (256) and many tiny tensors */
	enum { MANY = 3000 };
	static float small[MANY][3];
	const void *sp[MANY];
	int64_t sn[MANY];
	double want = 0;
	for (int i = 0; i < MANY; i++) {
		for (int k = 0; k < 3; k++) {
			small[i][k] = (float)(i % 17) * 0.25f;
			want += (double)small[i][k] * small[i][k];
		}
		sp[i] = small[i];
		sn[i] = i % 4 == 0 ? 0 : 3;
		if (sn[i] == 0)
			want -= 3 * (double)small[i][0] * small[i][0];
	}
	double total;
	static double per[MANY];
	CHECK_OK(dg_sumsq(ctx, DG_F32, sp, sn, MANY, per, &total));
	CHECK(fabs(total - want) < 1e-9);
	CHECK(per[0] == 0 && per[4] == 0);
	CHECK(per[1] == 3 * 0.0625);
	CHECK_OK(dg_sumsq(ctx, DG_F32, NULL, NULL, 0, NULL, &total));
	CHECK(total == 0);
	int64_t neg = -1, one = 1;
	CHECK(dg_sumsq(NULL, DG_F32, sp, sn, 1, NULL, &total) == DG_ERR_INVALID);
	CHECK(dg_sumsq(ctx, DG_F32, sp, sn, 1, NULL, NULL) == DG_ERR_INVALID);
	CHECK(dg_sumsq(ctx, DG_I32, sp, sn, 1, NULL, &total) == DG_ERR_DTYPE);
	CHECK(dg_sumsq(ctx, DG_F32, sp, &neg, 1, NULL, &total) == DG_ERR_INVALID);
	const void *np[1] = {NULL};
	CHECK(dg_sumsq(ctx, DG_F32, np, &one, 1, NULL, &total) == DG_ERR_INVALID);
	dg_ctx_destroy(ctx);
}

/* halves over their whole range (subnormals, zeros, extremes, both signs)
 * against a long double reference, and Inf/NaN propagating, on every ISA */
static void test_sumsq_halves(void)
{
	dg_isa isas[3];
	int nisa = test_isas(isas);
	dg_dtype ts[2] = {DG_F16, DG_BF16};
	enum { N = 3 * 65536 + 37 };
	uint16_t *x = malloc((size_t)N * 2);
	dg_ctx *ctx;
	CHECK_OK(dg_ctx_create(2, &ctx));
	for (int d = 0; d < 2; d++) {
		dg_dtype t = ts[d];
		uint16_t inf = t == DG_F16 ? 0x7c00 : 0x7f80;
		uint64_t seed = 99;
		for (int64_t i = 0; i < N; i++) {
			uint16_t h = (uint16_t)rng_next(&seed);
			if ((h & 0x7fff) >= inf) /* keep it finite */
				h &= 0x83ff;
			if (i % 7 == 0)
				h &= 0x803f; /* subnormal or zero */
			x[i] = h;
		}
		long double ref = 0;
		for (int64_t i = 0; i < N; i++) {
			long double v = widen(t, x, i);
			ref += v * v;
		}
		const void *xs[1] = {x};
		int64_t ns[1] = {N};
		for (int k = 0; k < nisa; k++) {
			CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
			double total = -1;
			CHECK_OK(dg_sumsq(ctx, t, xs, ns, 1, NULL, &total));
			CHECK(fabsl((long double)total - ref) <= 1e-12L * ref);
			uint16_t keep = x[N / 2];
			x[N / 2] = (uint16_t)(inf | 0x8000);
			CHECK_OK(dg_sumsq(ctx, t, xs, ns, 1, NULL, &total));
			CHECK(isinf(total) && total > 0);
			x[N / 2] = (uint16_t)(inf | 1); /* NaN */
			CHECK_OK(dg_sumsq(ctx, t, xs, ns, 1, NULL, &total));
			CHECK(isnan(total));
			x[N / 2] = keep;
			/* a short tail holding the Inf */
			int64_t n5[1] = {5};
			uint16_t sh[5] = {0x3c00, 0, 0x8001, 0x3c00, inf};
			const void *s5[1] = {sh};
			CHECK_OK(dg_sumsq(ctx, t, s5, n5, 1, NULL, &total));
			CHECK(isinf(total));
		}
	}
	dg_ctx_destroy(ctx);
	free(x);
}

static void test_nonfinite(void)
{
	dg_isa isas[3];
	int nisa = test_isas(isas);
	dg_dtype ts[3] = {DG_F32, DG_F16, DG_BF16};
	static const int64_t odd[] = {1, 15, 17, 63, 65, 1023, 100003};
	dg_ctx *ctx;
	CHECK_OK(dg_ctx_create(3, &ctx));
	for (int k = 0; k < nisa; k++) {
		CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
		for (int d = 0; d < 3; d++) {
			dg_dtype t = ts[d];
			for (size_t z = 0; z < sizeof odd / sizeof odd[0]; z++) {
				int64_t n = odd[z];
				void *x = malloc((size_t)n * esize(t));
				/* largest finite values must not count */
				for (int64_t i = 0; i < n; i++)
					narrow(t, x, i, (i & 1) ? -65504.0f : 65504.0f);
				if (t == DG_F32)
					for (int64_t i = 0; i < n; i++)
						((float *)x)[i] = (i & 1) ? -3.4028235e38f : 3.4028235e38f;
				if (t == DG_BF16)
					for (int64_t i = 0; i < n; i++)
						((uint16_t *)x)[i] = (i & 1) ? 0xff7f : 0x7f7f;
				const void *xs[2] = {x, x};
				int64_t ns[2] = {n, n};
				int found = -1;
				CHECK_OK(dg_nonfinite(ctx, t, xs, ns, 2, &found));
				CHECK(found == 0);
				int64_t where[3] = {0, n / 2, n - 1};
				float bad[3] = {INFINITY, -INFINITY, NAN};
				for (int w = 0; w < 3; w++)
					for (int b = 0; b < 3; b++) {
						void *y = malloc((size_t)n * esize(t));
						memcpy(y, x, (size_t)n * esize(t));
						narrow(t, y, where[w], bad[b]);
						const void *ys[3] = {x, y, x};
						int64_t yn[3] = {n, n, n};
						found = -1;
						CHECK_OK(dg_nonfinite(ctx, t, ys, yn, 3, &found));
						CHECK(found == 1);
						found = -1;
						CHECK_OK(dg_nonfinite(ctx, t, &ys[1], &yn[1], 1, &found));
						CHECK(found == 1);
						free(y);
					}
				free(x);
			}
		}
	}
	int found;
	CHECK_OK(dg_nonfinite(ctx, DG_F32, NULL, NULL, 0, &found));
	CHECK(found == 0);
	CHECK(dg_nonfinite(ctx, DG_F32, NULL, NULL, 0, NULL) == DG_ERR_INVALID);
	CHECK(dg_nonfinite(ctx, DG_U8, NULL, NULL, 0, &found) == DG_ERR_DTYPE);
	CHECK(dg_nonfinite(NULL, DG_F32, NULL, NULL, 0, &found) == DG_ERR_INVALID);
	dg_ctx_destroy(ctx);
}

/* the documented rule: the first NaN in list order wins, quieted */
static float ref_red(dg_redop op, float acc, float v)
{
	if (isnan(acc))
		return bits_f32(f32_bits(acc) | 0x400000u);
	if (isnan(v))
		return bits_f32(f32_bits(v) | 0x400000u);
	if (op == DG_SUM)
		return acc + v;
	if (op == DG_MAX)
		return v > acc ? v : acc;
	return v < acc ? v : acc;
}

static void test_reduce_into(void)
{
	dg_isa isas[3];
	int nisa = test_isas(isas);
	dg_dtype ts[5] = {DG_F32, DG_F16, DG_BF16, DG_I32, DG_I64};
	dg_redop ops[3] = {DG_SUM, DG_MAX, DG_MIN};
	uint64_t seed = 11;
	dg_ctx *ctx;
	CHECK_OK(dg_ctx_create(3, &ctx));
	enum { NS = 4 };
	for (int k = 0; k < nisa; k++) {
		CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
		for (int d = 0; d < 5; d++)
			for (int o = 0; o < 3; o++)
				for (int z = 0; z < N_TEST_SIZES; z++) {
					dg_dtype t = ts[d];
					dg_redop op = ops[o];
					int64_t n = test_sizes[z];
					size_t bytes = (size_t)n * esize(t) + 8;
					void *src[NS], *want = malloc(bytes), *got = malloc(bytes);
					for (int s = 0; s < NS; s++) {
						src[s] = malloc(bytes);
						if (t == DG_I32)
							for (int64_t i = 0; i < n; i++)
								((int32_t *)src[s])[i] = (int32_t)rng_next(&seed);
						else if (t == DG_I64)
							for (int64_t i = 0; i < n; i++)
								((int64_t *)src[s])[i] = (int64_t)rng_next(&seed);
						else
							fill(t, src[s], n, &seed);
					}
					/* sprinkle NaNs, and signed zeros, into the floats */
					if (t != DG_I32 && t != DG_I64 && n > 0) {
						narrow(t, src[1], n / 3, NAN);
						narrow(t, src[2], n / 3, -NAN);
						narrow(t, src[3], n - 1, NAN);
						if (t == DG_F32)
							((uint32_t *)src[0])[n - 1] = 0xff800001u; /* signaling */
						narrow(t, src[0], n / 2, -0.0f);
						narrow(t, src[1], n / 2, 0.0f);
					}
					for (int64_t i = 0; i < n; i++) {
						if (t == DG_I32) {
							int32_t a = ((int32_t *)src[0])[i];
							for (int s = 1; s < NS; s++) {
								int32_t v = ((int32_t *)src[s])[i];
								a = op == DG_SUM ? (int32_t)((uint32_t)a + (uint32_t)v)
								    : op == DG_MAX ? (v > a ? v : a) : (v < a ? v : a);
							}
							((int32_t *)want)[i] = a;
						} else if (t == DG_I64) {
							int64_t a = ((int64_t *)src[0])[i];
							for (int s = 1; s < NS; s++) {
								int64_t v = ((int64_t *)src[s])[i];
								a = op == DG_SUM ? (int64_t)((uint64_t)a + (uint64_t)v)
								    : op == DG_MAX ? (v > a ? v : a) : (v < a ? v : a);
							}
							((int64_t *)want)[i] = a;
						} else {
							float a = widen(t, src[0], i);
							for (int s = 1; s < NS; s++)
								a = ref_red(op, a, widen(t, src[s], i));
							narrow(t, want, i, a);
						}
					}
					CHECK_OK(dg_reduce_into(ctx, t, op, (const void *const *)src, NS, got, n));
					CHECK(memcmp(got, want, (size_t)n * esize(t)) == 0);
					/* dst aliasing a middle source */
					CHECK_OK(dg_reduce_into(ctx, t, op, (const void *const *)src, NS, src[2], n));
					CHECK(memcmp(src[2], want, (size_t)n * esize(t)) == 0);
					for (int s = 0; s < NS; s++)
						free(src[s]);
					free(want);
					free(got);
				}
	}
	float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1};
	const void *srcs[2] = {a, b}, *nsrcs[2] = {a, NULL};
	CHECK_OK(dg_reduce_into(ctx, DG_F32, DG_SUM, srcs, 1, b, 4)); /* one source is a copy */
	CHECK(b[3] == 4);
	CHECK(dg_reduce_into(NULL, DG_F32, DG_SUM, srcs, 2, a, 4) == DG_ERR_INVALID);
	CHECK(dg_reduce_into(ctx, DG_U8, DG_SUM, srcs, 2, a, 4) == DG_ERR_DTYPE);
	CHECK(dg_reduce_into(ctx, DG_F32, (dg_redop)9, srcs, 2, a, 4) == DG_ERR_INVALID);
	CHECK(dg_reduce_into(ctx, DG_F32, DG_SUM, srcs, 0, a, 4) == DG_ERR_INVALID);
	CHECK(dg_reduce_into(ctx, DG_F32, DG_SUM, srcs, -1, a, 4) == DG_ERR_INVALID);
	CHECK(dg_reduce_into(ctx, DG_F32, DG_SUM, srcs, 2, a, -4) == DG_ERR_INVALID);
	CHECK(dg_reduce_into(ctx, DG_F32, DG_SUM, srcs, 2, NULL, 4) == DG_ERR_INVALID);
	CHECK(dg_reduce_into(ctx, DG_F32, DG_SUM, nsrcs, 2, a, 4) == DG_ERR_INVALID);
	CHECK(dg_reduce_into(ctx, DG_F32, DG_SUM, NULL, 2, a, 4) == DG_ERR_INVALID);
	CHECK(dg_reduce_into(ctx, DG_F32, DG_SUM, NULL, 0, NULL, 0) == DG_OK);
	dg_ctx_destroy(ctx);
}

/* dg_reduce_bcast against dg_reduce_into (+ dg_scale): separate dsts, dsts
 * that are the srcs themselves (the all-reduce pattern), a scale; every ISA,
 * dtype and op, NaNs sprinkled in. */
static void test_reduce_bcast(void)
{
	dg_isa isas[3];
	int nisa = test_isas(isas);
	dg_dtype ts[5] = {DG_F32, DG_F16, DG_BF16, DG_I32, DG_I64};
	dg_redop ops[3] = {DG_SUM, DG_MAX, DG_MIN};
	static const int64_t sizes[] = {0, 1, 7, 16, 17, 65, 1000003};
	uint64_t seed = 23;
	dg_ctx *ctx;
	CHECK_OK(dg_ctx_create(3, &ctx));
	enum { NS = 4 };
	for (int k = 0; k < nisa; k++) {
		CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
		for (int d = 0; d < 5; d++)
			for (int o = 0; o < 3; o++)
				for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
					for (int nsrc = 1; nsrc <= NS; nsrc += 2) {
						dg_dtype t = ts[d];
						int isint = t == DG_I32 || t == DG_I64;
						dg_redop op = ops[o];
						int64_t n = sizes[z];
						size_t bytes = (size_t)n * esize(t) + 8;
						void *src[NS], *want = malloc(bytes), *got[3];
						for (int s = 0; s < NS; s++) {
							src[s] = malloc(bytes);
							if (isint)
								for (size_t i = 0; i < bytes; i++)
									((unsigned char *)src[s])[i] = (unsigned char)rng_next(&seed);
							else
								fill(t, src[s], n, &seed);
						}
						if (!isint && n > 0) {
							narrow(t, src[0], n / 3, NAN);
							narrow(t, src[nsrc - 1], n / 3, -NAN);
							narrow(t, src[nsrc - 1], n - 1, NAN);
							if (t == DG_F32)
								((uint32_t *)src[0])[n / 2] = 0xff800001u; /* signaling */
						}
						for (int g = 0; g < 3; g++)
							got[g] = malloc(bytes);
						CHECK_OK(dg_reduce_into(ctx, t, op, (const void *const *)src, nsrc, want, n));
						/* three separate destinations */
						CHECK_OK(dg_reduce_bcast(ctx, t, op, (const void *const *)src, nsrc, got, 3, n, 1.0f));
						for (int g = 0; g < 3; g++)
							CHECK(memcmp(got[g], want, (size_t)n * esize(t)) == 0);
						/* scaled, as an average: reduce_into then dg_scale */
						if (!isint) {
							float sc = 1.0f / (float)nsrc;
							if (nsrc == 1)
								sc = 0.3f;
							int64_t nn = n;
							void *w[1] = {want};
							CHECK_OK(dg_scale(ctx, t, w, &nn, 1, sc));
							CHECK_OK(dg_reduce_bcast(ctx, t, op, (const void *const *)src, nsrc, got, 2, n,
										 sc));
							for (int g = 0; g < 2; g++)
								CHECK(memcmp(got[g], want, (size_t)n * esize(t)) == 0);
							CHECK_OK(dg_reduce_into(ctx, t, op, (const void *const *)src, nsrc, want, n));
						}
						/* in place: the sources are the destinations, plus one extra */
						void *dsts[NS + 1];
						for (int s = 0; s < nsrc; s++)
							dsts[s] = src[s];
						dsts[nsrc] = got[0];
						CHECK_OK(dg_reduce_bcast(ctx, t, op, (const void *const *)src, nsrc, dsts, nsrc + 1, n,
									 1.0f));
						for (int s = 0; s <= nsrc; s++)
							CHECK(memcmp(dsts[s], want, (size_t)n * esize(t)) == 0);
						for (int s = 0; s < NS; s++)
							free(src[s]);
						for (int g = 0; g < 3; g++)
							free(got[g]);
						free(want);
					}
	}
	/* split across pool threads, reversed dst order, 5 sources */
	{
		int64_t n = 3 * 65536 + 11;
		float *x[5], *y[5];
		for (int s = 0; s < 5; s++) {
			x[s] = malloc((size_t)n * 4);
			y[s] = malloc((size_t)n * 4);
			fill(DG_F32, x[s], n, &seed);
		}
		float *want = malloc((size_t)n * 4);
		CHECK_OK(dg_reduce_into(ctx, DG_F32, DG_SUM, (const void *const *)x, 5, want, n));
		void *dsts[5] = {x[4], x[3], x[2], x[1], x[0]};
		CHECK_OK(dg_reduce_bcast(ctx, DG_F32, DG_SUM, (const void *const *)x, 5, dsts, 5, n, 1.0f));
		for (int s = 0; s < 5; s++)
			CHECK(memcmp(x[s], want, (size_t)n * 4) == 0);
		for (int s = 0; s < 5; s++) {
			free(x[s]);
			free(y[s]);
		}
		free(want);
	}
	float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1};
	const void *srcs[2] = {a, b}, *nsrcs[2] = {a, NULL};
	void *dsts[2] = {a, b}, *ndsts[2] = {a, NULL};
	int32_t ia[4] = {1, 2, 3, 4};
	const void *isrcs[1] = {ia};
	void *idsts[1] = {ia};
	CHECK(dg_reduce_bcast(NULL, DG_F32, DG_SUM, srcs, 2, dsts, 2, 4, 1) == DG_ERR_INVALID);
	CHECK(dg_reduce_bcast(ctx, DG_U8, DG_SUM, srcs, 2, dsts, 2, 4, 1) == DG_ERR_DTYPE);
	CHECK(dg_reduce_bcast(ctx, DG_I32, DG_SUM, isrcs, 1, idsts, 1, 4, 0.5f) == DG_ERR_DTYPE);
	CHECK(dg_reduce_bcast(ctx, DG_F32, (dg_redop)9, srcs, 2, dsts, 2, 4, 1) == DG_ERR_INVALID);
	CHECK(dg_reduce_bcast(ctx, DG_F32, DG_SUM, srcs, 0, dsts, 2, 4, 1) == DG_ERR_INVALID);
	CHECK(dg_reduce_bcast(ctx, DG_F32, DG_SUM, srcs, 2, dsts, 0, 4, 1) == DG_ERR_INVALID);
	CHECK(dg_reduce_bcast(ctx, DG_F32, DG_SUM, srcs, 2, dsts, -1, 4, 1) == DG_ERR_INVALID);
	CHECK(dg_reduce_bcast(ctx, DG_F32, DG_SUM, srcs, 2, dsts, 2, -4, 1) == DG_ERR_INVALID);
	CHECK(dg_reduce_bcast(ctx, DG_F32, DG_SUM, nsrcs, 2, dsts, 2, 4, 1) == DG_ERR_INVALID);
	CHECK(dg_reduce_bcast(ctx, DG_F32, DG_SUM, srcs, 2, ndsts, 2, 4, 1) == DG_ERR_INVALID);
	CHECK(dg_reduce_bcast(ctx, DG_F32, DG_SUM, NULL, 0, NULL, 0, 0, 1) == DG_OK);
	CHECK_OK(dg_reduce_bcast(ctx, DG_F32, DG_SUM, srcs, 2, dsts, 2, 4, 1));
	CHECK(a[0] == 2 && b[0] == 2 && a[3] == 5 && b[3] == 5);
	dg_ctx_destroy(ctx);
}

/* (a0+a1)+(a2+a3) lane by lane, then the lane tree of _mm512_reduce_add_pd
 * (upper 256 bits onto lower, 128, 64): how the AVX-512 sums of squares
 * finish */
static double avx512_sumsq_finish(double a[4][8])
{
	double s[8], t4[4];
	for (int l = 0; l < 8; l++)
		s[l] = (a[0][l] + a[1][l]) + (a[2][l] + a[3][l]);
	for (int l = 0; l < 4; l++)
		t4[l] = s[l] + s[l + 4];
	return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

/* The AVX-512 sum of squares of halves in its documented order, element
 * by element with FMA (exact squares: the f16 kernel's scaled ones round
 * alike), each 32 of them (a short tail zero-padded) into four accumulators
 * of 8 lanes: for bfloat16 the even ones 0..14 into accumulator 0, even
 * 16..30 into 1, odd 1..15 into 2, odd 17..31 into 3; for float16 the half
 * at position q (0..3) of each 64-bit lane into accumulator q. */
static double avx512_sumsq_ref(dg_dtype t, const uint16_t *x, int64_t n)
{
	double a[4][8] = {{0}};
	for (int64_t i = 0; i < n; i += 32)
		for (int e = 0; e < 32; e++) {
			double y = i + e < n ? (double)widen(t, x, i + e) : 0;
			int acc = t == DG_BF16 ? (e & 1) * 2 + (e / 2 >= 8) : e % 4;
			int lane = t == DG_BF16 ? (e / 2) & 7 : e / 4;
			a[acc][lane] = fma(y, y, a[acc][lane]);
		}
	return avx512_sumsq_finish(a);
}

/* Pins the AVX-512 kernel's bits for t to its documented order (the
 * tolerance of test_sumsq would pass a reordered sum): every length below
 * 1100 (past the bf16 loop's 16-vector ring) at 2-byte offsets, and longer
 * ones crossing the f16 loop's 2048-half chunks up to whole blocks, some
 * starting mid-buffer, on data the caller chose so that the order changes
 * roundings. */
static void check_sumsq_order(dg_dtype t, const uint16_t *buf, int64_t size)
{
#if DG_HAVE_X86
	const int64_t lens[] = {65536, 65535, 40001, 4097, 2048, 8192 + 64, 12288 + 33};
	const int64_t small = 1100, nl = (int64_t)(sizeof lens / sizeof lens[0]);
	for (int64_t k = 0; k < small + nl; k++) {
		int64_t len = k < small ? k : lens[k - small];
		const uint16_t *x = buf + k % 3 + (k >= small && k % 2 ? 4096 - 7 : 0);
		CHECK(x + len <= buf + size);
		double want = avx512_sumsq_ref(t, x, len), got = dg_kernels_avx512.sumsq_block(t, x, len);
		if (memcmp(&want, &got, sizeof want) != 0) {
			fprintf(stderr, "sumsq order, dtype %d, n=%lld: got %a want %a\n", (int)t, (long long)len, got, want);
			CHECK(0);
			return;
		}
	}
#else
	(void)t, (void)buf, (void)size;
#endif
}

static void test_sumsq_order(void)
{
#if DG_HAVE_X86
	if (dg_cpu_best_isa() < DG_ISA_AVX512)
		return;
#endif
	enum { N = 65536 + 4096 };
	uint16_t *buf = malloc((size_t)N * 2);
	CHECK(buf != NULL);
	uint64_t seed = 5;
	/* bfloat16: normals over 64 binades (squares within 2^37 of each other
	 * add exactly, in any order), zeros, subnormals, one Inf */
	for (int64_t i = 0; i < N; i++) {
		uint64_t r = rng_next(&seed) % 100;
		uint16_t sign = (uint16_t)((rng_next(&seed) & 1) << 15);
		if (r < 10)
			buf[i] = sign;
		else if (r < 15)
			buf[i] = sign | (uint16_t)(1 + rng_next(&seed) % 0x7f);
		else
			buf[i] = sign | (uint16_t)((100 + rng_next(&seed) % 64) << 7) | (uint16_t)(rng_next(&seed) & 0x7f);
	}
	buf[40000] = 0x7f80;
	check_sumsq_order(DG_BF16, buf, N);
	/* float16: finite over its whole range (squares span 2^80), zeros and
	 * subnormals in every third 4096 only, so that both of the kernel's
	 * paths and the switches between them run */
	for (int64_t i = 0; i < N; i++) {
		uint16_t sign = (uint16_t)((rng_next(&seed) & 1) << 15);
		if ((i / 4096) % 3 == 1 && rng_next(&seed) % 1000 < 20)
			buf[i] = sign | (uint16_t)(rng_next(&seed) % 0x400);
		else
			buf[i] = sign | (uint16_t)((1 + rng_next(&seed) % 30) << 10) | (uint16_t)(rng_next(&seed) & 0x3ff);
	}
	check_sumsq_order(DG_F16, buf, N);
	free(buf);
}

int main(void)
{
	test_sumsq();
	test_sumsq_order();
	test_sumsq_halves();
	test_nonfinite();
	test_reduce_into();
	test_reduce_bcast();
	return test_done("test_reduce");
}
