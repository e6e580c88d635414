package aio

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/deepgo-ml/deepgo/csrc"
)

// Buffer is host memory the engine reads into and writes from: C memory,
// Align-aligned, its capacity a multiple of Align, registered with the
// engine's rings when a slot is free (registration is an optimisation; an
// unregistered buffer works the same).
type Buffer struct {
	p        unsafe.Pointer
	size     int
	e        *Engine
	reg      int
	inflight atomic.Int32
}

// padded rounds n up to a multiple of Align.
func padded(n int) int { return (n + Align - 1) &^ (Align - 1) }

// NewBuffer allocates a zeroed buffer of at least n bytes (n rounded up to
// a multiple of Align). Free it with Free.
func (e *Engine) NewBuffer(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("aio: buffer size %d: want > 0", n)
	}
	size := padded(n)
	p, err := csrc.Alloc(size, Align)
	if err != nil {
		return nil, fmt.Errorf("aio: buffer of %d bytes: %w", size, err)
	}
	b := &Buffer{p: p, size: size, e: e, reg: -1}
	e.mu.Lock()
	if !e.closed {
		// a full registration table leaves the buffer unregistered
		if i, err := e.c.BufferRegister(p, int64(size)); err == nil {
			b.reg = i
		}
	}
	e.mu.Unlock()
	return b, nil
}

// Bytes views the whole buffer (its capacity). Valid until Free.
func (b *Buffer) Bytes() []byte { return unsafe.Slice((*byte)(b.p), b.size) }

// Ptr is the buffer's C memory (for views such as tensor.WrapStorage);
// nil after Free.
func (b *Buffer) Ptr() unsafe.Pointer { return b.p }

// Cap reports the buffer's capacity in bytes, a multiple of Align.
func (b *Buffer) Cap() int { return b.size }

// Free releases the buffer; it refuses while a request still uses it.
func (b *Buffer) Free() error {
	if b.p == nil {
		return nil
	}
	if n := b.inflight.Load(); n > 0 {
		return fmt.Errorf("aio: free of a buffer %d requests still use", n)
	}
	e := b.e
	e.mu.Lock()
	if b.reg >= 0 && !e.closed {
		_ = e.c.BufferUnregister(b.reg) // only fails for a slot already free
	}
	e.mu.Unlock()
	csrc.Free(b.p)
	b.p = nil
	return nil
}
