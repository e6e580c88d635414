/* test_cast.c — dg_cast against dg_math.h, bit for bit, for every ISA. */
#include "dg_internal.h"
#include "dg_math.h"
#include "test_util.h"

static size_t esize(dg_dtype t) { return t == DG_F32 ? 4 : 2; }

/* what dg_cast must produce for one element, built from dg_math.h alone */
static void ref_cast(dg_dtype src, dg_dtype dst, const void *s, void *d, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float v;
		if (src == DG_F32)
			v = ((const float *)s)[i];
		else if (src == DG_F16)
			v = dg_f16_to_f32(((const uint16_t *)s)[i]);
		else
			v = dg_bf16_to_f32(((const uint16_t *)s)[i]);
		if (src == dst) { /* copies keep bits, NaN payloads included */
			memcpy((char *)d + (size_t)i * esize(dst), (const char *)s + (size_t)i * esize(src), esize(src));
			continue;
		}
		if (dst == DG_F32)
			((float *)d)[i] = v;
		else if (dst == DG_F16)
			((uint16_t *)d)[i] = dg_f32_to_f16(v);
		else
			((uint16_t *)d)[i] = dg_f32_to_bf16(v);
	}
}

/* cast src (n elements) with ctx split into `parts` list entries, compare to
 * the reference and check nothing past the end was written */
static void check_cast(dg_ctx *ctx, dg_dtype src, dg_dtype dst, const void *s, int64_t n, int parts)
{
	size_t db = (size_t)n * esize(dst);
	unsigned char *got = malloc(db + 64), *want = malloc(db + 64);
	memset(got, 0xa5, db + 64);
	ref_cast(src, dst, s, want, n);
	const void *srcs[8];
	void *dsts[8];
	int64_t ns[8];
	int64_t at = 0;
	for (int p = 0; p < parts; p++) {
		int64_t len = p == parts - 1 ? n - at : (n / parts) + (p & 1); /* uneven pieces */
		if (len > n - at)
			len = n - at;
		srcs[p] = (const char *)s + (size_t)at * esize(src);
		dsts[p] = got + (size_t)at * esize(dst);
		ns[p] = len;
		at += len;
	}
	CHECK_OK(dg_cast(ctx, src, dst, srcs, dsts, ns, parts));
	if (memcmp(got, want, db) != 0) {
		for (int64_t i = 0; i < n; i++) {
			if (memcmp(got + i * esize(dst), want + i * esize(dst), esize(dst)) != 0) {
				uint32_t in = 0, g = 0, w = 0;
				memcpy(&in, (const char *)s + i * esize(src), esize(src));
				memcpy(&g, got + i * esize(dst), esize(dst));
				memcpy(&w, want + i * esize(dst), esize(dst));
				fprintf(stderr, "isa %s cast %d->%d n=%lld i=%lld in=%08x got=%08x want=%08x\n",
					isa_name(dg_ctx_isa(ctx)), src, dst, (long long)n, (long long)i, in, g, w);
				break;
			}
		}
		CHECK(0);
	}
	for (size_t i = db; i < db + 64; i++)
		CHECK(got[i] == 0xa5);
	free(got);
	free(want);
}

/* the first element of n where got and want differ, or -1 */
static int64_t first_diff16(const uint16_t *got, const uint16_t *want, int64_t n)
{
	if (memcmp(got, want, (size_t)n * 2) == 0)
		return -1;
	for (int64_t i = 0; i < n; i++)
		if (got[i] != want[i])
			return i;
	return -1;
}

/* Every float32 bit pattern (NaN payloads, subnormals, values that round to
 * Inf) cast to bfloat16 by the best ISA's ctx, against dg_f32_to_bf16. Chunks
 * alternate between one call big enough for the streaming cast and calls
 * small enough for the ordinary one; some start off the 64-byte alignment
 * the streaming path's head handles. Where the best table is the AVX512_BF16
 * one, the plain AVX-512 loop it stands in for is checked too. */
static void check_all_f32_to_bf16(dg_ctx *ctx)
{
	const int64_t chunk = (int64_t)1 << 24, small = (int64_t)1 << 20;
	float *f = malloc((size_t)chunk * 4);
	uint16_t *want = malloc((size_t)chunk * 2), *buf = malloc((size_t)chunk * 2 + 64);
	CHECK(f != NULL && want != NULL && buf != NULL);
	const dg_kernels *plain = NULL;
#if DG_HAVE_X86
	if (dg_ctx_isa(ctx) == DG_ISA_AVX512 && dg_cpu_has_avx512bf16())
		plain = &dg_kernels_avx512;
#endif
	for (uint64_t c = 0; c < ((uint64_t)1 << 32) / (uint64_t)chunk; c++) {
		for (int64_t k = 0; k < chunk; k++) {
			f[k] = bits_f32((uint32_t)(c * (uint64_t)chunk + (uint64_t)k));
			want[k] = dg_f32_to_bf16(f[k]);
		}
		uint16_t *got = buf + (c % 4 >= 2 ? 3 : 0); /* both kinds of call, misaligned too */
		for (int64_t at = 0; at < chunk;) {
			int64_t len = c % 2 == 0 ? chunk : small;
			const void *sp[1] = {f + at};
			void *dp[1] = {got + at};
			CHECK_OK(dg_cast(ctx, DG_F32, DG_BF16, sp, dp, &len, 1));
			at += len;
		}
		int64_t i = first_diff16(got, want, chunk);
		if (i < 0 && plain != NULL) {
			plain->cast(DG_F32, DG_BF16, f, got, chunk);
			i = first_diff16(got, want, chunk);
		}
		if (i >= 0) {
			fprintf(stderr, "f32->bf16 in=%08x got=%04x want=%04x\n", (unsigned)(c * (uint64_t)chunk + (uint64_t)i),
				got[i], want[i]);
			CHECK(0);
			break;
		}
	}
	free(f);
	free(want);
	free(buf);
}

