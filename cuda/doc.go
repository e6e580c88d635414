// Package cuda runs deepgo's multi-tensor kernels on NVIDIA GPUs: device
// memory as tensor.Storage, host<->device copies, streams, events, and a
// Backend implementing backend.Backend with the same kernels, argument
// checks and result bits as the CPU backend (casts, scale, axpy, pack,
// unpack, nonfinite and reduce bit-exact; sum of squares deterministic and
// within ~1e-15 relative of the CPU's), and OptimKernels running optim's
// fused Adam/AdamW, SGD, Lamb and Lion steps and the unscale check with the
// CPU kernels' bits (Lamb's trust ratios included), and NNKernels running
// package nn's layer kernels (matmul on cuBLAS, layernorm, GELU, residual
// add, embedding, causal attention, softmax cross-entropy) with the CPU
// twins' layouts and summation orders (see NNKernels for what can differ).
//
// cuBLAS is not linked: the first matmul dlopens CuBLASSoname(), the
// major version of the cuBLAS headers compiled against (libcublas.so.13
// with the pinned wheels) from DEEPGO_CUBLAS_LIB, build/cuda/lib next to
// the executable, the loader's path, $CUDA_HOME/lib64 or
// /usr/local/cuda/lib64 (see deepgo_cuda.h).
//
// The CUDA code lives in this directory (*.cu, C ABI in deepgo_cuda.h) and is
// built by scripts/build-cuda.sh into build/cuda/libdeepgo_cuda.a, with the
// CUDA runtime linked statically from build/cuda/libcudart_static.a. The Go
// binding is compiled only with the build tag cuda:
//
//	make cuda                    # scripts/build-cuda.sh
//	go test -tags cuda ./cuda    # skips when the machine has no GPU
//
// Without the tag the package builds everywhere and every entry point
// returns ErrNoCUDA, so code can name these types unconditionally.
//
// Threads: every C call makes its device current on the calling OS thread
// before touching it, so a goroutine migrating between threads between two
// calls is harmless; code of its own that relies on the CUDA current device
// across calls (another binding, NCCL) must pin with runtime.LockOSThread.
package cuda

import (
	"errors"
	"fmt"
)

// ErrNoCUDA is returned by every entry point of a build without the cuda tag.
var ErrNoCUDA = errors.New("cuda: built without CUDA support (rebuild with -tags cuda after `make cuda`)")

// ErrNoDevice is returned when the build has CUDA but the machine has no
// usable device (no driver, or no GPU).
var ErrNoDevice = errors.New("cuda: no CUDA device (no NVIDIA driver or no GPU on this machine)")

// ErrDriverTooOld is wrapped by the error of DeviceCount (and of every
// constructor) on a machine whose NVIDIA driver is older than the CUDA
// runtime this build links: there is a GPU, but this build cannot use it.
var ErrDriverTooOld = errors.New("cuda: the NVIDIA driver is too old for this build's CUDA runtime")

// Error is a failed CUDA runtime call or kernel launch.
type Error struct {
	Op   string // the deepgo entry point, e.g. "dg_cuda_scale" or "Malloc"
	Code int    // the cudaError_t value; 0 when the failure was not CUDA's own
	Msg  string // CUDA's name and description, with the failing call and its file:line when known
}

func (e *Error) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("cuda: %s: %s (cudaError %d)", e.Op, e.Msg, e.Code)
	}
	return fmt.Sprintf("cuda: %s: %s", e.Op, e.Msg)
}
