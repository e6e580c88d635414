//go:build cuda

package cuda

/*
#include "deepgo_cuda.h"
*/
import "C"

import (
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

var _ backend.Quantizer = (*Backend)(nil)

// QuantizeInt8 quantizes x on the device (backend.Quantizer; quant.cu,
// the C core's bits).
func (b *Backend) QuantizeInt8(q, scales, x *tensor.Tensor) error {
	const op = "QuantizeInt8"
	if err := backend.CheckQuant(op, "x", x, q, scales, b.Device()); err != nil || x.Numel() == 0 {
		return err
	}
	return b.run("dg_cuda_quantize_i8", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_quantize_i8(ctx, cdt(x.DType()), x.Ptr(), (*C.int8_t)(q.Ptr()), fptr(scales.Ptr()),
			c64(x.Numel()), c64(scales.Numel()))
	})
}

// DequantizeInt8 dequantizes q into y on the device (backend.Quantizer).
func (b *Backend) DequantizeInt8(y, q, scales *tensor.Tensor) error {
	const op = "DequantizeInt8"
	if err := backend.CheckQuant(op, "y", y, q, scales, b.Device()); err != nil || y.Numel() == 0 {
		return err
	}
	return b.run("dg_cuda_dequantize_i8", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_dequantize_i8(ctx, cdt(y.DType()), (*C.int8_t)(q.Ptr()), fptr(scales.Ptr()), y.Ptr(),
			c64(y.Numel()), c64(scales.Numel()))
	})
}
