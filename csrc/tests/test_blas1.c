/* test_blas1.c — dg_scale, dg_axpy and dg_axpy_mixed against dg_math.h on
 * every ISA. */
#include <math.h>

#include "dg_math.h"
#include "test_util.h"

static size_t esize(dg_dtype t) { return t == DG_F32 ? 4 : 2; }

/* dg_axpy_mixed for every pair of distinct floating dtypes: the bits of
 * narrow(dg_axpy_f32(alpha, widen(x), widen(y))) on every ISA */
static void test_axpy_mixed(dg_ctx *ctx, const dg_isa *isas, int nisa)
{
	const dg_dtype ts[3] = {DG_F32, DG_F16, DG_BF16};
	const float alphas[] = {1.0f, -3.0f, 1e-30f, INFINITY};
	const int64_t nmax = 1000003;
	uint64_t seed = 5;
	char *x[3], *y0[3];
	char *want = malloc((size_t)nmax * 4), *got = malloc((size_t)nmax * 4 + 16);
	for (int d = 0; d < 3; d++) {
		x[d] = malloc((size_t)nmax * esize(ts[d]));
		y0[d] = malloc((size_t)nmax * esize(ts[d]));
	}
	for (int64_t i = 0; i < nmax; i++) {
		float xv = rng_float(&seed) * ((i % 7 == 0) ? 1e-36f : 100.0f), yv = rng_float(&seed);
		for (int d = 0; d < 3; d++) {
			narrow(ts[d], x[d], i, xv);
			narrow(ts[d], y0[d], i, yv);
		}
	}
	for (int k = 0; k < nisa; k++) {
		CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
		for (int dx = 0; dx < 3; dx++)
			for (int dy = 0; dy < 3; dy++) {
				if (dx == dy)
					continue;
				dg_dtype xt = ts[dx], yt = ts[dy];
				for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++)
					for (int z = 0; z < N_TEST_SIZES; z++) {
						int64_t n = test_sizes[z], h = n / 3;
						size_t bytes = (size_t)n * esize(yt);
						for (int64_t i = 0; i < n; i++)
							narrow(yt, want, i,
							       dg_axpy_f32(alphas[a], widen(xt, x[dx], i), widen(yt, y0[dy], i)));
						memcpy(got, y0[dy], bytes);
						memset(got + bytes, 0x5a, 16);
						void *gs[2] = {got, got + (size_t)h * esize(yt)};
						const void *xs[2] = {x[dx], x[dx] + (size_t)h * esize(xt)};
						int64_t ns[2] = {h, n - h};
						CHECK_OK(dg_axpy_mixed(ctx, xt, yt, alphas[a], xs, gs, ns, 2));
						CHECK(memcmp(got, want, bytes) == 0);
						CHECK((unsigned char)got[bytes + 15] == 0x5a);
					}
			}
	}
	CHECK_OK(dg_ctx_set_isa(ctx, DG_ISA_AUTO));
	float v[2] = {1, 2};
	void *vs[1] = {v};
	const void *cvs[1] = {v};
	int64_t two = 2;
	CHECK(dg_axpy_mixed(ctx, DG_F32, DG_I32, 1, cvs, vs, &two, 1) == DG_ERR_DTYPE);
	CHECK(dg_axpy_mixed(ctx, DG_F64, DG_F32, 1, cvs, vs, &two, 1) == DG_ERR_DTYPE);
	CHECK(dg_axpy_mixed(NULL, DG_F32, DG_BF16, 1, cvs, vs, &two, 1) == DG_ERR_INVALID);
	for (int d = 0; d < 3; d++) {
		free(x[d]);
		free(y0[d]);
	}
	free(want);
	free(got);
}

