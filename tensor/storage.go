package tensor

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/deepgo-ml/deepgo/csrc"
)

// HostAlign is the alignment of host storage: a cache line, and a full
// AVX-512 vector.
const HostAlign = 64

// IOAlign is the alignment of host storage meant for O_DIRECT I/O.
const IOAlign = 4096

// ErrFreed is returned when a freed storage is used.
var ErrFreed = errors.New("tensor: storage already freed")

// Storage is one block of memory on one device. Host storage comes from the C
// core's aligned allocator; device storage from the CUDA allocator.
//
// Lifetime: a Storage lives until Free is called, and every Tensor viewing it
// (and every Go slice obtained from Float32s and friends) is valid only until
// then. There is no finalizer: a Go slice over C memory does not keep the
// Storage reachable, so freeing on garbage collection could free memory still
// in use. Whoever allocates frees, exactly once.
type Storage struct {
	ptr    unsafe.Pointer
	nbytes int
	device Device
	free   func(unsafe.Pointer)
	freed  atomic.Bool
	pin    *runtime.Pinner // Go memory (WrapFloat32 and friends), pinned until Free
	host   bool            // counted in HostMemory
}

// NewHostStorage allocates nbytes of zeroed host memory aligned to align
// (HostAlign, or IOAlign for direct I/O).
func NewHostStorage(nbytes, align int) (*Storage, error) {
	if nbytes < 0 {
		return nil, fmt.Errorf("tensor: NewHostStorage: nbytes = %d: must be >= 0", nbytes)
	}
	p, err := csrc.Alloc(nbytes, align)
	if err != nil {
		return nil, fmt.Errorf("tensor: NewHostStorage(%d bytes, align %d): %w", nbytes, align, err)
	}
	hostMem.Add(int64(nbytes))
	return &Storage{ptr: p, nbytes: nbytes, device: CPU, free: csrc.Free, host: true}, nil
}

// WrapStorage adopts memory allocated elsewhere (device memory, pinned host
// memory). free is called once by Free; nil means the caller keeps ownership.
// ptr must not be Go memory: the cgo rules forbid passing it to C unpinned,
// so the kernels would panic; WrapFloat32 and friends wrap Go slices.
func WrapStorage(ptr unsafe.Pointer, nbytes int, dev Device, free func(unsafe.Pointer)) *Storage {
	return &Storage{ptr: ptr, nbytes: nbytes, device: dev, free: free}
}

// Ptr is the start of the block; nil after Free.
func (s *Storage) Ptr() unsafe.Pointer {
	if s.freed.Load() {
		return nil
	}
	return s.ptr
}

// Bytes is the size of the block.
func (s *Storage) Bytes() int { return s.nbytes }

// Device is where the block lives.
func (s *Storage) Device() Device { return s.device }

// Freed reports whether Free has been called.
func (s *Storage) Freed() bool { return s.freed.Load() }

// Free releases the block. A second Free returns ErrFreed and does nothing.
func (s *Storage) Free() error {
	if !s.freed.CompareAndSwap(false, true) {
		return ErrFreed
	}
	if s.free != nil {
		s.free(s.ptr)
	}
	if s.host {
		hostMem.Add(-int64(s.nbytes))
	}
	if s.pin != nil {
		unpin(s)
	}
	return nil
}
