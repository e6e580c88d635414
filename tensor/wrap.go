package tensor

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Tensors over Go memory. The C kernels take lists of data pointers held in
// Go slices, and the cgo rules allow a Go pointer there only when the
// memory it points to is pinned (runtime.Pinner): the runtime checks, and
// panics on an unpinned one. So a wrapped slice is pinned from the wrap
// until Free. A pinned object may also be kept by C past a call (an
// asynchronous collective), which the kernels' callers rely on for C
// memory already.
//
// An unreachable runtime.Pinner that still pins something makes the
// runtime panic. The registry keeps every wrapped Storage reachable until
// Free instead, so that an unfreed wrapped tensor leaks its slice, exactly
// as an unfreed C tensor leaks its block, and never frees or unpins memory
// a C call may still use.
var wrapped = struct {
	sync.Mutex
	live map[*Storage]struct{}
}{live: map[*Storage]struct{}{}}

func unpin(s *Storage) {
	wrapped.Lock()
	delete(wrapped.live, s)
	wrapped.Unlock()
	s.pin.Unpin()
}

// WrapFloat32 views data as a host float32 tensor of shape (1-D when shape
// is empty) without copying: the tensor, the kernels run on it and data are
// the same memory. An empty data has nothing to share and gets a fresh
// empty tensor.
//
// data stays pinned, and reachable, until the tensor's Free, which is due
// exactly once as for any tensor; Free hands nothing to C's allocator, and
// data remains ordinary Go memory afterwards. The C kernels need their
// arguments aligned only to the element size, as a Go []float32 always is
// (they use unaligned vector loads; a HostAlign-aligned start is merely
// faster). A slice built with unsafe at an odd address is refused, as is a
// shape whose size is not len(data).
func WrapFloat32(data []float32, shape ...int) (*Tensor, error) {
	return wrapGo("WrapFloat32", Float32, data, shape)
}

// WrapInt32 is WrapFloat32 for int32 data (token ids).
func WrapInt32(data []int32, shape ...int) (*Tensor, error) {
	return wrapGo("WrapInt32", Int32, data, shape)
}

// WrapUint16 is WrapFloat32 for the raw bits of a float16 or bfloat16
// tensor; dt says which.
func WrapUint16(dt DType, data []uint16, shape ...int) (*Tensor, error) {
	if dt != Float16 && dt != BFloat16 {
		return nil, fmt.Errorf("tensor.WrapUint16: dtype %v: allowed float16, bfloat16", dt)
	}
	return wrapGo("WrapUint16", dt, data, shape)
}

func wrapGo[E float32 | int32 | uint16](op string, dt DType, data []E, shape []int) (*Tensor, error) {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	n, err := numel(shape)
	if err != nil {
		return nil, fmt.Errorf("tensor.%s: %w", op, err)
	}
	if n != len(data) {
		return nil, fmt.Errorf("tensor.%s: %d values for shape %v (%d elements)", op, len(data), shape, n)
	}
	if n == 0 {
		return Empty(dt, shape...)
	}
	p := unsafe.Pointer(unsafe.SliceData(data))
	if a := uintptr(p) % uintptr(dt.Size()); a != 0 {
		return nil, fmt.Errorf("tensor.%s: data starts at %#x, not aligned to its %d-byte elements: the kernels need element alignment", op, uintptr(p), dt.Size())
	}
	st := &Storage{ptr: p, nbytes: n * dt.Size(), device: CPU, pin: new(runtime.Pinner)}
	st.pin.Pin(p)
	wrapped.Lock()
	wrapped.live[st] = struct{}{}
	wrapped.Unlock()
	return FromStorage(st, dt, 0, shape...)
}
