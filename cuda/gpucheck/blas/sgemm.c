/* sgemm.c — see cblas.h: a naive row-major cblas_sgemm for gpucheck's CPU
 * twins when the machine has no OpenBLAS. Each output element is one dot
 * product in index order, in float, then alpha and beta as BLAS defines
 * them (beta == 0: C is not read). */
#include "cblas.h"

void openblas_set_num_threads(int n) { (void)n; }

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
		 float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	(void)order; /* csrc calls it row-major only */
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			float s = 0.0f;
			for (int p = 0; p < k; p++) {
				float x = ta == CblasTrans ? a[(long)p * lda + i] : a[(long)i * lda + p];
				float y = tb == CblasTrans ? b[(long)j * ldb + p] : b[(long)p * ldb + j];
				s += x * y;
			}
			float *o = &c[(long)i * ldc + j];
			*o = beta == 0.0f ? alpha * s : alpha * s + beta * *o;
		}
}
