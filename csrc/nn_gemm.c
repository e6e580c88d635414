/* nn_gemm.c — the Linear layer's float32 products (forward, input gradient,
 * weight gradient) on AVX-512: used in place of the BLAS on Intel CPUs when
 * the BLAS is OpenBLAS (blas_core.c decides, dg_blas_info.linear says).
 *
 * Why not OpenBLAS: inside a GPT step its products ran at ~75% of their
 * tight-loop rate (docs/design.md). It packs both operands on every call,
 * with transposing copies, and in the step the weights come cold from
 * memory. Here only B is packed: a k-block of a block of columns, once, into
 * 32-wide panels, and every 12-row block of A runs over all of them
 * (GotoBLAS's loop order). A whose rows run along the sum (the activations,
 * the output gradient) is read in place by broadcast loads, its 12-row block
 * staying in L1 across the panels; a transposed A (the output gradient in
 * the weight gradient) is packed 96 rows at a time from contiguous runs. A
 * thread packs only the columns it owns.
 *
 * Each element of C is its initial value (0, C's own, or the bias) plus,
 * in order, the sum of each k-block (dg_nn_gemm_kblock: the sums split
 * into equal blocks of at most 512) as one float32 FMA chain in k order
 * from 0, added with one rounding, as a BLAS adds alpha A B to beta C; so a
 * gradient accumulated onto a large one is not rounded at its scale on
 * every term. That depends on k alone, not on the split over threads, and
 * the C tests compare it bit for bit with the chains written with fmaf. */
#include "nn_internal.h"

#if DG_HAVE_X86
#include <immintrin.h>

#define MR 12		     /* rows of a micro-tile: 24 accumulators + 2 panel vectors */
#define NR 32		     /* columns of a micro-tile and of a packed panel */
#define KC ((int64_t)512)    /* a k-block at most: a panel is KC x NR floats (64 KiB) */
#define NC ((int64_t)384)    /* columns packed per block: KC x NC floats (768 KiB, in L2) */
#define MB ((int64_t)96)     /* rows of a transposed A packed at once: MB x KC floats (192 KiB) */

/* lane_mask: the first n of 16 lanes (none for n <= 0) */
static inline __mmask16 lane_mask(int64_t n)
{
	return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* tr16 stores rows 0..kn of the transpose of the 16 x kn block at src (row
 * stride lds) as 16-float halves of panel rows, dst[i * NR] for i < kn */
static DG_TARGET_AVX512 void tr16(const float *src, int64_t lds, int64_t kn, float *dst)
{
	const __mmask16 mk = lane_mask(kn);
	__m512 v[16], t[16];
	for (int i = 0; i < 16; i++)
		v[i] = _mm512_maskz_loadu_ps(mk, src + i * lds);
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
		t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
	}
	for (int i = 0; i < 16; i += 4) {
		v[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
		v[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
		v[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
		v[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
	}
	for (int i = 0; i < 4; i++) {
		t[i] = _mm512_shuffle_f32x4(v[i], v[i + 4], 0x88);
		t[i + 4] = _mm512_shuffle_f32x4(v[i], v[i + 4], 0xdd);
		t[i + 8] = _mm512_shuffle_f32x4(v[i + 8], v[i + 12], 0x88);
		t[i + 12] = _mm512_shuffle_f32x4(v[i + 8], v[i + 12], 0xdd);
	}
	for (int i = 0; i < 4; i++) {
		v[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
		v[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
		v[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
		v[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
	}
	for (int64_t i = 0; i < kn; i++)
		_mm512_store_ps(dst + i * NR, v[i]);
}

/* pack_panel packs columns [0, nr) (nr <= NR) and sums [0, kc) of B into
 * bp[k * NR + j], zero past nr; B(k, j) is b[k * ldb + j] or, transposed,
 * b[j * ldb + k] */
static DG_TARGET_AVX512 void pack_panel(float *bp, const float *b, int64_t ldb, int trans, int64_t nr, int64_t kc)
{
	if (!trans) {
		const __mmask16 m0 = lane_mask(nr), m1 = lane_mask(nr - 16);
		for (int64_t k = 0; k < kc; k++) {
			_mm512_store_ps(bp + k * NR, _mm512_maskz_loadu_ps(m0, b + k * ldb));
			_mm512_store_ps(bp + k * NR + 16, _mm512_maskz_loadu_ps(m1, b + k * ldb + 16));
		}
	} else if (nr == NR) {
		for (int64_t k = 0; k < kc; k += 16) {
			tr16(b + k, ldb, min64(16, kc - k), bp + k * NR);
			tr16(b + 16 * ldb + k, ldb, min64(16, kc - k), bp + k * NR + 16);
		}
	} else {
		for (int64_t k = 0; k < kc; k++)
			for (int64_t j = 0; j < NR; j++)
				bp[k * NR + j] = j < nr ? b[j * ldb + k] : 0.0f;
	}
}

/* tile: C[mr x NR] (columns past the masks untouched) = its init plus the
 * sum over kc of A times the panel bp, A(i, k) = a[i * lda + k] or, packed,
 * a[k * MR + i]. Inlined with constant mr and packed, the accumulators stay
 * in registers and a packed A's loads are constant offsets. */
static inline __attribute__((always_inline)) DG_TARGET_AVX512 void tile(const int mr, const int packed, int64_t kc,
									  const float *a, int64_t lda, const float *bp,
									  float *c, int64_t ldc, dg_gemm_init init,
									  const float *bias, __mmask16 m0, __mmask16 m1)
{
	__m512 acc[MR][2];
#pragma GCC unroll 12
	for (int i = 0; i < mr; i++)
		acc[i][0] = acc[i][1] = _mm512_setzero_ps();
	for (int64_t k = 0; k < kc; k++) {
		const __m512 b0 = _mm512_load_ps(bp + k * NR), b1 = _mm512_load_ps(bp + k * NR + 16);
#pragma GCC unroll 12
		for (int i = 0; i < mr; i++) {
			const __m512 ai = _mm512_set1_ps(packed ? a[k * MR + i] : a[i * lda + k]);
			acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
			acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
		}
	}
#pragma GCC unroll 12
	for (int i = 0; i < mr; i++) {
		if (init == DG_GEMM_BIAS) {
			acc[i][0] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, bias), acc[i][0]);
			acc[i][1] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, bias + 16), acc[i][1]);
		} else if (init == DG_GEMM_ADD) {
			acc[i][0] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c + i * ldc), acc[i][0]);
			acc[i][1] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + i * ldc + 16), acc[i][1]);
		}
		_mm512_mask_storeu_ps(c + i * ldc, m0, acc[i][0]);
		_mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc[i][1]);
	}
}