int main(void)
{
	dg_isa isas[3];
	int nisa = test_isas(isas);
	dg_ctx *ctx;
	CHECK_OK(dg_ctx_create(2, &ctx));

	/* every half and bfloat16 pattern, widened and narrowed again */
	uint16_t *all16 = malloc(65536 * 2);
	float *wide = malloc(65536 * 4);
	for (uint32_t i = 0; i < 65536; i++)
		all16[i] = (uint16_t)i;
	for (uint32_t i = 0; i < 65536; i++) {
		/* the reference itself: non-NaN round trips are exact */
		if (dg_isfinite_f16(all16[i]) || (all16[i] & 0x3ff) == 0)
			CHECK(dg_f32_to_f16(dg_f16_to_f32(all16[i])) == all16[i]);
		if (dg_isfinite_bf16(all16[i]) || (all16[i] & 0x7f) == 0)
			CHECK(dg_f32_to_bf16(dg_bf16_to_f32(all16[i])) == all16[i]);
	}
	for (int k = 0; k < nisa; k++) {
		CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
		for (int parts = 1; parts <= 7; parts += 3) {
			check_cast(ctx, DG_F16, DG_F32, all16, 65536, parts);
			check_cast(ctx, DG_BF16, DG_F32, all16, 65536, parts);
			check_cast(ctx, DG_F16, DG_BF16, all16, 65536, parts);
			check_cast(ctx, DG_BF16, DG_F16, all16, 65536, parts);
		}
		for (uint32_t i = 0; i < 65536; i++)
			wide[i] = dg_f16_to_f32((uint16_t)i);
		check_cast(ctx, DG_F32, DG_F16, wide, 65536, 3);
		check_cast(ctx, DG_F32, DG_BF16, wide, 65536, 3);
		for (uint32_t i = 0; i < 65536; i++)
			wide[i] = dg_bf16_to_f32((uint16_t)i);
		check_cast(ctx, DG_F32, DG_F16, wide, 65536, 3);
		check_cast(ctx, DG_F32, DG_BF16, wide, 65536, 3);
	}

	/* float32 patterns at every rounding boundary: all 2^16 high halves times
	 * low halves around the bf16 (bit 15) and normal-f16 (bit 12) midpoints,
	 * then random patterns for the f16 subnormal boundaries */
	static const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2fff,
					0x3000, 0x3001, 0x7fff, 0x8000, 0x8001, 0xefff, 0xf000, 0xffff};
	int64_t nb = 65536 * 16 + (1 << 20);
	float *f = malloc((size_t)nb * 4);
	int64_t m = 0;
	for (uint32_t hi = 0; hi < 65536; hi++)
		for (int l = 0; l < 16; l++)
			f[m++] = bits_f32(hi << 16 | lows[l]);
	uint64_t seed = 1;
	while (m < nb)
		f[m++] = bits_f32((uint32_t)rng_next(&seed));
	for (int k = 0; k < nisa; k++) {
		CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
		check_cast(ctx, DG_F32, DG_F16, f, nb, 5);
		check_cast(ctx, DG_F32, DG_BF16, f, nb, 5);
	}

	CHECK_OK(dg_ctx_set_isa(ctx, isas[nisa - 1]));
	check_all_f32_to_bf16(ctx);

	/* all nine pairs at the awkward sizes, on 1 and 3 threads */
	dg_dtype ts[3] = {DG_F32, DG_F16, DG_BF16};
	for (int th = 1; th <= 3; th += 2) {
		CHECK_OK(dg_ctx_set_threads(ctx, th));
		for (int k = 0; k < nisa; k++) {
			CHECK_OK(dg_ctx_set_isa(ctx, isas[k]));
			for (int a = 0; a < 3; a++)
				for (int b = 0; b < 3; b++)
					for (int z = 0; z < N_TEST_SIZES; z++) {
						/* source bits: the float patterns above, reused */
						check_cast(ctx, ts[a], ts[b], f, test_sizes[z], 1);
						check_cast(ctx, ts[a], ts[b], f, test_sizes[z], 2);
					}
		}
	}

	/* argument errors */
	const void *sp[1] = {f};
	void *dp[1] = {wide};
	const void *np[1] = {NULL};
	int64_t one = 1, neg = -1;
	CHECK(dg_cast(NULL, DG_F32, DG_F16, sp, dp, &one, 1) == DG_ERR_INVALID);
	CHECK(dg_cast(ctx, DG_I32, DG_F16, sp, dp, &one, 1) == DG_ERR_DTYPE);
	CHECK(dg_cast(ctx, DG_F32, DG_F64, sp, dp, &one, 1) == DG_ERR_DTYPE);
	CHECK(dg_cast(ctx, DG_F32, DG_F16, sp, dp, &neg, 1) == DG_ERR_INVALID);
	CHECK(dg_cast(ctx, DG_F32, DG_F16, np, dp, &one, 1) == DG_ERR_INVALID);
	CHECK(dg_cast(ctx, DG_F32, DG_F16, NULL, dp, &one, 1) == DG_ERR_INVALID);
	CHECK(dg_cast(ctx, DG_F32, DG_F16, sp, dp, &one, -1) == DG_ERR_INVALID);
	CHECK(dg_cast(ctx, DG_F32, DG_F16, NULL, NULL, NULL, 0) == DG_OK);
	int64_t zero = 0;
	CHECK(dg_cast(ctx, DG_F32, DG_F16, np, (void *const *)np, &zero, 1) == DG_OK);

	dg_ctx_destroy(ctx);
	free(all16);
	free(wide);
	free(f);
	return test_done("test_cast");
}
