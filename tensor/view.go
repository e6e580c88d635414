package tensor

import (
	"fmt"
	"unsafe"
)

// Reshape views a contiguous tensor with a new shape of the same size. One
// dimension may be -1 and is inferred.
func (t *Tensor) Reshape(shape ...int) (*Tensor, error) {
	if !t.Contiguous() {
		return nil, fmt.Errorf("tensor.Reshape: %v is not contiguous", t)
	}
	shape = append([]int(nil), shape...)
	infer, known := -1, 1
	for i, d := range shape {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 0:
			return nil, fmt.Errorf("tensor.Reshape: shape[%d] = %d: must be >= 0 (one -1 allowed)", i, d)
		default:
			known *= d
		}
	}
	n := t.Numel()
	if infer >= 0 {
		if known == 0 || n%known != 0 {
			return nil, fmt.Errorf("tensor.Reshape: cannot infer shape[%d] of %v for %d elements", infer, shape, n)
		}
		shape[infer] = n / known
		known = n
	}
	if known != n {
		return nil, fmt.Errorf("tensor.Reshape: shape %v has %d elements, tensor %v has %d", shape, known, t, n)
	}
	return &Tensor{dtype: t.dtype, shape: shape, strides: contiguousStrides(shape), storage: t.storage, offset: t.offset}, nil
}

// Slice views elements [start, start+n) of a contiguous tensor as 1-D.
func (t *Tensor) Slice(start, n int) (*Tensor, error) {
	if !t.Contiguous() {
		return nil, fmt.Errorf("tensor.Slice: %v is not contiguous", t)
	}
	if start < 0 || n < 0 || start+n > t.Numel() {
		return nil, fmt.Errorf("tensor.Slice: [%d, %d) out of range for %d elements", start, start+n, t.Numel())
	}
	return &Tensor{dtype: t.dtype, shape: []int{n}, strides: []int{1}, storage: t.storage, offset: t.offset + start}, nil
}

// Narrow views length entries of dimension dim starting at start.
func (t *Tensor) Narrow(dim, start, length int) (*Tensor, error) {
	if dim < 0 || dim >= len(t.shape) {
		return nil, fmt.Errorf("tensor.Narrow: dim = %d: must be in [0, %d)", dim, len(t.shape))
	}
	if start < 0 || length < 0 || start+length > t.shape[dim] {
		return nil, fmt.Errorf("tensor.Narrow: [%d, %d) out of range for dim %d of size %d", start, start+length, dim, t.shape[dim])
	}
	shape := t.Shape()
	shape[dim] = length
	return &Tensor{dtype: t.dtype, shape: shape, strides: t.Strides(), storage: t.storage, offset: t.offset + start*t.strides[dim]}, nil
}

func (t *Tensor) hostDense(op string, want ...DType) error {
	if !t.Device().IsCPU() {
		return fmt.Errorf("tensor.%s: %v is not in host memory", op, t)
	}
	if !t.Contiguous() {
		return fmt.Errorf("tensor.%s: %v is not contiguous", op, t)
	}
	if t.storage.Freed() {
		return fmt.Errorf("tensor.%s: %v: %w", op, t, ErrFreed)
	}
	for _, d := range want {
		if t.dtype == d {
			return nil
		}
	}
	return fmt.Errorf("tensor.%s: %v has dtype %v, want %v", op, t, t.dtype, want)
}

// Float32s views a contiguous host float32 tensor as a Go slice, valid until
// the storage is freed.
func (t *Tensor) Float32s() ([]float32, error) {
	if err := t.hostDense("Float32s", Float32); err != nil {
		return nil, err
	}
	return unsafe.Slice((*float32)(t.Ptr()), t.Numel()), nil
}

// Float64s views a contiguous host float64 tensor as a Go slice.
func (t *Tensor) Float64s() ([]float64, error) {
	if err := t.hostDense("Float64s", Float64); err != nil {
		return nil, err
	}
	return unsafe.Slice((*float64)(t.Ptr()), t.Numel()), nil
}

// Uint16s views a contiguous host float16 or bfloat16 tensor as its raw bits.
func (t *Tensor) Uint16s() ([]uint16, error) {
	if err := t.hostDense("Uint16s", Float16, BFloat16); err != nil {
		return nil, err
	}
	return unsafe.Slice((*uint16)(t.Ptr()), t.Numel()), nil
}

// Int32s views a contiguous host int32 tensor as a Go slice.
func (t *Tensor) Int32s() ([]int32, error) {
	if err := t.hostDense("Int32s", Int32); err != nil {
		return nil, err
	}
	return unsafe.Slice((*int32)(t.Ptr()), t.Numel()), nil
}

// Int64s views a contiguous host int64 tensor as a Go slice.
func (t *Tensor) Int64s() ([]int64, error) {
	if err := t.hostDense("Int64s", Int64); err != nil {
		return nil, err
	}
	return unsafe.Slice((*int64)(t.Ptr()), t.Numel()), nil
}

// RawBytes views a contiguous host tensor of any dtype as bytes.
func (t *Tensor) RawBytes() ([]byte, error) {
	if err := t.hostDense("RawBytes", t.dtype); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(t.Ptr()), t.Bytes()), nil
}
