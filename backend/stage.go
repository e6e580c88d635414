package backend

import (
	"context"

	"github.com/deepgo-ml/deepgo/tensor"
)

// HostStager is what a backend offers beyond Copy for moving data between
// the host and its device: host memory the device copies fastest, and
// copies that run while the caller goes on issuing work. Callers use the
// package functions HostEmpty and CopyAsync, which fall back to
// tensor.Empty and a synchronous Copy on a backend without it.
type HostStager interface {
	// HostEmpty allocates a zeroed tensor in host memory the device copies
	// to and from fastest: page-locked (cudaHostAlloc) on CUDA, aligned
	// host memory on the CPU and simulated devices. Its Free releases it.
	HostEmpty(dt tensor.DType, shape ...int) (*tensor.Tensor, error)
	// CopyAsync starts copying src into dst (Copy's rules on dtypes, sizes
	// and devices; one side in host memory, the other on Device()). The
	// copy is ordered after the work issued on this backend so far and
	// runs on a stream of its own; neither tensor may be read, written or
	// freed until the returned Copying's Wait has returned, and work that
	// reads dst on the device must be issued after it.
	CopyAsync(dst, src *tensor.Tensor) (Copying, error)
}

// Copying is a copy CopyAsync started.
type Copying interface {
	// Done reports, without blocking, whether the copy has finished.
	Done() bool
	// Wait blocks until the copy has finished, or ctx ends, and returns its
	// error (a device's sticky error included).
	Wait(ctx context.Context) error
}

// Copied is the Copying of a copy that finished before CopyAsync returned,
// with its error.
type Copied struct{ Err error }

// Done is true: the copy is over.
func (c Copied) Done() bool { return true }

// Wait returns the copy's error.
func (c Copied) Wait(context.Context) error { return c.Err }

// HostEmpty allocates host memory for copies to and from b's device: b's
// HostEmpty when b is a HostStager, else tensor.Empty.
func HostEmpty(b Backend, dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	if h, ok := b.(HostStager); ok {
		return h.HostEmpty(dt, shape...)
	}
	return tensor.Empty(dt, shape...)
}

// CopyAsync starts copying src into dst with b's CopyAsync when b is a
// HostStager; otherwise it copies with Copy and returns the finished copy.
func CopyAsync(b Backend, dst, src *tensor.Tensor) (Copying, error) {
	if h, ok := b.(HostStager); ok {
		return h.CopyAsync(dst, src)
	}
	if err := b.Copy(dst, src); err != nil {
		return nil, err
	}
	return Copied{}, nil
}

var _ HostStager = (*CPU)(nil)

// HostEmpty allocates an aligned host tensor (tensor.Empty): on the host
// every copy is a memcpy, there is nothing to pin. A view of another
// device (package sim) allocates the same.
func (b *CPU) HostEmpty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	return tensor.Empty(dt, shape...)
}

// CopyAsync copies at once: CPU kernels are synchronous, so the copy is
// over when it returns. A view's copy is its Copy, in the view's order.
func (b *CPU) CopyAsync(dst, src *tensor.Tensor) (Copying, error) {
	if err := b.Copy(dst, src); err != nil {
		return nil, err
	}
	return Copied{}, nil
}
