package backend

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/deepgo-ml/deepgo/tensor"
)

// wrapOnly returns a wrapped tensor over a fresh slice of n ones and the
// slice's address, keeping no reference to the slice itself.
func wrapOnly(t *testing.T, n int) (*tensor.Tensor, uintptr) {
	data := make([]float32, n)
	for i := range data {
		data[i] = 1
	}
	x, err := tensor.WrapFloat32(data)
	if err != nil {
		t.Fatal(err)
	}
	return x, uintptr(unsafe.Pointer(&data[0]))
}

// TestKernelsOnGoMemory: the kernels run on a wrapped Go slice in place
// (no copy: the tensor's address is the slice's, the slice sees the
// result), across the pool's threaded path, with a garbage collection
// between the wrap and the call; run with -race, which turns checkptr on,
// and the runtime's cgo pointer check active.
func TestKernelsOnGoMemory(t *testing.T) {
	b, err := NewCPU(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n = 100003 // above the inline threshold: the pool's workers run it
	x, addr := wrapOnly(t, n)
	defer x.Free()
	runtime.GC()
	if uintptr(x.Ptr()) != addr {
		t.Fatalf("wrapped tensor at %p, slice at %#x", x.Ptr(), addr)
	}
	if err := b.Scale([]*tensor.Tensor{x}, 3); err != nil {
		t.Fatal(err)
	}
	ss, err := b.SumSquares([]*tensor.Tensor{x}, nil)
	if err != nil || ss != 9*n {
		t.Errorf("SumSquares after Scale(3) = %v, %v; want %d", ss, err, 9*n)
	}

	bits := make([]uint16, n)
	h, err := tensor.WrapUint16(tensor.BFloat16, bits)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free()
	if err := b.Cast([]*tensor.Tensor{h}, []*tensor.Tensor{x}); err != nil {
		t.Fatal(err)
	}
	for i, v := range bits {
		if v != tensor.Float32ToBFloat16(3) {
			t.Fatalf("bits[%d] = %#x after casting 3 into the wrapped slice, want %#x", i, v, tensor.Float32ToBFloat16(3))
		}
	}
	// one element past a large allocation's page-aligned start: 4-byte but
	// not 64-byte aligned, which the kernels' unaligned loads accept
	odd := make([]float32, n+1)[1:]
	if a := uintptr(unsafe.Pointer(&odd[0])) % tensor.HostAlign; a == 0 {
		t.Fatalf("test slice is %d-byte aligned; want it off a cache line", tensor.HostAlign)
	}
	y, err := tensor.WrapFloat32(odd)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Free()
	if err := b.Axpy(2, []*tensor.Tensor{x}, []*tensor.Tensor{y}); err != nil {
		t.Fatal(err)
	}
	for i, v := range odd {
		if v != 6 {
			t.Fatalf("odd[%d] = %v after Axpy(2, 3s) into the misaligned slice, want 6", i, v)
		}
	}
}