static DG_TARGET_AVX512 void tile_any(int mr, int packed, int64_t kc, const float *a, int64_t lda, const float *bp,
				      float *c, int64_t ldc, dg_gemm_init init, const float *bias, __mmask16 m0,
				      __mmask16 m1)
{
	switch (mr + (packed ? MR : 0)) {
#define TILE(r, p)                                                       \
	case r + (p ? MR : 0):                                           \
		tile(r, p, kc, a, lda, bp, c, ldc, init, bias, m0, m1); \
		break;
		TILE(1, 0) TILE(2, 0) TILE(3, 0) TILE(4, 0) TILE(5, 0) TILE(6, 0) TILE(7, 0) TILE(8, 0) TILE(9, 0)
		TILE(10, 0) TILE(11, 0) TILE(12, 0) TILE(1, 1) TILE(2, 1) TILE(3, 1) TILE(4, 1) TILE(5, 1) TILE(6, 1)
		TILE(7, 1) TILE(8, 1) TILE(9, 1) TILE(10, 1) TILE(11, 1) TILE(12, 1)
#undef TILE
	}
}

/* pack_rows packs rows [0, ms) (ms <= MB) of a transposed A (A(i, q) =
 * a[q * lda + i]) over sums [0, kc) as ms / MR row blocks, block r at
 * ap + r * kc * MR holding ap[q * MR + i]: each sum's ms values are read
 * as one contiguous run (a block at a time strided down a column and
 * missed the cache on every sum) */
static DG_TARGET_AVX512 void pack_rows(float *ap, const float *a, int64_t lda, int64_t ms, int64_t kc)
{
	for (int64_t q = 0; q < kc; q++)
		for (int64_t r = 0; r * MR < ms; r++) {
			const __mmask16 mk = lane_mask(min64(MR, ms - r * MR));
			_mm512_mask_storeu_ps(ap + r * kc * MR + q * MR, mk,
					      _mm512_maskz_loadu_ps(mk, a + q * lda + r * MR));
		}
}

/* kblock: the k-block size for k sums, at most KC, the blocks equal within
 * 16 so the last is not a sliver */
int64_t dg_nn_gemm_kblock(int64_t k)
{
	const int64_t blocks = (k + KC - 1) / KC;
	const int64_t kc = (k + blocks - 1) / blocks;
	return min64(KC, (kc + 15) / 16 * 16);
}

