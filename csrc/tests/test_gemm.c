/* test_gemm.c — nn_gemm.c's product bit for bit against what it promises:
 * each element its initial value plus each k-block's float32 FMA chain
 * (fmaf, in k order from 0), on shapes with every kind of tail (rows past a 12-row tile, columns
 * past a 32-wide panel and a 384-column block, sums past a k-block), both
 * layouts of A and of B, the three initial values and row strides wider than the
 * rows; a product split by columns (as threads split it) gives the same
 * bits. The Linear layer through it, against double references, is
 * test_nn.c's. Runs where the CPU has AVX-512, whatever
 * dg_blas_linear_own chose. */
#include <math.h>

#include "nn_internal.h"
#include "test_util.h"

#if DG_HAVE_X86

/* ref: what dg_nn_gemm promises, written out: each element's initial
 * value, plus each k-block's fmaf chain from 0 in k order, added */
static void ref(float *c, int64_t ldc, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, int trans_a,
		const float *b, int64_t ldb, int trans_b, dg_gemm_init init, const float *bias)
{
	const int64_t kb = k > 0 ? dg_nn_gemm_kblock(k) : 1;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			float v = init == DG_GEMM_ADD ? c[i * ldc + j] : init == DG_GEMM_BIAS ? bias[j] : 0.0f;
			for (int64_t k0 = 0; k0 < k; k0 += kb) {
				float acc = 0.0f;
				for (int64_t q = k0; q < k0 + kb && q < k; q++)
					acc = fmaf(trans_a ? a[q * lda + i] : a[i * lda + q],
						   trans_b ? b[j * ldb + q] : b[q * ldb + j], acc);
				v = init == DG_GEMM_ZERO && k0 == 0 ? acc : v + acc;
			}
			c[i * ldc + j] = v;
		}
}

static float *randv(uint64_t *s, int64_t n)
{
	float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
	for (int64_t i = 0; i < n; i++)
		p[i] = rng_float(s);
	return p;
}

static void run(float *c, int64_t ldc, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, int trans_a,
		const float *b, int64_t ldb, int trans_b, dg_gemm_init init, const float *bias)
{
	size_t bytes = dg_nn_gemm_scratch(n, k);
	float *scratch = malloc(bytes > 0 ? bytes : 1);
	dg_nn_gemm(c, ldc, m, n, k, a, lda, trans_a, b, ldb, trans_b, init, bias, scratch);
	free(scratch);
}

static void test_chains(uint64_t *s)
{
	/* m, n, k: single elements, tails of every block, a sum of three
	 * k-blocks with a short last one, the GPT's shapes cut down */
	static const int64_t shapes[][3] = {{1, 1, 1},	   {5, 7, 3},	   {12, 32, 16},  {13, 33, 17},
					    {25, 70, 530}, {37, 400, 129}, {24, 416, 1100}, {11, 31, 0},
					    {40, 64, 384}, {3, 800, 40}};
	for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
		for (int layout = 0; layout < 4; layout++)
			for (int init = DG_GEMM_ZERO; init <= DG_GEMM_BIAS; init++) {
				const int64_t m = shapes[sh][0], n = shapes[sh][1], k = shapes[sh][2];
				const int ta = layout >> 1, trans = layout & 1;
				/* strides past the rows: the product must leave the
				 * gaps alone and never read past a row's end */
				const int64_t lda = (ta ? m : k) + 3, ldc = n + 5, ldb = (trans ? k : n) + 2;
				float *a = randv(s, (ta ? k : m) * lda), *b = randv(s, (trans ? n : k) * ldb), *bias = randv(s, n);
				float *c0 = randv(s, m * ldc);
				float *c1 = malloc(sizeof(float) * (size_t)(m * ldc)), *c2 = malloc(sizeof(float) * (size_t)(m * ldc));
				memcpy(c1, c0, sizeof(float) * (size_t)(m * ldc));
				memcpy(c2, c0, sizeof(float) * (size_t)(m * ldc));
				ref(c0, ldc, m, n, k, a, lda, ta, b, ldb, trans, (dg_gemm_init)init, bias);
				run(c1, ldc, m, n, k, a, lda, ta, b, ldb, trans, (dg_gemm_init)init, bias);
				CHECK(memcmp(c0, c1, sizeof(float) * (size_t)(m * ldc)) == 0);
				/* two column parts, split off a panel's edge */
				const int64_t n1 = n / 2 + 1 < n ? n / 2 + 1 : n;
				run(c2, ldc, m, n1, k, a, lda, ta, b, ldb, trans, (dg_gemm_init)init, bias);
				if (n1 < n)
					run(c2 + n1, ldc, m, n - n1, k, a, lda, ta, trans ? b + n1 * ldb : b + n1, ldb,
					    trans, (dg_gemm_init)init, bias + n1);
				CHECK(memcmp(c0, c2, sizeof(float) * (size_t)(m * ldc)) == 0);
				free(a), free(b), free(bias), free(c0), free(c1), free(c2);
			}
}

/* Inf and NaN flow through the chains as fmaf's do, and a sum of -0
 * products onto a zero start is +0 (as a cleared C plus the products) */
static void test_specials(void)
{
	const int64_t m = 13, n = 33, k = 20;
	float a[13 * 20], b[20 * 33], c0[13 * 33], c1[13 * 33];
	for (int64_t i = 0; i < m * k; i++)
		a[i] = i % 7 == 0 ? -0.0f : (float)(i % 5) - 2.0f;
	for (int64_t i = 0; i < k * n; i++)
		b[i] = (float)(i % 3) + 0.5f;
	a[3 * k + 4] = INFINITY, a[5 * k + 1] = NAN, b[2 * n + 7] = -INFINITY;
	for (int64_t j = 0; j < k; j++)
		a[j] = -0.0f; /* row 0: every product -0 */
	ref(c0, n, m, n, k, a, k, 0, b, n, 0, DG_GEMM_ZERO, NULL);
	run(c1, n, m, n, k, a, k, 0, b, n, 0, DG_GEMM_ZERO, NULL);
	CHECK(memcmp(c0, c1, sizeof c0) == 0);
	CHECK(!signbit(c1[0]) && c1[0] == 0.0f);
	CHECK(isnan(c1[5 * n]) && isnan(c1[3 * n + 7]));
}

int main(void)
{
	if (dg_cpu_best_isa() != DG_ISA_AVX512) {
		printf("test_gemm: skipped, the CPU has no AVX-512\n");
		return 0;
	}
	uint64_t s = 7;
	test_chains(&s);
	test_specials();
	printf("Linear products here: %s\n", dg_blas_linear_own() ? "nn_gemm.c" : "the BLAS");
	return test_done("test_gemm");
}

#else

int main(void)
{
	printf("test_gemm: skipped, not x86\n");
	return 0;
}

#endif
