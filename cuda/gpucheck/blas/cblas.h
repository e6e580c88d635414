/*
 * cblas.h — gpucheck's stand-in for OpenBLAS's header, used only when
 * scripts/build-cuda.sh finds no OpenBLAS on the machine building gpucheck
 * (a GPU machine may have none). It declares just what csrc/nn_matmul.c
 * calls; sgemm.c implements it with plain loops. The CPU twins' matmul
 * results then differ from OpenBLAS's in summation order only, which the
 * sgemm rows' relative tolerance covers. Never part of the Go build.
 */
#ifndef DG_GPUCHECK_CBLAS_H
#define DG_GPUCHECK_CBLAS_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };

void openblas_set_num_threads(int n);
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
		 float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

#endif