size_t dg_nn_gemm_scratch(int64_t n, int64_t k)
{
	if (n <= 0 || k <= 0)
		return 0;
	/* the panels, MB packed rows of A (trans_a), and 64 bytes to align the
	 * panels for aligned loads */
	return (size_t)(dg_nn_gemm_kblock(k) * ((min64(n, NC) + NR - 1) / NR * NR + MB)) * sizeof(float) + 64;
}

/* fill writes C's initial values where there is no sum (k == 0) */
static void fill(float *c, int64_t ldc, int64_t m, int64_t n, dg_gemm_init init, const float *bias)
{
	if (init == DG_GEMM_ADD)
		return;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++)
			c[i * ldc + j] = init == DG_GEMM_BIAS ? bias[j] : 0.0f;
}

/* the operands of one product and where its scratch is */
typedef struct gemm_args {
	float *c;
	int64_t ldc, m, n;
	const float *a;
	int64_t lda;
	int trans_a;
	const float *bias;
	float *ap, *bp; /* MB packed rows of A; the packed panels */
} gemm_args;

/* sweep runs every row of C over the panels packed for columns [n0, n0 +
 * panels * NR) and sums [k0, k0 + kc) */
static DG_TARGET_AVX512 void sweep(const gemm_args *g, int64_t n0, int64_t panels, int64_t k0, int64_t kc,
				   dg_gemm_init in)
{
	for (int64_t s0 = 0; s0 < g->m; s0 += MB) {
		const int64_t ms = min64(MB, g->m - s0);
		/* A in place (rows along k), or these rows packed k-major: a
		 * column of a transposed A is a strided walk that every panel
		 * would repeat */
		if (g->trans_a)
			pack_rows(g->ap, g->a + k0 * g->lda + s0, g->lda, ms, kc);
		for (int64_t i0 = s0; i0 < s0 + ms; i0 += MR) {
			const int mr = (int)min64(MR, s0 + ms - i0);
			const float *at = g->trans_a ? g->ap + (i0 - s0) / MR * kc * MR : g->a + i0 * g->lda + k0;
			for (int64_t p = 0; p < panels; p++) {
				const int64_t j0 = n0 + p * NR, nr = min64(NR, g->n - j0);
				if (in == DG_GEMM_ADD) { /* the next tile's C, from memory when cold */
					const int64_t ni = p + 1 < panels ? i0 : i0 + MR;
					const int64_t nj = p + 1 < panels ? j0 + NR : n0;
					for (int64_t r = ni; r < min64(ni + MR, g->m); r++) {
						__builtin_prefetch(g->c + r * g->ldc + nj, 1, 3);
						__builtin_prefetch(g->c + r * g->ldc + nj + 16, 1, 3);
					}
				}
				tile_any(mr, g->trans_a, kc, at, g->lda, g->bp + p * kc * NR, g->c + i0 * g->ldc + j0,
					 g->ldc, in, g->bias != NULL ? g->bias + j0 : NULL, lane_mask(nr),
					 lane_mask(nr - 16));
			}
		}
	}
}

DG_TARGET_AVX512 void dg_nn_gemm(float *c, int64_t ldc, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
				 int trans_a, const float *b, int64_t ldb, int trans_b, dg_gemm_init init,
				 const float *bias, float *scratch)
{
	if (m <= 0 || n <= 0)
		return;
	if (k <= 0) {
		fill(c, ldc, m, n, init, bias);
		return;
	}
	const int64_t kb = dg_nn_gemm_kblock(k);
	float *bp = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
	const gemm_args g = {.c = c, .ldc = ldc, .m = m, .n = n, .a = a, .lda = lda, .trans_a = trans_a, .bias = bias,
			     .bp = bp, .ap = bp + kb * ((min64(n, NC) + NR - 1) / NR * NR)};
	for (int64_t k0 = 0; k0 < k; k0 += kb) {
		const int64_t kc = min64(kb, k - k0);
		for (int64_t n0 = 0; n0 < n; n0 += NC) {
			const int64_t panels = (min64(NC, n - n0) + NR - 1) / NR;
			for (int64_t p = 0; p < panels; p++) {
				const int64_t j0 = n0 + p * NR;
				const float *src = trans_b ? b + j0 * ldb + k0 : b + k0 * ldb + j0;
				pack_panel(bp + p * kc * NR, src, ldb, trans_b, min64(NR, n - j0), kc);
			}
			/* later k-blocks continue the chains from C */
			sweep(&g, n0, panels, k0, kc, k0 > 0 ? DG_GEMM_ADD : init);
		}
	}
}

#endif /* DG_HAVE_X86 */
