// Package commtest holds the reference data and results the tests of the
// comm backends (local, mpi, gloo) check against, so that every backend
// is held to one definition.
package commtest

import (
	"math"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Input is element i of rank r's input: a value exactly representable in
// dt, with varied signs and magnitudes (2^-4 .. 2^3) so that float32 sums
// round.
func Input(dt tensor.DType, r, i int) float64 {
	x := math.Sin(float64(r)*1.37+float64(i)*0.731) * math.Ldexp(1, (i*3+r)%8-4)
	switch dt {
	case tensor.Float32:
		return float64(float32(x))
	case tensor.Int32, tensor.Int64:
		return math.Round(x * 100)
	case tensor.Uint8:
		return float64(uint8(r*31 + i))
	}
	return float64(tensor.ToHalfPrecision(dt, float32(x)))
}

// Set writes vals (exactly representable) into x.
func Set(x *tensor.Tensor, vals func(i int) float64) {
	switch x.DType() {
	case tensor.Float32:
		s, _ := x.Float32s()
		for i := range s {
			s[i] = float32(vals(i))
		}
	case tensor.Float16, tensor.BFloat16:
		s, _ := x.Uint16s()
		for i := range s {
			if x.DType() == tensor.Float16 {
				s[i] = tensor.Float32ToFloat16(float32(vals(i)))
			} else {
				s[i] = tensor.Float32ToBFloat16(float32(vals(i)))
			}
		}
	case tensor.Int32:
		s, _ := x.Int32s()
		for i := range s {
			s[i] = int32(vals(i))
		}
	case tensor.Int64:
		s, _ := x.Int64s()
		for i := range s {
			s[i] = int64(vals(i))
		}
	default:
		b, _ := x.RawBytes()
		for i := range b {
			b[i] = byte(vals(i))
		}
	}
}

// Get reads element i of x as float64, and its raw bits.
func Get(x *tensor.Tensor, i int) (float64, uint64) {
	switch x.DType() {
	case tensor.Float32:
		s, _ := x.Float32s()
		return float64(s[i]), uint64(math.Float32bits(s[i]))
	case tensor.Float16:
		s, _ := x.Uint16s()
		return float64(tensor.Float16ToFloat32(s[i])), uint64(s[i])
	case tensor.BFloat16:
		s, _ := x.Uint16s()
		return float64(tensor.BFloat16ToFloat32(s[i])), uint64(s[i])
	case tensor.Int32:
		s, _ := x.Int32s()
		return float64(s[i]), uint64(s[i])
	case tensor.Int64:
		s, _ := x.Int64s()
		return float64(s[i]), uint64(s[i])
	}
	b, _ := x.RawBytes()
	return float64(b[i]), uint64(b[i])
}

// Model is what the C core must produce, bit for bit: the rank-ordered
// float32 reduction, rounded once to dt; Avg multiplies by float32(1/n) after
// that rounding.
func Model(dt tensor.DType, op comm.ReduceOp, xs []float64) float64 {
	if dt == tensor.Int32 || dt == tensor.Int64 {
		return Exact(op, xs)
	}
	acc := float32(xs[0])
	for _, x := range xs[1:] {
		switch op {
		case comm.Sum, comm.Avg:
			acc += float32(x)
		case comm.Max:
			acc = max(acc, float32(x))
		case comm.Min:
			acc = min(acc, float32(x))
		}
	}
	acc = tensor.ToHalfPrecision(dt, acc)
	if op == comm.Avg && len(xs) > 1 {
		acc = tensor.ToHalfPrecision(dt, acc*(1/float32(len(xs))))
	}
	return float64(acc)
}

// Exact is the exact (float64) reduction.
func Exact(op comm.ReduceOp, xs []float64) float64 {
	acc := xs[0]
	for _, x := range xs[1:] {
		switch op {
		case comm.Sum, comm.Avg:
			acc += x
		case comm.Max:
			acc = math.Max(acc, x)
		case comm.Min:
			acc = math.Min(acc, x)
		}
	}
	if op == comm.Avg {
		acc /= float64(len(xs))
	}
	return acc
}
