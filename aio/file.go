package aio

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/deepgo-ml/deepgo/csrc"
)

// ErrNoDirect is wrapped by OpenFile when the file system refuses O_DIRECT
// (tmpfs does); open the engine with Options.Buffered there.
var ErrNoDirect = errors.New("not supported: the file system refuses O_DIRECT (tmpfs?); use Options.Buffered")

// File is a file registered with an engine.
type File struct {
	e    *Engine
	idx  int
	path string
}

// OpenFile opens path for the engine. flag combines os.O_RDONLY or
// os.O_RDWR with os.O_CREATE and os.O_TRUNC; nothing else is allowed.
func (e *Engine) OpenFile(path string, flag int) (*File, error) {
	const allowed = os.O_RDONLY | os.O_RDWR | os.O_CREATE | os.O_TRUNC
	if flag&^allowed != 0 {
		return nil, fmt.Errorf("aio: open %s: flag %#x: only O_RDONLY, O_RDWR, O_CREATE and O_TRUNC are allowed", path, flag)
	}
	f := 0
	if flag&os.O_RDWR != 0 {
		f |= csrc.AIOWrite
	}
	if flag&os.O_CREATE != 0 {
		f |= csrc.AIOCreate
	}
	if flag&os.O_TRUNC != 0 {
		f |= csrc.AIOTrunc
	}
	if e.buffered {
		f |= csrc.AIOBuffered
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	idx, errno, err := e.c.FileOpen(path, f)
	switch {
	case err == nil:
		return &File{e: e, idx: idx, path: path}, nil
	case errno == int(syscall.EINVAL) && !e.buffered:
		return nil, fmt.Errorf("aio: open %s: %w", path, ErrNoDirect)
	case errno != 0:
		return nil, &os.PathError{Op: "aio open", Path: path, Err: syscall.Errno(errno)}
	case errors.Is(err, csrc.BadSize):
		return nil, fmt.Errorf("aio: open %s: all %d file slots in use: %w", path, 256, err)
	}
	return nil, fmt.Errorf("aio: open %s: %w", path, err)
}

// Path is the file's path as opened.
func (f *File) Path() string { return f.path }

// Size reports the file's size in bytes.
func (f *File) Size() (int64, error) {
	n, errno, err := f.e.c.FileSize(f.idx)
	if errno != 0 {
		return 0, &os.PathError{Op: "aio stat", Path: f.path, Err: syscall.Errno(errno)}
	}
	if err != nil {
		return 0, fmt.Errorf("aio: size of %s: %w", f.path, err)
	}
	return n, nil
}

// Close closes the file; it refuses while a request still uses it. An
// engine's Close closes its files too.
func (f *File) Close() error {
	f.e.mu.Lock()
	defer f.e.mu.Unlock()
	if f.e.closed {
		return nil
	}
	if err := f.e.c.FileClose(f.idx); err != nil {
		return fmt.Errorf("aio: close %s (closed already, or requests still use it): %w", f.path, err)
	}
	return nil
}

// ReadAt reads n bytes at off into the start of b (n padded to Align, so
// b's first padded(n) bytes are overwritten).
func (f *File) ReadAt(b *Buffer, n int, off int64) (*Request, error) {
	return f.submit("read", b, n, off)
}

// WriteAt writes the first n bytes of b at off, zero-padded to a multiple of
// Align.
func (f *File) WriteAt(b *Buffer, n int, off int64) (*Request, error) {
	return f.submit("write", b, n, off)
}

func (f *File) submit(op string, b *Buffer, n int, off int64) (*Request, error) {
	if b == nil || b.p == nil {
		return nil, fmt.Errorf("aio: %s %s: nil or freed buffer", op, f.path)
	}
	if n < 0 || padded(n) > b.size {
		return nil, fmt.Errorf("aio: %s %s: n %d: want 0..%d (the buffer's capacity)", op, f.path, n, b.size)
	}
	if off < 0 || (!f.e.buffered && off%Align != 0) {
		return nil, fmt.Errorf("aio: %s %s: offset %d: want a non-negative multiple of %d (O_DIRECT)", op, f.path, off, Align)
	}
	size := n
	if !f.e.buffered {
		size = padded(n)
		if op == "write" {
			clear(b.Bytes()[n:size])
		}
	}
	r := &Request{op: op, path: f.path, buf: b, done: make(chan struct{})}
	e := f.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	b.inflight.Add(1)
	// under e.mu, so the reaper cannot see the id before it is pending
	id, err := e.c.Submit(f.idx, op == "write", b.p, int64(size), off)
	if err != nil {
		b.inflight.Add(-1)
		return nil, fmt.Errorf("aio: %s %s at offset %d: %w", op, f.path, off, err)
	}
	if len(e.pending) == 0 {
		e.busySince = time.Now()
	}
	e.pending[id] = r
	if op == "write" {
		e.writeBytes += int64(size)
	} else {
		e.readBytes += int64(size)
	}
	return r, nil
}
