package nn

import (
	"fmt"
	"unsafe"

	"github.com/deepgo-ml/deepgo/tensor"
)

// Arena allocates activation and scratch buffers and counts them, so that
// activation memory is a measured number, not an estimate.
type Arena struct {
	bufs   []*tensor.Tensor
	bytes  int64
	allocs int
}

// Float32 allocates a zeroed float32 host tensor of shape and counts it.
func (a *Arena) Float32(shape ...int) (*tensor.Tensor, error) {
	return a.alloc(tensor.Float32, shape...)
}

// Int32 allocates a zeroed int32 host tensor of shape and counts it.
func (a *Arena) Int32(shape ...int) (*tensor.Tensor, error) {
	return a.alloc(tensor.Int32, shape...)
}

func (a *Arena) alloc(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	t, err := tensor.Empty(dt, shape...)
	if err != nil {
		return nil, fmt.Errorf("nn: activation buffer %v: %w", shape, err)
	}
	a.bufs = append(a.bufs, t)
	a.bytes += int64(t.Bytes())
	a.allocs++
	return t, nil
}

// Bytes is the total size of the live buffers.
func (a *Arena) Bytes() int64 { return a.bytes }

// Allocs is the number of live buffers.
func (a *Arena) Allocs() int { return a.allocs }

// Free releases every buffer; the arena can be reused.
func (a *Arena) Free() {
	for _, t := range a.bufs {
		t.Free()
	}
	a.bufs, a.bytes, a.allocs = nil, 0, 0
}

// ptr is t's address, nil for a nil tensor (an optional C argument).
func ptr(t *tensor.Tensor) unsafe.Pointer {
	if t == nil {
		return nil
	}
	return t.Ptr()
}

// need checks that t is a live contiguous float32 (or int32) host tensor of
// at least n elements: the C kernels trust their sizes.
func need(op, name string, t *tensor.Tensor, n int, dt tensor.DType) error {
	if t == nil {
		return fmt.Errorf("nn.%s: %s is nil", op, name)
	}
	if t.DType() != dt || !t.Contiguous() || !t.Device().IsCPU() || t.Ptr() == nil {
		return fmt.Errorf("nn.%s: %s is %v: want live contiguous %v host memory", op, name, t, dt)
	}
	if t.Numel() < n {
		return fmt.Errorf("nn.%s: %s has %d elements, need %d", op, name, t.Numel(), n)
	}
	return nil
}

// needAll runs need over (name, tensor, n) triples of float32 tensors and
// returns the first error.
func needF32(op string, args ...any) error {
	for i := 0; i+2 < len(args); i += 3 {
		t, _ := args[i+1].(*tensor.Tensor)
		if err := need(op, args[i].(string), t, args[i+2].(int), tensor.Float32); err != nil {
			return err
		}
	}
	return nil
}

// zero clears a float32 host tensor (gradient scratch before accumulation).
func zero(t *tensor.Tensor) {
	if f, err := t.Float32s(); err == nil {
		clear(f)
	}
}
