//go:build mpi

// Package mpi is the Open MPI backend of comm (build tag mpi) for CPU
// processes started by mpirun: one process per rank, host tensors.
//
// Every operation first exchanges a small descriptor of the call with the
// ranks taking part (non-blocking, under the deadline), so that a missing
// rank is named in an ErrTimeout, a rank calling something else in an
// ErrMismatch, and a rank whose arguments were bad in an ErrAborted; only
// then does it run the MPI collective (non-blocking, polled). float16 and
// bfloat16 are widened to float32 for reductions (MPI_FLOAT, MPI's own
// summation order) and rounded once at the end; Avg scales the float32 sum
// before that rounding.
//
// Limits: MPI cannot cancel a collective, so a deadline that passes after
// the descriptors matched leaves MPI owning the buffers: the group is broken
// and the process should exit (Abort). A process that dies makes Open MPI
// end the job. Calls into MPI are serialized (MPI_THREAD_SERIALIZED).
package mpi

/*
#cgo pkg-config: ompi
#include "mpi_shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
)

// mu serializes every call into MPI.
var mu sync.Mutex

func mpiErr(fn string, rc C.int) error {
	if rc == C.MPI_SUCCESS {
		return nil
	}
	var buf [C.MPI_MAX_ERROR_STRING]C.char
	var n C.int
	C.dg_error_string(rc, &buf[0], &n)
	return fmt.Errorf("%s: %s", fn, C.GoStringN(&buf[0], n))
}

var (
	initOnce sync.Once
	initErr  error
)

// Init initializes MPI (MPI_Init_thread, serialized) once per process; the
// other functions of this package call it. Call Finalize before exiting.
func Init() error {
	initOnce.Do(func() {
		mu.Lock()
		defer mu.Unlock()
		var provided C.int
		if err := mpiErr("MPI_Init_thread", C.MPI_Init_thread(nil, nil, C.MPI_THREAD_SERIALIZED, &provided)); err != nil {
			initErr = err
			return
		}
		if provided < C.MPI_THREAD_SERIALIZED {
			initErr = fmt.Errorf("MPI_Init_thread: provided thread level %d < MPI_THREAD_SERIALIZED", provided)
		}
	})
	return initErr
}

// Finalize shuts MPI down; no operation may be in flight.
func Finalize() error {
	mu.Lock()
	defer mu.Unlock()
	return mpiErr("MPI_Finalize", C.MPI_Finalize())
}

// Abort ends every process of the job (MPI_Abort on MPI_COMM_WORLD).
func Abort(code int) {
	mu.Lock()
	C.MPI_Abort(C.dg_world(), C.int(code))
}

type request = C.MPI_Request
