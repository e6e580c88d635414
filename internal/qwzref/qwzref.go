// Package qwzref is a plain-Go reference of ZeRO++ qwZ's weight
// quantization, DeepSpeed 0.19.8's CUDAQuantizer (symmetric, 8 bits, one
// scale per group): the tests of the C and CUDA kernels and of the stage-3
// engine compare against it. The arithmetic is float64 with a rounding to
// float32 exactly where DeepSpeed's kernel rounds (the multiplier, the
// scaled value, the stored scale, the dequantized product), then to
// float16, then to the model dtype.
package qwzref

import (
	"math"

	"github.com/deepgo-ml/deepgo/tensor"
)

// half rounds v (exact in float32) to float16 as torch's .to(torch.half).
func half(v float32) float64 {
	return float64(tensor.Float16ToFloat32(tensor.Float32ToFloat16(v)))
}

// Quantize quantizes x (values of the model dtype, widened to float32) in
// groups equal groups: DeepSpeed's quantize(param.to(half), groups, 8,
// Symmetric). It returns the int8 values and the per-group scales.
func Quantize(x []float32, groups int) ([]int8, []float32) {
	g := len(x) / groups
	q := make([]int8, len(x))
	scales := make([]float32, groups)
	for k := range groups {
		maxAbs := 0.0
		for _, v := range x[k*g : (k+1)*g] {
			if h := math.Abs(half(v)); h > maxAbs { // NaN skipped
				maxAbs = h
			}
		}
		mult := float32(1)
		if maxAbs != 0 {
			mult = float32(256 / (2 * maxAbs))
		}
		for i, v := range x[k*g : (k+1)*g] {
			p := float64(float32(half(v) * float64(mult)))
			r := 0.0
			if !math.IsNaN(p) {
				r = math.Max(-128, math.Min(127, math.RoundToEven(p)))
			}
			q[k*g+i] = int8(r)
		}
		scales[k] = float32(1 / float64(mult))
	}
	return q, scales
}

// Dequantize is DeepSpeed's dequantize(q, scales).to(dt): each group of
// len(q)/len(scales) values times its scale, rounded to float32 then
// float16 (the kernel's output), then to dt; widened to float32.
func Dequantize(dt tensor.DType, q []int8, scales []float32) []float32 {
	g := len(q) / len(scales)
	y := make([]float32, len(q))
	for i, v := range q {
		h := float32(half(float32(float64(v) * float64(scales[i/g]))))
		if dt == tensor.BFloat16 {
			h = tensor.BFloat16ToFloat32(tensor.Float32ToBFloat16(h))
		}
		y[i] = h
	}
	return y
}

// RoundTrip is Dequantize(dt, Quantize(x, groups)).
func RoundTrip(dt tensor.DType, x []float32, groups int) []float32 {
	q, s := Quantize(x, groups)
	return Dequantize(dt, q, s)
}
