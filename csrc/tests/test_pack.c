/* test_pack.c — dg_pack/dg_unpack round trips and region validation. */
#include "test_util.h"

int main(void)
{
	dg_ctx *ctx;
	CHECK_OK(dg_ctx_create(3, &ctx));
	dg_dtype ts[] = {DG_F32, DG_F16, DG_BF16, DG_I32, DG_I64, DG_U8, DG_BOOL, DG_F64};
	uint64_t seed = 5;
	enum { NT = N_TEST_SIZES };
	for (size_t d = 0; d < sizeof ts / sizeof ts[0]; d++) {
		size_t es = dg_dtype_size(ts[d]);
		void *src[NT], *back[NT];
		int64_t ns[NT], offs[NT], total = 0;
		/* regions in reverse order with gaps, to take the sorting check */
		for (int i = 0; i < NT; i++) {
			ns[i] = test_sizes[NT - 1 - i];
			src[i] = malloc((size_t)ns[i] * es + 1);
			back[i] = malloc((size_t)ns[i] * es + 1);
			for (size_t b = 0; b < (size_t)ns[i] * es; b++)
				((unsigned char *)src[i])[b] = (unsigned char)rng_next(&seed);
		}
		int64_t at = 0;
		for (int i = NT - 1; i >= 0; i--) {
			offs[i] = at;
			at += ns[i] + 3;
		}
		total = at;
		unsigned char *flat = calloc((size_t)total, es);
		CHECK_OK(dg_pack(ctx, ts[d], (const void *const *)src, ns, offs, NT, flat, total));
		for (int i = 0; i < NT; i++)
			CHECK(memcmp(flat + (size_t)offs[i] * es, src[i], (size_t)ns[i] * es) == 0);
		for (int i = 0; i < NT; i++) /* gaps untouched */
			CHECK(flat[(size_t)(offs[i] + ns[i]) * es] == 0);
		CHECK_OK(dg_unpack(ctx, ts[d], flat, total, offs, ns, back, NT));
		for (int i = 0; i < NT; i++)
			CHECK(memcmp(back[i], src[i], (size_t)ns[i] * es) == 0);

		/* ascending layout, the fast check */
		int64_t asc[NT];
		at = 0;
		for (int i = 0; i < NT; i++) {
			asc[i] = at;
			at += ns[i];
		}
		memset(flat, 0, (size_t)total * es);
		CHECK_OK(dg_pack(ctx, ts[d], (const void *const *)src, ns, asc, NT, flat, at));
		CHECK(memcmp(flat, src[0], (size_t)ns[0] * es) == 0);
		CHECK_OK(dg_unpack(ctx, ts[d], flat, at, asc, ns, back, NT));
		for (int i = 0; i < NT; i++)
			CHECK(memcmp(back[i], src[i], (size_t)ns[i] * es) == 0);

		/* bounds: one past the end, negative offset */
		CHECK(dg_pack(ctx, ts[d], (const void *const *)src, ns, asc, NT, flat, at - 1) == DG_ERR_SIZE);
		asc[NT - 1] = -1;
		CHECK(dg_pack(ctx, ts[d], (const void *const *)src, ns, asc, NT, flat, total) == DG_ERR_SIZE);
		CHECK(dg_unpack(ctx, ts[d], flat, total, asc, ns, back, NT) == DG_ERR_SIZE);
		for (int i = 0; i < NT; i++) {
			free(src[i]);
			free(back[i]);
		}
		free(flat);
	}

	/* overlap, ascending and not; empty regions never overlap */
	float a[4] = {1, 2, 3, 4}, flat[16];
	const void *s3[3] = {a, a, a};
	int64_t n3[3] = {4, 4, 0}, ov_asc[3] = {0, 3, 2}, ov_rev[3] = {8, 5, 0}, ok_rev[3] = {8, 4, 9};
	CHECK(dg_pack(ctx, DG_F32, s3, n3, ov_asc, 3, flat, 16) == DG_ERR_INVALID);
	CHECK(dg_pack(ctx, DG_F32, s3, n3, ov_rev, 3, flat, 16) == DG_ERR_INVALID);
	CHECK_OK(dg_pack(ctx, DG_F32, s3, n3, ok_rev, 3, flat, 16));
	CHECK(flat[4] == 1 && flat[11] == 4);
	/* overflow of offs + ns must not wrap past the check */
	int64_t big[1] = {INT64_MAX - 1}, n1[1] = {4};
	CHECK(dg_pack(ctx, DG_F32, s3, n1, big, 1, flat, 16) == DG_ERR_SIZE);
	/* argument errors */
	int64_t off0[1] = {0}, neg[1] = {-1};
	CHECK(dg_pack(NULL, DG_F32, s3, n1, off0, 1, flat, 16) == DG_ERR_INVALID);
	CHECK(dg_pack(ctx, (dg_dtype)42, s3, n1, off0, 1, flat, 16) == DG_ERR_DTYPE);
	CHECK(dg_pack(ctx, DG_F32, s3, n1, NULL, 1, flat, 16) == DG_ERR_INVALID);
	CHECK(dg_pack(ctx, DG_F32, s3, n1, off0, 1, NULL, 16) == DG_ERR_INVALID);
	CHECK(dg_pack(ctx, DG_F32, s3, n1, off0, 1, flat, -1) == DG_ERR_INVALID);
	CHECK(dg_pack(ctx, DG_F32, s3, neg, off0, 1, flat, 16) == DG_ERR_INVALID);
	CHECK(dg_pack(ctx, DG_F32, s3, n1, off0, -1, flat, 16) == DG_ERR_INVALID);
	CHECK(dg_unpack(ctx, DG_F32, flat, 16, off0, n1, NULL, 1) == DG_ERR_INVALID);
	CHECK_OK(dg_pack(ctx, DG_F32, NULL, NULL, NULL, 0, NULL, 0));
	dg_ctx_destroy(ctx);
	return test_done("test_pack");
}
