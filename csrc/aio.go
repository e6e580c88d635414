package csrc

// liburing is linked from its static archive, as the GPU binaries link
// OpenBLAS: a binary built here runs on a machine without liburing
// installed (building still needs liburing-dev's header and archive).

/*
#cgo LDFLAGS: -l:liburing.a
#include <stdlib.h>
#include "deepgo.h"
*/
import "C"

import (
	"unsafe"
)

// AIOBackend is a dg_aio_backend value.
type AIOBackend int

// I/O engine back ends, equal to deepgo.h's dg_aio_backend values.
const (
	AIOAuto    AIOBackend = C.DG_AIO_AUTO
	AIOURing   AIOBackend = C.DG_AIO_URING
	AIOThreads AIOBackend = C.DG_AIO_THREADS
)

// AIOFault is a dg_aio_fault value (tests only).
type AIOFault int

// Injected faults, equal to deepgo.h's dg_aio_fault values.
const (
	AIOFaultNone  AIOFault = C.DG_AIO_FAULT_NONE
	AIOFaultErrno AIOFault = C.DG_AIO_FAULT_ERRNO
	AIOFaultShort AIOFault = C.DG_AIO_FAULT_SHORT
	AIOFaultEOF   AIOFault = C.DG_AIO_FAULT_EOF
)

// AIOOp is a dg_aio_op value: which transfers a fault counts.
type AIOOp int

// Transfers, equal to deepgo.h's dg_aio_op values.
const (
	AIOOpAny   AIOOp = C.DG_AIO_OP_ANY
	AIOOpRead  AIOOp = C.DG_AIO_OP_READ
	AIOOpWrite AIOOp = C.DG_AIO_OP_WRITE
)

// File flags of AIO.FileOpen, equal to deepgo.h's DG_AIO_* flags.
const (
	AIOWrite    = C.DG_AIO_WRITE
	AIOCreate   = C.DG_AIO_CREATE
	AIOTrunc    = C.DG_AIO_TRUNC
	AIOBuffered = C.DG_AIO_BUFFERED
	// AIOAlign is the alignment O_DIRECT asks of buffers, sizes and offsets.
	AIOAlign = C.DG_AIO_ALIGN
	// AIOErrEOF is AIOResult.Errno when a read met the end of the file.
	AIOErrEOF = C.DG_AIO_ERR_EOF
)

// AIOConfig is dg_aio_config.
type AIOConfig struct {
	BlockSize, InjectAt         int64
	QueueDepth, ThreadCount     int
	SingleSubmit, OverlapEvents bool
	Backend                     AIOBackend
	Inject                      AIOFault
	InjectErrno                 int
	InjectOp                    AIOOp
}

// AIOResult is dg_aio_result: one finished request.
type AIOResult struct {
	ID        int64
	Code      Status
	Errno     int
	File      int
	ErrOffset int64
}

// AIOStats is dg_aio_stats.
type AIOStats struct {
	Pieces, Retries, Resumed, Fixed int64
	Backend                         AIOBackend
}

// AIO is a dg_aio engine.
type AIO struct{ c *C.dg_aio }

// AIOOpen starts an engine (dg_aio_open).
func AIOOpen(cfg AIOConfig) (*AIO, error) {
	c := C.dg_aio_config{
		block_size: C.int64_t(cfg.BlockSize), queue_depth: C.int(cfg.QueueDepth),
		thread_count: C.int(cfg.ThreadCount), single_submit: cbool(cfg.SingleSubmit),
		overlap_events: cbool(cfg.OverlapEvents), backend: C.dg_aio_backend(cfg.Backend),
		inject: C.dg_aio_fault(cfg.Inject), inject_errno: C.int(cfg.InjectErrno), inject_at: C.int64_t(cfg.InjectAt),
		inject_op: C.dg_aio_op(cfg.InjectOp),
	}
	var a *C.dg_aio
	if err := check("dg_aio_open", C.dg_aio_open(&c, &a)); err != nil {
		return nil, err
	}
	return &AIO{c: a}, nil
}

// Shutdown finishes every submitted request and stops the workers.
func (a *AIO) Shutdown() { C.dg_aio_shutdown(a.c) }

// Destroy shuts down, closes the files and frees the engine.
func (a *AIO) Destroy() { C.dg_aio_destroy(a.c) }

// Stats reports the engine's counters.
func (a *AIO) Stats() AIOStats {
	var s C.dg_aio_stats
	C.dg_aio_get_stats(a.c, &s)
	return AIOStats{Pieces: int64(s.pieces), Retries: int64(s.retries), Resumed: int64(s.resumed),
		Fixed: int64(s.fixed), Backend: AIOBackend(s.backend)}
}

// Inject arms a fault on the running engine (dg_aio_inject; tests only).
func (a *AIO) Inject(kind AIOFault, errno int, op AIOOp, at int64) error {
	return check("dg_aio_inject", C.dg_aio_inject(a.c, C.dg_aio_fault(kind), C.int(errno), C.dg_aio_op(op), C.int64_t(at)))
}

// FileOpen opens and registers path; errno is set on IOError.
func (a *AIO) FileOpen(path string, flags int) (file int, errno int, err error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var f, e C.int
	err = check("dg_aio_file_open", C.dg_aio_file_open(a.c, cp, C.int(flags), &f, &e))
	return int(f), int(e), err
}

// FileClose closes a file no request is using.
func (a *AIO) FileClose(file int) error {
	return check("dg_aio_file_close", C.dg_aio_file_close(a.c, C.int(file)))
}

// FileSize reports a file's size; errno is set on IOError.
func (a *AIO) FileSize(file int) (bytes int64, errno int, err error) {
	var n C.int64_t
	var e C.int
	err = check("dg_aio_file_size", C.dg_aio_file_size(a.c, C.int(file), &n, &e))
	return int64(n), int(e), err
}

// BufferRegister registers C memory [p, p+bytes) with the rings.
func (a *AIO) BufferRegister(p unsafe.Pointer, bytes int64) (int, error) {
	var i C.int
	err := check("dg_aio_buffer_register", C.dg_aio_buffer_register(a.c, p, C.int64_t(bytes), &i))
	return int(i), err
}

// BufferUnregister forgets a registered buffer.
func (a *AIO) BufferUnregister(index int) error {
	return check("dg_aio_buffer_unregister", C.dg_aio_buffer_unregister(a.c, C.int(index)))
}

// Submit queues a read or write of C memory p; the result carries the id.
func (a *AIO) Submit(file int, write bool, p unsafe.Pointer, bytes, offset int64) (int64, error) {
	var id C.int64_t
	err := check("dg_aio_submit", C.dg_aio_submit(a.c, C.int(file), cbool(write), p, C.int64_t(bytes),
		C.int64_t(offset), &id))
	return int64(id), err
}

// Reap fills out with finished requests, waiting for one unless nonblocking;
// 0 after Shutdown means all were reaped.
func (a *AIO) Reap(out []AIOResult, nonblocking bool) (int, error) {
	if len(out) == 0 {
		return 0, &Error{Op: "dg_aio_reap", Code: Invalid}
	}
	buf := make([]C.dg_aio_result, len(out))
	var n C.int
	if err := check("dg_aio_reap", C.dg_aio_reap(a.c, &buf[0], C.int(len(out)), cbool(nonblocking), &n)); err != nil {
		return 0, err
	}
	for i := 0; i < int(n); i++ {
		r := buf[i]
		out[i] = AIOResult{ID: int64(r.id), Code: Status(r.status), Errno: int(r.err), File: int(r.file),
			ErrOffset: int64(r.err_offset)}
	}
	return int(n), nil
}
