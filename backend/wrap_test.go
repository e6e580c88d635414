package backend

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wrapOnly returns a wrapped tensor over a fresh slice of n ones and the
// slice's address, keeping no reference to the slice itself.
func wrapOnly(t *testing.T, n int) (*tensor.Tensor, uintptr) {
	data := make([]float32, n)
	for i := range data {
		data[i] = 1
	}
	x, err := tensor.WrapFloat32(data)
	require.NoError(t, err)
	return x, uintptr(unsafe.Pointer(&data[0]))
}

// TestKernelsOnGoMemory: the kernels run on a wrapped Go slice in place
// (no copy: the tensor's address is the slice's, the slice sees the
// result), across the pool's threaded path, with a garbage collection
// between the wrap and the call; run with -race, which turns checkptr on,
// and the runtime's cgo pointer check active.
func TestKernelsOnGoMemory(t *testing.T) {
	b, err := NewCPU(2)
	require.NoError(t, err)
	defer b.Close()
	const n = 100003 // above the inline threshold: the pool's workers run it
	x, addr := wrapOnly(t, n)
	defer x.Free()
	runtime.GC()
	require.Equal(t, addr, uintptr(x.Ptr()), "wrapped tensor at %p, slice at %#x", x.Ptr(), addr)
	require.NoError(t, b.Scale([]*tensor.Tensor{x}, 3))
	ss, err := b.SumSquares([]*tensor.Tensor{x}, nil)
	assert.NoError(t, err, "SumSquares after Scale(3)")
	assert.Equal(t, float64(9*n), ss, "SumSquares after Scale(3)")

	bits := make([]uint16, n)
	h, err := tensor.WrapUint16(tensor.BFloat16, bits)
	require.NoError(t, err)
	defer h.Free()
	require.NoError(t, b.Cast([]*tensor.Tensor{h}, []*tensor.Tensor{x}))
	// compared in the loop: require.Equal on 100003 values would print them all
	for i, v := range bits {
		if v != tensor.Float32ToBFloat16(3) {
			require.Failf(t, "cast into the wrapped slice", "bits[%d] = %#x after casting 3 into the wrapped slice, want %#x", i, v, tensor.Float32ToBFloat16(3))
		}
	}
	// one element past a large allocation's page-aligned start: 4-byte but
	// not 64-byte aligned, which the kernels' unaligned loads accept
	odd := make([]float32, n+1)[1:]
	require.NotZero(t, uintptr(unsafe.Pointer(&odd[0]))%tensor.HostAlign, "test slice is %d-byte aligned; want it off a cache line", tensor.HostAlign)
	y, err := tensor.WrapFloat32(odd)
	require.NoError(t, err)
	defer y.Free()
	require.NoError(t, b.Axpy(2, []*tensor.Tensor{x}, []*tensor.Tensor{y}))
	for i, v := range odd {
		if v != 6 {
			require.Failf(t, "axpy into the misaligned slice", "odd[%d] = %v after Axpy(2, 3s) into the misaligned slice, want 6", i, v)
		}
	}
}
