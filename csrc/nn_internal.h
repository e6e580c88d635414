/*
 * nn_internal.h — what the nn_*.c kernels share: the argument checks, the
 * grain sizes, and the one-time OpenBLAS setup.
 */
#ifndef DG_NN_INTERNAL_H
#define DG_NN_INTERNAL_H

#include <math.h>
#include <string.h>

#include "dg_internal.h"
#include "dg_nn_math.h"

/* Rows handed to one thread at a time: big enough that one sgemm call per
 * part is efficient, small enough that small batches still split. */
#define DG_NN_ROW_GRAIN ((int64_t)16)
/* Channel ranges for the column reductions (bias, layernorm weights,
 * embedding rows): a multiple of 16 floats keeps parts on cache lines. */
#define DG_NN_COL_GRAIN ((int64_t)16)

static inline int dg_nn_bad_dims(int64_t a, int64_t b) { return a < 0 || b < 0; }

/* dg_nn_ids_ok reports whether every id of ids[0..n) (tokens, targets) is
 * in [0, v). */
static inline int dg_nn_ids_ok(const int32_t *ids, int64_t n, int64_t v)
{
	for (int64_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= v)
			return 0;
	return 1;
}

/* dg_nn_tile_rows is how many rows of c floats, plus one float per row (a
 * bias or its gradient), fit in DG_NN_TILE_FLOATS; at least 1. It depends on
 * c alone, so blocking by it does not depend on how threads split the work. */
static inline int64_t dg_nn_tile_rows(int64_t c)
{
	int64_t r = DG_NN_TILE_FLOATS / (c + 1);
	return r > 0 ? r : 1;
}

/* dg_nn_grad_add adds a float32 contribution v[0..n) into elements off.. of
 * the gradient g of dtype gt with one rounding each: the mixed kernels'
 * g = narrow(widen(g) + v). */
static inline void dg_nn_grad_add(const dg_kernels *k, dg_dtype gt, void *g, int64_t off, const float *v, int64_t n)
{
	dg_axpy_mixed_run(k, DG_F32, gt, 1.0f, v, (char *)g + (size_t)off * dg_dtype_size(gt), n);
}

/* dg_nn_widen widens n elements of src (dtype t) from element off into dst. */
static inline void dg_nn_widen(const dg_kernels *k, dg_dtype t, const void *src, int64_t off, float *dst, int64_t n)
{
	const char *s = (const char *)src + (size_t)off * dg_dtype_size(t);
	if (t == DG_F32)
		memcpy(dst, s, (size_t)n * sizeof(float));
	else
		k->cast(t, DG_F32, s, dst, n);
}

/* dg_nn_row_max is the largest of x[0..n), -inf when none is larger, with
 * isa's vector loop (a max does not depend on the order it is taken in). */
float dg_nn_row_max(dg_isa isa, const float *x, int64_t n);

/* Rows per block of the cross-entropies' row sums (dg_nn_row_sums). */
#define DG_NN_SUM_ROWS 8

/* dg_nn_row_sums sets sum[k] to the double sum of p[k*v + i] over i in
 * order, for the m <= DG_NN_SUM_ROWS rows of a block: whole blocks side by
 * side, each row's bits those of its own loop (nn_crossentropy.c). */
void dg_nn_row_sums(const float *p, int64_t v, int64_t m, double *sum);

/* dg_nn_softmax_exps sets out[i] = dg_nn_softmax_exp(x[i], mx) for i < n
 * (out may be x) with isa's vector loop: the same bits on every ISA. */
void dg_nn_softmax_exps(dg_isa isa, float *out, const float *x, int64_t n, float mx);

/* Loops over rows that read half parameters take the dtype as an argument,
 * are always inlined (DG_NN_INLINE) and are called through DG_NN_BY_DTYPE,
 * which passes the dtype as a constant: each dtype gets its own loop with the
 * load resolved at compile time, so the float32 loop stays the plain one. */
#define DG_NN_INLINE static inline __attribute__((always_inline))
#define DG_NN_BY_DTYPE(t, fn, ...)                                                                                 \
	do {                                                                                                       \
		switch (t) {                                                                                       \
		case DG_F16: fn(__VA_ARGS__, DG_F16); break;                                                       \
		case DG_BF16: fn(__VA_ARGS__, DG_BF16); break;                                                     \
		default: fn(__VA_ARGS__, DG_F32); break;                                                           \
		}                                                                                                  \
	} while (0)

/* DG_UNROLL(n) asks for a loop of constant trip count n to be unrolled
 * completely, so that per-row accumulator arrays become registers (GCC at
 * -O2 leaves such loops rolled and the arrays on the stack). */
#define DG_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define DG_UNROLL(n) DG_PRAGMA(unroll n)
#elif defined(__GNUC__)
#define DG_UNROLL(n) DG_PRAGMA(GCC unroll n)
#else
#define DG_UNROLL(n)
#endif

/* DG_VECTORISE marks an elementwise loop for GCC's vectoriser: cgo builds
 * at -O2, whose cost model leaves loops that need a runtime aliasing check
 * scalar. It never reorders a float sum (that needs -ffast-math), so the
 * bits are the scalar loop's. Clang has no optimize attribute and
 * vectorises such loops at -O2 already. */
#if defined(__GNUC__) && !defined(__clang__)
#define DG_VECTORISE __attribute__((optimize("O3")))
#else
#define DG_VECTORISE
#endif

/* DG_NO_SLP keeps GCC's SLP vectoriser off a loop of independent scalar
 * chains, which it packs into vectors with a shuffle per load. */
#if defined(__GNUC__) && !defined(__clang__)
#define DG_NO_SLP __attribute__((optimize("no-tree-slp-vectorize")))
#else
#define DG_NO_SLP
#endif

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- nn_gemm.c: the Linear layer's float32 products on AVX-512 ----
 * dg_nn_gemm sets C[m x n] (row stride ldc) to its initial value plus
 * A[m x k] times B[k x n], where A(i, k) is a[i * lda + k], or
 * a[k * lda + i] with trans_a, and B(k, j) is b[k * ldb + j], or
 * b[j * ldb + k] with trans_b. Each element is its initial value plus, in
 * order, each k-block's sum (blocks of dg_nn_gemm_kblock(k) sums, the last
 * shorter) as one float32 FMA chain in k order from 0, added with one
 * rounding. scratch holds dg_nn_gemm_scratch(n, k) bytes. Only on x86, and
 * only where dg_blas_linear_own says so (an AVX-512 CPU). */
typedef enum dg_gemm_init {
	DG_GEMM_ZERO = 0, /* C = A B */
	DG_GEMM_ADD = 1,  /* C += A B */
	DG_GEMM_BIAS = 2, /* C = bias (every row, n floats) + A B */
} dg_gemm_init;

#if DG_HAVE_X86
size_t dg_nn_gemm_scratch(int64_t n, int64_t k);
int64_t dg_nn_gemm_kblock(int64_t k);
void dg_nn_gemm(float *c, int64_t ldc, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, int trans_a,
		const float *b, int64_t ldb, int trans_b, dg_gemm_init init, const float *bias, float *scratch);
#endif

/* dg_nn_failed records, from inside a task, that scratch could not be
 * allocated; the caller turns it into DG_ERR_NOMEM. */
static inline void dg_nn_failed(int *flag) { __atomic_store_n(flag, 1, __ATOMIC_RELAXED); }

#endif /* DG_NN_INTERNAL_H */
