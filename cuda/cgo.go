//go:build cuda

package cuda

// The mechanical layer: cgo flags and the error conversion every call uses.
//
// Link: build/cuda/ holds libdeepgo_cuda.a (our kernels) and a copy of the
// toolkit's libcudart_static.a, both written by scripts/build-cuda.sh, so the
// flags below are the same for the PyPI wheels and a system CUDA, and the
// binary needs no CUDA shared library at run time: the static runtime
// dlopens the driver (libcuda.so.1) on first use. libstdc++ is for the C++
// runtime the nvcc-compiled objects use; dl, pthread and rt for cudart.

/*
#cgo CFLAGS: -I${SRCDIR}/../csrc/include -I${SRCDIR}
#cgo LDFLAGS: -L${SRCDIR}/../build/cuda -ldeepgo_cuda -lcudart_static -lstdc++ -ldl -lpthread -lrt -lm
#include "deepgo_cuda.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

var statusNames = map[C.dg_status]string{
	C.DG_ERR_INVALID:     "invalid argument",
	C.DG_ERR_NOMEM:       "out of host memory",
	C.DG_ERR_DTYPE:       "dtype not supported",
	C.DG_ERR_ALIGN:       "misaligned",
	C.DG_ERR_SIZE:        "sizes disagree",
	C.DG_ERR_UNSUPPORTED: "not supported",
	C.DG_ERR_CUDA:        "CUDA error",
	C.DG_ERR_INTERNAL:    "internal error",
}

// callErr converts the status of a context-free call and its cudaError.
func callErr(op string, s C.dg_status, cuerr C.int) error {
	if s == C.DG_OK {
		return nil
	}
	if s == C.DG_ERR_CUDA {
		return &Error{Op: op, Code: int(cuerr), Msg: cudaMsg(cuerr)}
	}
	return &Error{Op: op, Msg: statusNames[s]}
}

func cudaMsg(cuerr C.int) string {
	return C.GoString(C.dg_cuda_error_name(cuerr)) + ": " + C.GoString(C.dg_cuda_error_string(cuerr))
}

// ctxErr converts the status of a call on ctx, with the message ctx recorded.
func ctxErr(op string, ctx *C.dg_cuda_ctx, s C.dg_status) error {
	if s == C.DG_OK {
		return nil
	}
	var cuerr C.int
	msg := C.GoString(C.dg_cuda_ctx_error(ctx, &cuerr))
	if msg == "" {
		msg = statusNames[s]
	} else if s != C.DG_ERR_CUDA {
		msg = fmt.Sprintf("%s: %s", statusNames[s], msg)
	}
	return &Error{Op: op, Code: int(cuerr), Msg: msg}
}

// ptrList and i64List hand Go slices to C for the length of one call. The
// pointers are device addresses (outside the Go heap), so the slices hold
// no Go pointers and cgo's rules allow passing them.
func ptrList(p []unsafe.Pointer) *unsafe.Pointer {
	if len(p) == 0 {
		return nil
	}
	return &p[0]
}

func i64List(n []int64) *C.int64_t {
	if len(n) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&n[0]))
}

// RuntimeVersion is the CUDA runtime version (1000*major + 10*minor).
func RuntimeVersion() int { return int(C.dg_cuda_runtime_version()) }

// DriverVersion is the CUDA version the driver supports, 0 without one.
func DriverVersion() int { return int(C.dg_cuda_driver_version()) }
