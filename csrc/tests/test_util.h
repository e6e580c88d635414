/* test_util.h — the few helpers the C tests share: a checking macro that
 * reports file:line and keeps going, a deterministic RNG, and the ISA list. */
#ifndef DG_TEST_UTIL_H
#define DG_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepgo.h"
#include "dg_math.h"

static int test_failures;

#define CHECK(cond)                                                                                                 \
	do {                                                                                                        \
		if (!(cond)) {                                                                                      \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                    \
			if (++test_failures > 50) {                                                                 \
				fprintf(stderr, "too many failures\n");                                             \
				exit(1);                                                                            \
			}                                                                                           \
		}                                                                                                   \
	} while (0)

#define CHECK_OK(expr) CHECK((expr) == DG_OK)

static inline int test_done(const char *name)
{
	if (test_failures) {
		fprintf(stderr, "%s: %d failure(s)\n", name, test_failures);
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}

/* splitmix64: deterministic so failures reproduce */
static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline float rng_float(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* the ISAs this CPU can run, scalar first */
static inline int test_isas(dg_isa out[3])
{
	dg_isa best = dg_cpu_best_isa();
	int n = 0;
	out[n++] = DG_ISA_SCALAR;
	if (best >= DG_ISA_AVX2)
		out[n++] = DG_ISA_AVX2;
	if (best >= DG_ISA_AVX512)
		out[n++] = DG_ISA_AVX512;
	return n;
}

static inline const char *isa_name(dg_isa i)
{
	switch (i) {
	case DG_ISA_SCALAR: return "scalar";
	case DG_ISA_AVX2: return "avx2";
	case DG_ISA_AVX512: return "avx512";
	default: return "auto";
	}
}

static const int64_t test_sizes[] = {0, 1, 15, 16, 17, 63, 64, 65, 1000003};
#define N_TEST_SIZES ((int)(sizeof test_sizes / sizeof test_sizes[0]))

static inline uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* element i of a float32/float16/bfloat16 array, widened; and rounded into one */
static inline float widen(dg_dtype t, const void *p, int64_t i)
{
	if (t == DG_F32)
		return ((const float *)p)[i];
	uint16_t h = ((const uint16_t *)p)[i];
	return t == DG_F16 ? dg_f16_to_f32(h) : dg_bf16_to_f32(h);
}

static inline void narrow(dg_dtype t, void *p, int64_t i, float v)
{
	if (t == DG_F32)
		((float *)p)[i] = v;
	else
		((uint16_t *)p)[i] = t == DG_F16 ? dg_f32_to_f16(v) : dg_f32_to_bf16(v);
}

#endif
