package backend

import (
	"github.com/deepgo-ml/deepgo/tensor"
)

// Quantizer is ZeRO++ qwZ's weight quantizer: DeepSpeed's symmetric 8-bit
// CUDAQuantizer (one float32 scale per group of elements, every value
// rounded to float16 first; csrc/include/dg_quant_math.h has the element
// math). The CPU backend implements it on the C core (and its views, on the
// simulated device); cuda.Backend on a GPU. The int8 values live in a
// tensor.Uint8 tensor (the same bytes, two's complement).
type Quantizer interface {
	// QuantizeInt8 splits x (float32, float16 or bfloat16) into
	// scales.Numel() equal groups, which must divide x.Numel(), and writes
	// each element's int8 value into q (x.Numel() elements) and each
	// group's dequantization scale into scales (float32).
	QuantizeInt8(q, scales, x *tensor.Tensor) error
	// DequantizeInt8 is the inverse into y (float32, float16 or bfloat16;
	// q.Numel() elements): group k of the scales.Numel() equal groups of q
	// times scales[k], rounded to float16, then to y's dtype.
	DequantizeInt8(y, q, scales *tensor.Tensor) error
}

// CheckQuant validates the arguments of QuantizeInt8 (op "QuantizeInt8",
// x the float tensor) and DequantizeInt8 (y): all on dev, q uint8 and
// scales float32, q as long as the float tensor, a whole number of equal
// groups.
func CheckQuant(op, fname string, f, q, scales *tensor.Tensor, dev tensor.Device) error {
	for _, a := range []struct {
		name string
		t    *tensor.Tensor
	}{{fname, f}, {"q", q}, {"scales", scales}} {
		if err := CheckTensor(op, a.name, a.t, dev); err != nil {
			return err
		}
	}
	if err := CheckFloatDType(op, fname, f.DType()); err != nil {
		return err
	}
	if q.DType() != tensor.Uint8 {
		return ArgErr(op, "q", "dtype %v: want uint8 (int8 bits)", q.DType())
	}
	if scales.DType() != tensor.Float32 {
		return ArgErr(op, "scales", "dtype %v: want float32", scales.DType())
	}
	if q.Numel() != f.Numel() {
		return ArgErr(op, "q", "has %d elements, want %d like %s", q.Numel(), f.Numel(), fname)
	}
	if g := scales.Numel(); g < 1 || f.Numel()%g != 0 {
		return ArgErr(op, "scales", "%d groups do not split %d elements evenly", g, f.Numel())
	}
	return nil
}

var _ Quantizer = (*CPU)(nil)

// QuantizeInt8 quantizes x on the C core (see Quantizer).
func (b *CPU) QuantizeInt8(q, scales, x *tensor.Tensor) error {
	const op = "QuantizeInt8"
	if err := CheckQuant(op, "x", x, q, scales, b.dev); err != nil {
		return err
	}
	t, px, pq, ps, n, g := x.DType(), x.Ptr(), q.Ptr(), scales.Ptr(), int64(x.Numel()), int64(scales.Numel())
	return b.Exec(op, false, func() error { return b.ctx.QuantizeInt8(dt(t), px, pq, ps, n, g) })
}

// DequantizeInt8 dequantizes q into y on the C core (see Quantizer).
func (b *CPU) DequantizeInt8(y, q, scales *tensor.Tensor) error {
	const op = "DequantizeInt8"
	if err := CheckQuant(op, "y", y, q, scales, b.dev); err != nil {
		return err
	}
	t, py, pq, ps, n, g := y.DType(), y.Ptr(), q.Ptr(), scales.Ptr(), int64(y.Numel()), int64(scales.Numel())
	return b.Exec(op, false, func() error { return b.ctx.DequantizeInt8(dt(t), pq, ps, py, n, g) })
}
