package aio

import (
	"context"
	"fmt"
	"io"
	"syscall"

	"github.com/deepgo-ml/deepgo/csrc"
)

// Error is a failed transfer: which operation, on which file, at which
// offset. errors.Is(err, syscall.ENOSPC) and friends see the cause;
// io.ErrUnexpectedEOF is a read that met the end of the file.
type Error struct {
	Op     string // "read" or "write"
	Path   string
	Offset int64 // of the first byte not transferred
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("aio: %s %s at offset %d: %v", e.Op, e.Path, e.Offset, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Request is a submitted transfer. Its buffer belongs to the engine until
// Done is closed.
type Request struct {
	op   string
	path string
	buf  *Buffer
	done chan struct{}
	err  error
}

// Done is closed when the transfer has finished, well or not.
func (r *Request) Done() <-chan struct{} { return r.done }

// Err reports the transfer's error once Done is closed.
func (r *Request) Err() error {
	<-r.done
	return r.err
}

// Wait blocks until the transfer finishes or ctx ends. Cancelling ctx does
// not stop the transfer: the buffer stays in use until Done is closed.
func (r *Request) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("aio: wait for %s of %s: %w", r.op, r.path, ctx.Err())
	}
}

// finish runs on the reaper with the engine's lock held.
func (r *Request) finish(res csrc.AIOResult) {
	switch {
	case res.Code == csrc.OK:
	case res.Code == csrc.IOError && res.Errno == csrc.AIOErrEOF:
		r.err = &Error{Op: r.op, Path: r.path, Offset: res.ErrOffset, Err: io.ErrUnexpectedEOF}
	case res.Code == csrc.IOError:
		r.err = &Error{Op: r.op, Path: r.path, Offset: res.ErrOffset, Err: syscall.Errno(res.Errno)}
	default:
		r.err = &Error{Op: r.op, Path: r.path, Offset: res.ErrOffset, Err: &csrc.Error{Op: "dg_aio", Code: res.Code}}
	}
	r.buf.inflight.Add(-1)
	close(r.done)
}
