package tensor

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWrapShares: a wrapped slice and its tensor are one memory (no copy),
// both ways; Free unregisters it and leaves the slice intact Go memory.
func TestWrapShares(t *testing.T) {
	data := []float32{1, 2, 3, 4, 5, 6}
	x, err := WrapFloat32(data, 2, 3)
	require.NoError(t, err)
	require.Equal(t, unsafe.Pointer(&data[0]), x.Ptr(), "wrapped %v: not the slice's memory", x)
	require.Equal(t, "float32[2 3]@cpu", x.String())
	v, _ := x.Float32s()
	v[4] = 50
	data[1] = 20
	assert.Equal(t, float32(50), data[4], "writes not shared: data %v, tensor %v", data, v)
	assert.Equal(t, float32(20), v[1], "writes not shared: data %v, tensor %v", data, v)
	require.NoError(t, x.Free())
	// Same: the sentinel itself, as the == this replaced demanded.
	assert.Same(t, ErrFreed, x.Free(), "second Free")
	wrapped.Lock()
	n := len(wrapped.live)
	wrapped.Unlock()
	assert.Zero(t, n, "wrapped storages registered after Free")
	assert.Equal(t, float32(50), data[4], "after Free: data %v", data)
	assert.Nil(t, x.Ptr(), "Ptr after Free")

	h := []uint16{0x3c00, 0x4000}
	y, err := WrapUint16(BFloat16, h)
	if assert.NoError(t, err, "WrapUint16") {
		assert.Equal(t, unsafe.Pointer(&h[0]), y.Ptr(), "WrapUint16 = %v: not the slice's memory", y)
		assert.Equal(t, BFloat16, y.DType(), "WrapUint16 = %v", y)
	}
	y.Free()
	ids := []int32{7, 8, 9}
	z, err := WrapInt32(ids)
	if assert.NoError(t, err, "WrapInt32") {
		assert.Equal(t, unsafe.Pointer(&ids[0]), z.Ptr(), "WrapInt32 = %v: not the slice's memory", z)
		assert.Equal(t, 3, z.Numel(), "WrapInt32 = %v", z)
	}
	z.Free()
	e, err := WrapFloat32(nil, 0, 4)
	if assert.NoError(t, err, "WrapFloat32(nil, 0, 4)") {
		assert.Zero(t, e.Numel(), "WrapFloat32(nil, 0, 4) = %v: want a live empty tensor", e)
		assert.NotNil(t, e.Ptr(), "WrapFloat32(nil, 0, 4) = %v: want a live empty tensor", e)
	}
	e.Free()
}

func TestWrapErrors(t *testing.T) {
	buf := make([]byte, 64)
	odd := unsafe.Slice((*float32)(unsafe.Pointer(&buf[1])), 8) // element type without pointers: checkptr allows it
	cases := []struct {
		name string
		wrap func() (*Tensor, error)
		want string
	}{
		{"shape", func() (*Tensor, error) { return WrapFloat32(make([]float32, 6), 4, 2) }, "6 values for shape [4 2] (8 elements)"},
		{"negative", func() (*Tensor, error) { return WrapInt32(make([]int32, 6), -6) }, "shape[0] = -6"},
		{"dtype", func() (*Tensor, error) { return WrapUint16(Int32, make([]uint16, 2)) }, "dtype int32: allowed float16, bfloat16"},
		{"misaligned", func() (*Tensor, error) { return WrapFloat32(odd) }, "not aligned to its 4-byte elements"},
	}
	for _, c := range cases {
		x, err := c.wrap()
		assert.ErrorContains(t, err, c.want, "%s: %v", c.name, x)
	}
	wrapped.Lock()
	defer wrapped.Unlock()
	assert.Empty(t, wrapped.live, "storages registered by failed wraps")
}

// TestWrapUnfreed: a wrapped tensor dropped without Free leaks its slice
// (kept pinned and registered) instead of tripping runtime.Pinner's leak
// panic at garbage collection.
func TestWrapUnfreed(t *testing.T) {
	func() {
		_, err := WrapFloat32(make([]float32, 1<<12))
		require.NoError(t, err)
	}()
	for range 3 {
		runtime.GC()
	}
	wrapped.Lock()
	var left []*Storage
	for s := range wrapped.live {
		left = append(left, s)
	}
	wrapped.Unlock()
	require.Len(t, left, 1, "wrapped storages live: want the dropped one")
	require.NoError(t, left[0].Free())
}
