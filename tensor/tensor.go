// Package tensor holds deepgo's element types, devices, tensors over
// C-allocated storage, and flat buffers with per-parameter views (the unit
// ZeRO partitions).
//
// A Tensor is a strided view of a Storage. Its bytes live in C memory, so
// that the C core and CUDA can use them without the cgo pointer rules getting
// in the way, or in a Go slice pinned for the Storage's life (WrapFloat32 and
// friends); see Storage for the lifetime rule and Arena for buffers that die
// together.
package tensor

import (
	"fmt"
	"unsafe"
)

// Tensor is a view: dtype, shape, strides (in elements) and an element offset
// into a Storage. Views share storage; Free on any of them frees it for all.
type Tensor struct {
	dtype   DType
	shape   []int
	strides []int
	storage *Storage
	offset  int
}

func numel(shape []int) (int, error) {
	n := 1
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape[%d] = %d: must be >= 0", i, d)
		}
		n *= d
	}
	return n, nil
}

func contiguousStrides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// Empty allocates a zeroed, contiguous host tensor.
func Empty(dt DType, shape ...int) (*Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("tensor.Empty: dtype %v: not a valid dtype", dt)
	}
	n, err := numel(shape)
	if err != nil {
		return nil, fmt.Errorf("tensor.Empty: %w", err)
	}
	st, err := NewHostStorage(n*dt.Size(), HostAlign)
	if err != nil {
		return nil, err
	}
	return FromStorage(st, dt, 0, shape...)
}

// FromStorage views st as a contiguous tensor of shape starting at element
// offset off (in units of dt).
func FromStorage(st *Storage, dt DType, off int, shape ...int) (*Tensor, error) {
	if st == nil {
		return nil, fmt.Errorf("tensor.FromStorage: storage is nil")
	}
	if !dt.Valid() {
		return nil, fmt.Errorf("tensor.FromStorage: dtype %v: not a valid dtype", dt)
	}
	n, err := numel(shape)
	if err != nil {
		return nil, fmt.Errorf("tensor.FromStorage: %w", err)
	}
	if off < 0 || (off+n)*dt.Size() > st.Bytes() {
		return nil, fmt.Errorf("tensor.FromStorage: elements [%d, %d) of %v exceed storage of %d bytes", off, off+n, dt, st.Bytes())
	}
	return &Tensor{dtype: dt, shape: append([]int(nil), shape...), strides: contiguousStrides(shape), storage: st, offset: off}, nil
}

// FromFloat32 copies data into a new host float32 tensor of the given shape
// (1-D when shape is empty). WrapFloat32 shares data instead.
func FromFloat32(data []float32, shape ...int) (*Tensor, error) {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	t, err := Empty(Float32, shape...)
	if err != nil {
		return nil, err
	}
	if t.Numel() != len(data) {
		t.Free()
		return nil, fmt.Errorf("tensor.FromFloat32: %d values for shape %v (%d elements)", len(data), shape, t.Numel())
	}
	dst, _ := t.Float32s()
	copy(dst, data)
	return t, nil
}

// DType is the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns a copy of the shape.
func (t *Tensor) Shape() []int { return append([]int(nil), t.shape...) }

// Strides returns a copy of the strides, in elements.
func (t *Tensor) Strides() []int { return append([]int(nil), t.strides...) }

// Dim is the number of dimensions.
func (t *Tensor) Dim() int { return len(t.shape) }

// Numel is the number of elements.
func (t *Tensor) Numel() int {
	n, _ := numel(t.shape)
	return n
}

// Bytes is Numel times the element size.
func (t *Tensor) Bytes() int { return t.Numel() * t.dtype.Size() }

// Offset is the element offset of the view into its storage.
func (t *Tensor) Offset() int { return t.offset }

// Storage is the block the view looks into.
func (t *Tensor) Storage() *Storage { return t.storage }

// Device is where the tensor's memory lives.
func (t *Tensor) Device() Device { return t.storage.Device() }

// Contiguous reports whether the view is dense in row-major order.
func (t *Tensor) Contiguous() bool {
	want := 1
	for i := len(t.shape) - 1; i >= 0; i-- {
		if t.shape[i] != 1 && t.strides[i] != want {
			return false
		}
		want *= t.shape[i]
	}
	return true
}

// Ptr is the address of the first element, nil if the storage was freed.
func (t *Tensor) Ptr() unsafe.Pointer {
	p := t.storage.Ptr()
	if p == nil {
		return nil
	}
	return unsafe.Add(p, t.offset*t.dtype.Size())
}

// Free frees the storage under the view (and so every view sharing it).
func (t *Tensor) Free() error { return t.storage.Free() }

// String is a short description, e.g. "float32[4 8]@cpu".
func (t *Tensor) String() string {
	return fmt.Sprintf("%v%v@%v", t.dtype, t.shape, t.Device())
}
