/*
 * dg_math.h — element math written once, used by the C loops and the CUDA
 * kernels alike. Under nvcc DG_HD is __host__ __device__; in C it is plain
 * static inline. Everything here is integer-exact or IEEE float arithmetic in
 * round-to-nearest-even, so the CPU and GPU give the same bits.
 *
 * The casts work on bit patterns rather than through the FPU's conversion
 * instructions: hardware converters disagree on NaN payloads (CUDA writes a
 * canonical 0x7FFF), and some flush subnormals (AVX512_BF16's VCVTNEPS2BF16
 * treats denormal inputs as zero). Rules:
 *   - rounding to nearest, ties to even;
 *   - overflow rounds to Inf, subnormals are exact where representable;
 *   - float32 -> half/bf16 NaN: quiet, sign and top payload bits kept
 *     (this is what x86 F16C produces, so SIMD and scalar agree);
 *   - float16 -> float32 NaN: quiet (sets bit 22; also F16C's behaviour);
 *   - bfloat16 -> float32 is a plain 16-bit shift (exact, NaN bits kept).
 */
#ifndef DG_MATH_H
#define DG_MATH_H

#include <stdint.h>

#ifdef __CUDACC__
#define DG_HD __host__ __device__ __forceinline__
#else
#define DG_HD static inline
#endif

#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
/* device pass of nvcc; its host pass takes the memcpy versions below, since
 * a __host__ __device__ function may not call the device-only intrinsics */
DG_HD uint32_t dg_f32_bits(float f) { return __float_as_uint(f); }
DG_HD float dg_bits_f32(uint32_t u) { return __uint_as_float(u); }
DG_HD uint64_t dg_f64_bits(double f) { return (uint64_t)__double_as_longlong(f); }
DG_HD double dg_bits_f64(uint64_t u) { return __longlong_as_double((long long)u); }
#else
#include <string.h>
DG_HD uint32_t dg_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}
DG_HD float dg_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}
DG_HD uint64_t dg_f64_bits(double f)
{
	uint64_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}
DG_HD double dg_bits_f64(uint64_t u)
{
	double f;
	memcpy(&f, &u, sizeof f);
	return f;
}
#endif

/* dg_f32_to_f16 rounds a float32 to IEEE binary16, nearest even. */
DG_HD uint16_t dg_f32_to_f16(float f)
{
	uint32_t x = dg_f32_bits(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u) /* NaN: quiet it, keep the top 9 payload bits */
		return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
	if (ax >= 0x47800000u) /* >= 65536 (and Inf): Inf */
		return (uint16_t)(sign | 0x7c00u);
	if (ax >= 0x38800000u) { /* normal half: rebias exponent 127 -> 15 */
		uint32_t h = (ax - 0x38000000u) >> 13;
		uint32_t rem = ax & 0x1fffu;
		/* a carry out of the mantissa bumps the exponent, up to Inf: still right */
		h += (rem > 0x1000u) | ((rem == 0x1000u) & (h & 1u));
		return (uint16_t)(sign | h);
	}
	if (ax < 0x33000000u) /* below half of the smallest subnormal: zero */
		return (uint16_t)sign;
	/* half subnormal: value = mant * 2^(e-150) = q * 2^-24, q = mant >> (126-e) */
	uint32_t e = ax >> 23;
	uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
	uint32_t shift = 126u - e; /* 14 .. 24 */
	uint32_t q = mant >> shift;
	uint32_t rem = mant & ((1u << shift) - 1u);
	uint32_t half = 1u << (shift - 1u);
	q += (rem > half) | ((rem == half) & (q & 1u));
	return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal: right too */
}

/* dg_f16_to_f32 widens IEEE binary16 exactly. */
DG_HD float dg_f16_to_f32(uint16_t h)
{
	uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
	uint32_t e = ((uint32_t)h >> 10) & 0x1fu;
	uint32_t m = (uint32_t)h & 0x3ffu;
	if (e == 0x1fu) {
		if (m == 0)
			return dg_bits_f32(sign | 0x7f800000u);
		return dg_bits_f32(sign | 0x7fc00000u | (m << 13));
	}
	if (e == 0) {
		/* subnormal or zero: m * 2^-24, exact in float32 */
		float v = (float)m * 5.9604644775390625e-8f;
		return dg_bits_f32(sign | dg_f32_bits(v));
	}
	return dg_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* dg_f32_to_bf16 rounds a float32 to bfloat16, nearest even. */
DG_HD uint16_t dg_f32_to_bf16(float f)
{
	uint32_t x = dg_f32_bits(f);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

/* dg_bf16_to_f32 widens bfloat16 exactly. */
DG_HD float dg_bf16_to_f32(uint16_t b) { return dg_bits_f32((uint32_t)b << 16); }

/* dg_isfinite_f32 is true for everything but Inf and NaN, without the FPU. */
DG_HD int dg_isfinite_f32(float f) { return (dg_f32_bits(f) & 0x7f800000u) != 0x7f800000u; }
DG_HD int dg_isfinite_f16(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }
DG_HD int dg_isfinite_bf16(uint16_t b) { return (b & 0x7f80u) != 0x7f80u; }

/* dg_axpy_f32 is one element of y += a*x, written as an explicit multiply and
 * add (no fused multiply-add) so the C loop, the SIMD loop and the CUDA kernel
 * round identically. Kernels built with -ffp-contract=off keep it that way. */
DG_HD float dg_axpy_f32(float a, float x, float y) { return y + a * x; }

#endif /* DG_MATH_H */
