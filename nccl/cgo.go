//go:build cuda

package nccl

// The mechanical layer: cgo flags, loading libnccl, and result conversion.
//
// Headers: build/cuda/include/{nccl,cuda} are links that
// scripts/build-cuda.sh makes to the NCCL and CUDA include folders of the
// toolchain in use (wheels or system), as it copies libcudart_static.a, so
// these flags do not depend on where the toolkit lives; ../cuda gives
// dg_cuda_err.h, package cuda's rule for the thread's last CUDA error. libnccl is not
// linked (see doc.go); libcudart_static is, for cudaSetDevice and events,
// the same archive package cuda links.

/*
#cgo CFLAGS: -I${SRCDIR}/../build/cuda/include/nccl -I${SRCDIR}/../build/cuda/include/cuda -I${SRCDIR}/../cuda
#cgo LDFLAGS: -L${SRCDIR}/../build/cuda -lcudart_static -ldl -lpthread -lrt
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/deepgo-ml/deepgo/comm"
)

// minVersion is NCCL 2.18.1, the first with ncclCommSplit.
const minVersion = 21801

var (
	loadOnce   sync.Once
	loadErr    error
	loadedFrom string // the candidate that loaded
)

// candidates lists where libnccl.so.2 is looked for, in order (doc.go).
func candidates() []string {
	var c []string
	if p := os.Getenv("DEEPGO_NCCL_LIB"); p != "" {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			p = filepath.Join(p, "libnccl.so.2")
		}
		c = append(c, p)
	}
	// Next to the executable: build/cuda/lib for build/cuda/nccl.test, a
	// copy of the tree at any path (scripts/build-cuda.sh links it there).
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		c = append(c, filepath.Join(dir, "lib", "libnccl.so.2"), filepath.Join(dir, "libnccl.so.2"))
	}
	c = append(c, "libnccl.so.2")
	// The source tree this package was compiled from: an rpath that needs
	// no linker flag and is simply absent on other machines.
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		c = append(c, filepath.Join(filepath.Dir(file), "..", "build", "cuda", "lib", "libnccl.so.2"))
	}
	return c
}

// load opens libnccl once per process.
func load() error {
	loadOnce.Do(func() {
		var tried []string
		for _, p := range candidates() {
			cp := C.CString(p)
			var buf [512]C.char
			rc := C.dg_nccl_load(cp, &buf[0], C.size_t(len(buf)))
			C.free(unsafe.Pointer(cp))
			if rc == 0 {
				loadedFrom = p
				if v := int(C.dg_nccl_version()); v < minVersion {
					loadErr = fmt.Errorf("nccl: %s is NCCL %d, need %d or newer", p, v, minVersion)
				}
				return
			}
			tried = append(tried, C.GoString(&buf[0]))
		}
		loadErr = fmt.Errorf("nccl: cannot load libnccl.so.2 (set DEEPGO_NCCL_LIB): %s", strings.Join(tried, "; "))
	})
	return loadErr
}

// Version is the loaded NCCL's version code (e.g. 22707), 0 when none is.
func Version() int {
	if load() != nil {
		return 0
	}
	return int(C.dg_nccl_version())
}

// Result is a failed NCCL or CUDA call, found in the chain of a
// *comm.Error (errors.As): the call, its ncclResult_t and NCCL's message.
type Result struct {
	Call string // e.g. "ncclAllReduce", "cudaEventQuery"
	Code int    // the ncclResult_t (ncclUnhandledCudaError for CUDA calls)
	Msg  string
}

func (r *Result) Error() string { return fmt.Sprintf("%s: %s", r.Call, r.Msg) }

// check converts an ncclResult_t, ncclInProgress included as success, into
// an error wrapping comm's sentinel for it and a *Result.
func check(call string, h C.ncclComm_t, r C.ncclResult_t, cuerr C.int) error {
	if r == C.ncclSuccess || r == C.ncclInProgress {
		return nil
	}
	msg := C.GoString(C.dg_nccl_error_string(r))
	if r == C.ncclUnhandledCudaError && cuerr != 0 {
		msg += ": " + C.GoString(C.dg_nccl_cuda_error(cuerr))
	} else if last := C.GoString(C.dg_nccl_last_error(h)); last != "" {
		msg += ": " + last
	}
	sentinel := comm.ErrAborted // remote, system, internal and CUDA failures
	if r == C.ncclInvalidArgument || r == C.ncclInvalidUsage {
		sentinel = comm.ErrInvalid
	}
	return fmt.Errorf("%w: %w", sentinel, &Result{Call: call, Code: int(r), Msg: msg})
}

// cudaCheck converts the cudaError_t of an event call.
func cudaCheck(call string, e C.int) error {
	if e == 0 {
		return nil
	}
	r := &Result{Call: call, Code: int(C.ncclUnhandledCudaError), Msg: C.GoString(C.dg_nccl_cuda_error(e))}
	return fmt.Errorf("%w: %w", comm.ErrAborted, r)
}
