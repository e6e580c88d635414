//go:build cuda

package cuda

/*
#include "deepgo_cuda.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/deepgo-ml/deepgo/tensor"
)

// DeviceCount reports the number of CUDA devices: 0, without an error, on
// a machine with no driver or no GPU. A driver older than this build's CUDA
// runtime is an error wrapping ErrDriverTooOld, naming both versions.
func DeviceCount() (int, error) {
	var n, cuerr C.int
	s := C.dg_cuda_device_count(&n, &cuerr)
	if err := callErr("DeviceCount", s, cuerr); err != nil {
		if cuerr == C.DG_CUDA_ERR_INSUFFICIENT_DRIVER {
			return 0, fmt.Errorf("%w: the driver supports CUDA %s, this build's runtime is CUDA %s "+
				"(update the driver, or build with an older CUDA toolkit): %w",
				ErrDriverTooOld, cudaVersion(DriverVersion()), cudaVersion(RuntimeVersion()), err)
		}
		return 0, err
	}
	return int(n), nil
}

// cudaVersion writes CUDA's 1000*major + 10*minor as "major.minor".
func cudaVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// Available reports whether at least one CUDA device can be used.
func Available() bool {
	n, err := DeviceCount()
	return err == nil && n > 0
}

func checkDevice(op string, dev int) error {
	n, err := DeviceCount()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNoDevice
	}
	if dev < 0 || dev >= n {
		return &Error{Op: op, Msg: fmt.Sprintf("device %d: this machine has devices 0..%d", dev, n-1)}
	}
	return nil
}

// Malloc allocates a zeroed, contiguous tensor on device dev. Free it with
// its Free method (tensor.Storage's lifetime rule applies). Neither waits
// for other work on the device: Malloc zeroes on a stream of its own, and
// the memory is released after the work already queued on every stream
// this package makes (see dg_cuda_malloc and dg_cuda_free).
func Malloc(dev int, dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("cuda.Malloc: dtype %v: not a valid dtype", dt)
	}
	n := 1
	for i, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("cuda.Malloc: shape[%d] = %d: must be >= 0", i, d)
		}
		n *= d
	}
	if err := checkDevice("Malloc", dev); err != nil {
		return nil, err
	}
	nbytes := n * dt.Size()
	var p unsafe.Pointer
	var cuerr C.int
	if err := callErr("Malloc", C.dg_cuda_malloc(C.int(dev), C.size_t(nbytes), &p, &cuerr), cuerr); err != nil {
		return nil, err
	}
	mem := memOf(dev)
	mem.Add(int64(nbytes))
	st := tensor.WrapStorage(p, nbytes, tensor.CUDA(dev), func(p unsafe.Pointer) {
		var cuerr C.int
		C.dg_cuda_free(C.int(dev), p, &cuerr) // Storage.Free has no error to return
		mem.Add(-int64(nbytes))
	})
	t, err := tensor.FromStorage(st, dt, 0, shape...)
	if err != nil {
		st.Free()
		return nil, err
	}
	return t, nil
}

// copyCheck validates a copy between two tensors of the same dtype and size.
func copyCheck(op string, dst, src *tensor.Tensor, dstCUDA bool) (int, error) {
	for _, a := range []struct {
		name string
		t    *tensor.Tensor
		cuda bool
	}{{"dst", dst, dstCUDA}, {"src", src, !dstCUDA}} {
		if a.t == nil {
			return 0, fmt.Errorf("cuda.%s: %s is nil", op, a.name)
		}
		if onCUDA := a.t.Device().Kind == tensor.KindCUDA; onCUDA != a.cuda {
			return 0, fmt.Errorf("cuda.%s: %s %v is on %v", op, a.name, a.t, a.t.Device())
		}
		if !a.t.Contiguous() || a.t.Storage().Freed() {
			return 0, fmt.Errorf("cuda.%s: %s %v is not contiguous or was freed", op, a.name, a.t)
		}
	}
	if dst.DType() != src.DType() || dst.Numel() != src.Numel() {
		return 0, fmt.Errorf("cuda.%s: dst %v and src %v differ in dtype or size", op, dst, src)
	}
	dev := dst.Device().Index
	if !dstCUDA {
		dev = src.Device().Index
	}
	return dev, nil
}

// CopyToDevice copies host tensor src into device tensor dst (same dtype and
// element count, both contiguous) and returns when the copy is complete. It
// is ordered after work already queued on any Backend's stream.
func CopyToDevice(dst, src *tensor.Tensor) error {
	dev, err := copyCheck("CopyToDevice", dst, src, true)
	if err != nil {
		return err
	}
	var cuerr C.int
	s := C.dg_cuda_memcpy(C.int(dev), dst.Ptr(), src.Ptr(), C.size_t(src.Bytes()), &cuerr)
	return callErr("CopyToDevice", s, cuerr)
}

// CopyToHost copies device tensor src into host tensor dst and returns when
// the copy is complete; it waits for work queued on any Backend's stream.
func CopyToHost(dst, src *tensor.Tensor) error {
	dev, err := copyCheck("CopyToHost", dst, src, false)
	if err != nil {
		return err
	}
	var cuerr C.int
	s := C.dg_cuda_memcpy(C.int(dev), dst.Ptr(), src.Ptr(), C.size_t(src.Bytes()), &cuerr)
	return callErr("CopyToHost", s, cuerr)
}