int main(void)
{
	dg_isa isas[3];
	int nisa = test_isas(isas);
	dg_dtype ts[3] = {DG_F32, DG_F16, DG_BF16};
	/* alphas that make products overflow, underflow into subnormals, or NaN */
	float alphas[] = {0.5f, -3.0f, 1e-30f, 7e4f, INFINITY, 0.0f};
	uint64_t seed = 3;
	dg_ctx *ctx;
	CHECK_OK(dg_ctx_create(3, &ctx));
	for (int d = 0; d < 3; d++) {
		dg_dtype t = ts[d];
		size_t maxb = (size_t)1000003 * 4 + 64;
		char *x = malloc(maxb), *y0 = malloc(maxb), *want = malloc(maxb), *got = malloc(maxb);
		for (int64_t i = 0; i < 1000003; i++) {
			/* mostly random patterns, some in the subnormal range */
			float v = rng_float(&seed) * ((i % 7 == 0) ? 1e-36f : 100.0f);
			narrow(t, x, i, v);
			narrow(t, y0, i, rng_float(&seed));
		}
		for (int k = 0; k < nisa; k++) {
			CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
			for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++)
				for (int z = 0; z < N_TEST_SIZES; z++) {
					int64_t n = test_sizes[z];
					float al = alphas[a];
					size_t bytes = (size_t)n * esize(t);
					for (int64_t i = 0; i < n; i++)
						narrow(t, want, i, widen(t, x, i) * al);
					memcpy(got, x, bytes);
					memset(got + bytes, 0x5a, 16);
					/* as two list entries so a split lands mid-list */
					int64_t h = n / 3;
					void *gs[2] = {got, got + (size_t)h * esize(t)};
					int64_t ns[2] = {h, n - h};
					CHECK_OK(dg_scale(ctx, t, gs, ns, 2, al));
					CHECK(memcmp(got, want, bytes) == 0);
					CHECK((unsigned char)got[bytes + 15] == 0x5a);

					for (int64_t i = 0; i < n; i++)
						narrow(t, want, i, dg_axpy_f32(al, widen(t, x, i), widen(t, y0, i)));
					memcpy(got, y0, bytes);
					const void *xs[2] = {x, x + (size_t)h * esize(t)};
					CHECK_OK(dg_axpy(ctx, t, al, xs, gs, ns, 2));
					CHECK(memcmp(got, want, bytes) == 0);
				}
		}
		free(x);
		free(y0);
		free(want);
		free(got);
	}
	float v[2] = {1, 2};
	void *vs[1] = {v}, *nvs[1] = {NULL};
	const void *cvs[1] = {v};
	int64_t two = 2, neg = -2;
	CHECK(dg_scale(NULL, DG_F32, vs, &two, 1, 2) == DG_ERR_INVALID);
	CHECK(dg_scale(ctx, DG_I64, vs, &two, 1, 2) == DG_ERR_DTYPE);
	CHECK(dg_scale(ctx, DG_F32, vs, &neg, 1, 2) == DG_ERR_INVALID);
	CHECK(dg_scale(ctx, DG_F32, nvs, &two, 1, 2) == DG_ERR_INVALID);
	CHECK(dg_scale(ctx, DG_F32, vs, NULL, 1, 2) == DG_ERR_INVALID);
	CHECK(dg_axpy(ctx, DG_F32, 1, NULL, vs, &two, 1) == DG_ERR_INVALID);
	CHECK(dg_axpy(ctx, DG_F32, 1, cvs, nvs, &two, 1) == DG_ERR_INVALID);
	CHECK(dg_axpy(ctx, DG_BOOL, 1, cvs, vs, &two, 1) == DG_ERR_DTYPE);
	CHECK(dg_axpy(NULL, DG_F32, 1, cvs, vs, &two, 1) == DG_ERR_INVALID);
	CHECK_OK(dg_axpy(ctx, DG_F32, 1, cvs, vs, &two, 1));
	CHECK(v[0] == 2 && v[1] == 4);
	test_axpy_mixed(ctx, isas, nisa);
	dg_ctx_destroy(ctx);
	return test_done("test_blas1");
}
