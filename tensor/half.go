package tensor

import "math"

// This file is deepgo's Go reference for the half-precision formats. It works
// on float64 values (math.Frexp, math.RoundToEven) rather than on bit tricks,
// so it is an independent check of the C core's dg_math.h, which must agree
// with it bit for bit. Rules: round to nearest even; overflow to Inf;
// subnormals exact; float32 -> 16-bit NaN is quiet with the sign and top
// payload bits kept; float16 -> float32 NaN is quiet; bfloat16 -> float32 is a
// plain shift.

// Float32ToFloat16 rounds f to IEEE binary16 bits.
func Float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	if f != f {
		return sign | 0x7e00 | uint16(b>>13)&0x3ff
	}
	a := math.Abs(float64(f))
	if a < 0x1p-14 { // subnormal range: multiples of 2^-24
		return sign | uint16(math.RoundToEven(a*0x1p24))
	}
	if math.IsInf(a, 0) {
		return sign | 0x7c00
	}
	frac, exp := math.Frexp(a) // a = frac * 2^exp, frac in [0.5, 1)
	e := exp - 1
	q := math.RoundToEven((frac*2 - 1) * 1024)
	if q == 1024 {
		q, e = 0, e+1
	}
	if e > 15 {
		return sign | 0x7c00
	}
	return sign | uint16(e+15)<<10 | uint16(q)
}

// Float16ToFloat32 widens IEEE binary16 bits exactly.
func Float16ToFloat32(h uint16) float32 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0x1f:
		if m == 0 {
			return float32(math.Inf(int(sign)))
		}
		return math.Float32frombits(uint32(h&0x8000)<<16 | 0x7fc00000 | uint32(h&0x3ff)<<13)
	case 0:
		return float32(sign * m * 0x1p-24)
	}
	return float32(sign * (1 + m/1024) * math.Ldexp(1, e-15))
}

// Float32ToBFloat16 rounds f to bfloat16 bits.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	if f != f {
		return uint16(b>>16) | 0x40
	}
	a := math.Abs(float64(f))
	if a < 0x1p-126 { // subnormal range: multiples of 2^-133
		return sign | uint16(math.RoundToEven(a*0x1p133))
	}
	if math.IsInf(a, 0) {
		return sign | 0x7f80
	}
	frac, exp := math.Frexp(a)
	e := exp - 1
	q := math.RoundToEven((frac*2 - 1) * 128)
	if q == 128 {
		q, e = 0, e+1
	}
	if e > 127 {
		return sign | 0x7f80
	}
	return sign | uint16(e+127)<<7 | uint16(q)
}

// BFloat16ToFloat32 widens bfloat16 bits exactly.
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// ToHalfPrecision rounds v to the nearest value representable in dt (Float16 or
// BFloat16) and returns it as a float32; other dtypes return v unchanged.
func ToHalfPrecision(dt DType, v float32) float32 {
	switch dt {
	case Float16:
		return Float16ToFloat32(Float32ToFloat16(v))
	case BFloat16:
		return BFloat16ToFloat32(Float32ToBFloat16(v))
	}
	return v
}
