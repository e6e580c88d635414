package tensor

import (
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// TestWrapShares: a wrapped slice and its tensor are one memory (no copy),
// both ways; Free unregisters it and leaves the slice intact Go memory.
func TestWrapShares(t *testing.T) {
	data := []float32{1, 2, 3, 4, 5, 6}
	x, err := WrapFloat32(data, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if x.Ptr() != unsafe.Pointer(&data[0]) || x.String() != "float32[2 3]@cpu" {
		t.Fatalf("wrapped %v at %p, data at %p", x, x.Ptr(), &data[0])
	}
	v, _ := x.Float32s()
	v[4] = 50
	data[1] = 20
	if data[4] != 50 || v[1] != 20 {
		t.Errorf("writes not shared: data %v, tensor %v", data, v)
	}
	if err := x.Free(); err != nil {
		t.Fatal(err)
	}
	if err := x.Free(); err != ErrFreed {
		t.Errorf("second Free = %v, want ErrFreed", err)
	}
	wrapped.Lock()
	n := len(wrapped.live)
	wrapped.Unlock()
	if n != 0 {
		t.Errorf("%d wrapped storages registered after Free", n)
	}
	if data[4] != 50 || x.Ptr() != nil {
		t.Errorf("after Free: data %v, Ptr %p", data, x.Ptr())
	}

	h := []uint16{0x3c00, 0x4000}
	y, err := WrapUint16(BFloat16, h)
	if err != nil || y.Ptr() != unsafe.Pointer(&h[0]) || y.DType() != BFloat16 {
		t.Errorf("WrapUint16 = %v, %v", y, err)
	}
	y.Free()
	ids := []int32{7, 8, 9}
	z, err := WrapInt32(ids)
	if err != nil || z.Ptr() != unsafe.Pointer(&ids[0]) || z.Numel() != 3 {
		t.Errorf("WrapInt32 = %v, %v", z, err)
	}
	z.Free()
	e, err := WrapFloat32(nil, 0, 4)
	if err != nil || e.Numel() != 0 || e.Ptr() == nil {
		t.Errorf("WrapFloat32(nil, 0, 4) = %v, %v: want a live empty tensor", e, err)
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
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, %v; want an error containing %q", c.name, x, err, c.want)
		}
	}
	wrapped.Lock()
	defer wrapped.Unlock()
	if len(wrapped.live) != 0 {
		t.Errorf("%d storages registered by failed wraps", len(wrapped.live))
	}
}

// TestWrapUnfreed: a wrapped tensor dropped without Free leaks its slice
// (kept pinned and registered) instead of tripping runtime.Pinner's leak
// panic at garbage collection.
func TestWrapUnfreed(t *testing.T) {
	func() {
		if _, err := WrapFloat32(make([]float32, 1<<12)); err != nil {
			t.Fatal(err)
		}
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
	if len(left) != 1 {
		t.Fatalf("%d wrapped storages live, want the dropped one", len(left))
	}
	if err := left[0].Free(); err != nil {
		t.Fatal(err)
	}
}
