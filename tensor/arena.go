package tensor

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrArenaClosed is returned by an allocation from a closed Arena: one used
// outside the lifetime its owner gave it (for an engine's arena, outside a
// micro-step).
var ErrArenaClosed = errors.New("tensor: arena is closed: allocation outside its lifetime")

// Arena hands out host tensors that all die together: Reset (or Close)
// frees every buffer allocated since the last Reset. It counts them, so
// that activation memory is a measured number, not an estimate.
//
// An engine owns one per rank and puts it in the context of every module
// Forward, Backward and Loss call (see ArenaFromContext and package model
// for the lifetime there). A caller may also use one of its own: the zero
// value is an open, empty arena. Its methods are safe for concurrent use.
//
// A buffer belongs to the arena: do not Free it (the arena's Reset would
// find it freed and skip it, but Bytes would count it until then), and do
// not use it after Reset, when its storage is freed and every access
// reports ErrFreed.
type Arena struct {
	mu     sync.Mutex
	bufs   []*Tensor
	bytes  int64
	peak   int64
	allocs int
	closed bool
	alloc  func(DType, ...int) (*Tensor, error)
}

// SetAlloc makes the arena allocate with alloc (a device backend's Empty)
// instead of host Empty; nil restores host memory. Set it before use.
func (a *Arena) SetAlloc(alloc func(DType, ...int) (*Tensor, error)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.alloc = alloc
}

// Empty allocates a zeroed contiguous host tensor of dt and shape.
func (a *Arena) Empty(dt DType, shape ...int) (*Tensor, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, fmt.Errorf("tensor.Arena: %v%v: %w", dt, shape, ErrArenaClosed)
	}
	alloc := a.alloc
	if alloc == nil {
		alloc = Empty
	}
	t, err := alloc(dt, shape...)
	if err != nil {
		return nil, fmt.Errorf("tensor.Arena: %w", err)
	}
	a.bufs = append(a.bufs, t)
	a.bytes += int64(t.Bytes())
	a.peak = max(a.peak, a.bytes)
	a.allocs++
	return t, nil
}

// Float32 allocates a zeroed float32 host tensor of shape.
func (a *Arena) Float32(shape ...int) (*Tensor, error) { return a.Empty(Float32, shape...) }

// Int32 allocates a zeroed int32 host tensor of shape.
func (a *Arena) Int32(shape ...int) (*Tensor, error) { return a.Empty(Int32, shape...) }

// Bytes is the total size of the live buffers.
func (a *Arena) Bytes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bytes
}

// Peak is the largest Bytes has been since the arena was made.
func (a *Arena) Peak() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peak
}

// Allocs is the number of live buffers.
func (a *Arena) Allocs() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.allocs
}

// Reset frees every buffer; the arena stays usable (open or closed as it
// was).
func (a *Arena) Reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reset()
}

func (a *Arena) reset() {
	for _, t := range a.bufs {
		t.Free() // ErrFreed: its user freed it early, nothing left to do
	}
	clear(a.bufs)
	a.bufs, a.bytes, a.allocs = a.bufs[:0], 0, 0
}

// Close frees every buffer and refuses allocations (ErrArenaClosed) until
// Open. Closing a closed arena does nothing more.
func (a *Arena) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reset()
	a.closed = true
}

// Open lets a closed arena allocate again.
func (a *Arena) Open() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = false
}

type arenaKey struct{}

// WithArena returns a copy of ctx that carries a. An engine passes such a
// context to module and loss calls, as it does its backend
// (backend.NewContext).
func WithArena(ctx context.Context, a *Arena) context.Context {
	return context.WithValue(ctx, arenaKey{}, a)
}

// ArenaFromContext returns the arena ctx carries, if any. A module run by
// an engine always finds one; a module called directly (a test, a
// standalone trainer) finds one only if its caller put one there, and
// otherwise allocates and frees on its own.
func ArenaFromContext(ctx context.Context) (*Arena, bool) {
	a, ok := ctx.Value(arenaKey{}).(*Arena)
	return a, ok && a != nil
}

// Holds reports whether t (or the storage t views) is one of the arena's
// live buffers: an engine that resets an arena early uses it to tell a
// module's output it must copy out from memory the module owns.
func (a *Arena) Holds(t *Tensor) bool {
	if t == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, b := range a.bufs {
		if b.Storage() == t.Storage() {
			return true
		}
	}
	return false
}
