//go:build cuda

package cuda

/*
#include "deepgo_cuda.h"
*/
import "C"

import (
	"context"
	"time"
	"unsafe"
)

// Stream is a CUDA stream on one device. It is created blocking: it waits
// for, and is waited for by, the legacy default stream that Malloc and the
// Copy functions use, so those need no events to be ordered with kernels.
type Stream struct {
	dev   int
	s     unsafe.Pointer
	owned bool
}

// NewStream creates a stream on device dev.
func NewStream(dev int) (*Stream, error) {
	if err := checkDevice("NewStream", dev); err != nil {
		return nil, err
	}
	var s unsafe.Pointer
	var cuerr C.int
	if err := callErr("NewStream", C.dg_cuda_stream_create(C.int(dev), &s, &cuerr), cuerr); err != nil {
		return nil, err
	}
	return &Stream{dev: dev, s: s, owned: true}, nil
}

// Device is the stream's device index.
func (s *Stream) Device() int { return s.dev }

// Handle is the cudaStream_t, for other bindings (NCCL) that queue on it.
func (s *Stream) Handle() unsafe.Pointer { return s.s }

// Synchronize waits until all work queued on the stream is done, or ctx ends.
func (s *Stream) Synchronize(ctx context.Context) error {
	return poll(ctx, func() (bool, error) {
		var done, cuerr C.int
		st := C.dg_cuda_stream_query(C.int(s.dev), s.s, &done, &cuerr)
		return done != 0, callErr("Stream.Synchronize", st, cuerr)
	})
}

// Close destroys the stream (not one a Backend borrowed).
func (s *Stream) Close() error {
	if !s.owned || s.s == nil {
		return nil
	}
	var cuerr C.int
	err := callErr("Stream.Close", C.dg_cuda_stream_destroy(C.int(s.dev), s.s, &cuerr), cuerr)
	s.s = nil
	return err
}

// Event is a CUDA event with timing, on one device.
type Event struct {
	dev int
	e   unsafe.Pointer
}

// NewEvent creates an event on device dev.
func NewEvent(dev int) (*Event, error) {
	if err := checkDevice("NewEvent", dev); err != nil {
		return nil, err
	}
	var e unsafe.Pointer
	var cuerr C.int
	if err := callErr("NewEvent", C.dg_cuda_event_create(C.int(dev), &e, &cuerr), cuerr); err != nil {
		return nil, err
	}
	return &Event{dev: dev, e: e}, nil
}

// Record captures the work queued so far on s (nil: the legacy default
// stream); Synchronize then waits for exactly that work.
func (e *Event) Record(s *Stream) error {
	var h unsafe.Pointer
	if s != nil {
		h = s.s
	}
	var cuerr C.int
	return callErr("Event.Record", C.dg_cuda_event_record(C.int(e.dev), e.e, h, &cuerr), cuerr)
}

// Synchronize waits until the recorded work is done, or ctx ends.
func (e *Event) Synchronize(ctx context.Context) error {
	return poll(ctx, func() (bool, error) {
		var done, cuerr C.int
		st := C.dg_cuda_event_query(C.int(e.dev), e.e, &done, &cuerr)
		return done != 0, callErr("Event.Synchronize", st, cuerr)
	})
}

// Elapsed is the time in milliseconds between start's and e's recorded work,
// both complete (resolution about half a microsecond).
func (e *Event) Elapsed(start *Event) (float32, error) {
	var ms C.float
	var cuerr C.int
	err := callErr("Event.Elapsed", C.dg_cuda_event_elapsed(start.e, e.e, &ms, &cuerr), cuerr)
	return float32(ms), err
}

// Close destroys the event.
func (e *Event) Close() error {
	if e.e == nil {
		return nil
	}
	var cuerr C.int
	err := callErr("Event.Close", C.dg_cuda_event_destroy(C.int(e.dev), e.e, &cuerr), cuerr)
	e.e = nil
	return err
}

// poll calls done until it reports completion, an error, or ctx ends.
// Polling (not cudaStreamSynchronize) is what lets a cancelled context
// return while the GPU is still busy; the sleep starts at 10 µs, about a
// short kernel, and backs off to 1 ms so a long wait costs little CPU.
func poll(ctx context.Context, done func() (bool, error)) error {
	wait := 10 * time.Microsecond
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if wait < time.Millisecond {
			wait *= 2
		}
	}
}
