//go:build cuda

package cuda

/*
#include "deepgo_cuda.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

var _ backend.HostStager = (*Backend)(nil)

// HostEmpty allocates a zeroed tensor in page-locked host memory
// (cudaHostAlloc): the DMA engine reads and writes it directly, so copies
// to and from it run at full bandwidth and CopyAsync overlaps them with
// kernels. Free it only once the copies using it have been waited for.
func (b *Backend) HostEmpty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("cuda.HostEmpty: dtype %v: not a valid dtype", dt)
	}
	n := 1
	for i, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("cuda.HostEmpty: shape[%d] = %d: must be >= 0", i, d)
		}
		n *= d
	}
	nbytes := n * dt.Size()
	var p unsafe.Pointer
	var cuerr C.int
	if err := callErr("HostEmpty", C.dg_cuda_host_alloc(C.int(b.dev), C.size_t(nbytes), &p, &cuerr), cuerr); err != nil {
		return nil, err
	}
	st := tensor.WrapStorage(p, nbytes, tensor.CPU, func(p unsafe.Pointer) {
		var cuerr C.int
		C.dg_cuda_host_free(p, &cuerr) // Storage.Free has no error to return
	})
	t, err := tensor.FromStorage(st, dt, 0, shape...)
	if err != nil {
		st.Free()
		return nil, err
	}
	return t, nil
}

// CopyAsync queues the copy on the backend's copy stream (a blocking
// stream, so frees on the device wait for it), after the work queued on
// its compute stream so far, and returns at once. From pageable host
// memory the copy is correct but may not overlap (see dg_cuda_copy_async);
// from HostEmpty's it does.
func (b *Backend) CopyAsync(dst, src *tensor.Tensor) (backend.Copying, error) {
	if _, _, err := backend.CheckCopy("CopyAsync", dst, src, b.Device()); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil {
		return nil, &Error{Op: "CopyAsync", Msg: "backend is closed"}
	}
	if b.copies == nil {
		s, err := NewStream(b.dev)
		if err != nil {
			return nil, fmt.Errorf("cuda.CopyAsync: the copy stream: %w", err)
		}
		b.copies = s
	}
	var done unsafe.Pointer
	st := C.dg_cuda_copy_async(b.ctx, b.copies.s, dst.Ptr(), src.Ptr(), C.size_t(src.Bytes()), &done)
	if err := b.err("dg_cuda_copy_async", st); err != nil {
		return nil, err
	}
	return &copying{dev: b.dev, ev: done}, nil
}

// copying is a CopyAsync in flight: the event recorded after it.
type copying struct {
	dev int
	mu  sync.Mutex
	ev  unsafe.Pointer // nil once complete and destroyed
	err error
}

// query reports whether the copy is complete, destroying its event then.
func (c *copying) query() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ev == nil {
		return true, c.err
	}
	var done, cuerr C.int
	if err := callErr("CopyAsync.Wait", C.dg_cuda_event_query(C.int(c.dev), c.ev, &done, &cuerr), cuerr); err != nil {
		c.err = err
	} else if done == 0 {
		return false, nil
	}
	C.dg_cuda_event_destroy(C.int(c.dev), c.ev, &cuerr)
	c.ev = nil
	return true, c.err
}

func (c *copying) Done() bool {
	ok, _ := c.query()
	return ok
}

func (c *copying) Wait(ctx context.Context) error { return poll(ctx, c.query) }
