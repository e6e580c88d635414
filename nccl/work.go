//go:build cuda

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"time"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/cuda"
)

// abortGrace bounds the wait, after an abort, for NCCL's kernels to leave
// the stream, so that a failed Wait still returns with the tensors free.
const abortGrace = 10 * time.Second

// launch is one operation's arguments for dg_nccl_launch.
type launch struct {
	kind       C.int
	send, recv unsafe.Pointer
	count      int
	dtype      C.int
	red        C.int
	peer       int // root or peer
	chunkBytes int // AllToAll
}

var launchNames = map[C.int]string{
	C.DG_NCCL_ALLREDUCE: "ncclAllReduce", C.DG_NCCL_REDUCESCATTER: "ncclReduceScatter",
	C.DG_NCCL_ALLGATHER: "ncclAllGather", C.DG_NCCL_BROADCAST: "ncclBroadcast",
	C.DG_NCCL_REDUCE: "ncclReduce", C.DG_NCCL_SEND: "ncclSend", C.DG_NCCL_RECV: "ncclRecv",
	C.DG_NCCL_ALLTOALL: "ncclGroupEnd(send/recv)",
}

// work is an operation queued on the stream, watched by its own goroutine
// until its event completes, NCCL reports an error, or its deadline passes.
type work struct {
	c    *ncclComm
	op   comm.OpKind
	ev   unsafe.Pointer
	done chan struct{}
	err  error
}

func (w *work) Done() <-chan struct{} { return w.done }

func (w *work) Wait(ctx context.Context) error {
	return comm.WaitDone(ctx, w.done, func() error { return w.err }, w.op, w.c.name, w.c.rank)
}

func (w *work) finish(err error) *work {
	w.err = err
	close(w.done)
	return w
}

// start validates an operation (prepare), queues it on the stream under
// the lock, and returns its work; a failure at any step breaks the group.
func (c *ncclComm) start(ctx context.Context, op comm.OpKind, prepare func() (launch, error)) *work {
	w := &work{c: c, op: op, done: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.unusableLocked(); err != nil {
		return w.finish(c.errorf(op, err))
	}
	deadline := c.deadline(ctx) // the clock starts at the call
	l, err := prepare()
	if err == nil {
		err = c.enqueueLocked(ctx, deadline, w, l)
	}
	if err != nil {
		e := c.errorf(op, err)
		c.breakLocked(e)
		return w.finish(e)
	}
	go w.watch(ctx, deadline)
	return w
}

// enqueueLocked launches l and records w's event after it. The record
// must wait for the launch to settle: until then NCCL may not yet have
// queued its kernel.
func (c *ncclComm) enqueueLocked(ctx context.Context, deadline time.Time, w *work, l launch) error {
	var cuerr C.int
	dev, stream := C.int(c.dev), c.stream.Handle()
	compute := c.computeStream(ctx)
	if compute != nil {
		if err := c.afterCompute(compute); err != nil {
			return err
		}
	}
	r := C.dg_nccl_launch(dev, c.h, stream, l.kind, l.send, l.recv, C.size_t(l.count),
		l.dtype, l.red, C.int(l.peer), C.int(c.size), C.size_t(l.chunkBytes), &cuerr)
	if err := check(launchNames[l.kind], c.h, r, cuerr); err != nil {
		return err
	}
	if err := settle(ctx, deadline, launchNames[l.kind], c.h); err != nil {
		return err
	}
	if n := len(c.events); n > 0 {
		w.ev, c.events = c.events[n-1], c.events[:n-1]
	} else {
		var ev unsafe.Pointer // C writes a C pointer: use a local, not a field of w
		if err := cudaCheck("cudaEventCreate", C.dg_nccl_event_create(dev, &ev)); err != nil {
			return err
		}
		w.ev = ev
	}
	if err := cudaCheck("cudaEventRecord", C.dg_nccl_event_record(dev, w.ev, stream)); err != nil {
		c.events = append(c.events, w.ev)
		return err
	}
	if compute != nil {
		// later kernels wait for the collective on the device; the event
		// may be recorded again once w is over: the wait keeps this record
		return cudaCheck("cudaStreamWaitEvent(compute)", C.dg_nccl_stream_wait(dev, compute, w.ev))
	}
	return nil
}

// computeStream is the handle of the rank's compute stream for an
// operation called with ctx (nccl's doc, Ordering), nil when there is none
// or it is the communication stream itself.
func (c *ncclComm) computeStream(ctx context.Context) unsafe.Pointer {
	s := c.compute
	if be, ok := backend.FromContext(ctx); ok {
		if cb, ok := be.(interface{ Stream() *cuda.Stream }); ok && cb.Stream() != nil && cb.Stream().Device() == c.dev {
			s = cb.Stream()
		}
	}
	if s == nil || s.Handle() == nil || s.Handle() == c.stream.Handle() {
		return nil
	}
	return s.Handle()
}

// afterCompute makes the communication stream wait for the work queued on
// the compute stream so far. Called with c.mu held (c.before is reused:
// cudaStreamWaitEvent takes the record as it is at the call).
func (c *ncclComm) afterCompute(compute unsafe.Pointer) error {
	dev := C.int(c.dev)
	if c.before == nil {
		var ev unsafe.Pointer
		if err := cudaCheck("cudaEventCreate", C.dg_nccl_event_create(dev, &ev)); err != nil {
			return err
		}
		c.before = ev
	}
	if err := cudaCheck("cudaEventRecord(compute)", C.dg_nccl_event_record(dev, c.before, compute)); err != nil {
		return err
	}
	return cudaCheck("cudaStreamWaitEvent", C.dg_nccl_stream_wait(dev, c.stream.Handle(), c.before))
}

// watch polls until w is over; polling (10 µs backing off to 1 ms, as
// cuda.Stream does) is what lets a deadline or a cancelled ctx end it.
func (w *work) watch(ctx context.Context, deadline time.Time) {
	c := w.c
	for wait := 10 * time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		done, err := c.progress(w)
		if done {
			c.recycle(w.ev)
			w.finish(nil)
			return
		}
		if err == nil {
			err = expired(ctx, deadline)
		}
		if err != nil {
			e := c.errorf(w.op, err)
			c.mu.Lock()
			c.breakLocked(e)
			c.mu.Unlock()
			if c.drain(w.ev) {
				c.recycle(w.ev)
			} // else the event is leaked: the stream may still use it
			w.finish(e)
			return
		}
		time.Sleep(wait)
	}
}

// progress reports whether w's event completed, after checking the
// communicator for asynchronous errors (a failed peer, a network error).
func (c *ncclComm) progress(w *work) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.unusableLocked(); err != nil {
		return false, err
	}
	var st C.ncclResult_t
	if err := check("ncclCommGetAsyncError", c.h, C.dg_nccl_async_error(c.h, &st), 0); err != nil {
		return false, err
	}
	if err := check("NCCL (asynchronous)", c.h, st, 0); err != nil {
		return false, err
	}
	var done C.int
	if err := cudaCheck("cudaEventQuery", C.dg_nccl_event_query(w.ev, &done)); err != nil {
		return false, err
	}
	return done != 0, nil
}

// drain waits up to abortGrace for ev after an abort.
func (c *ncclComm) drain(ev unsafe.Pointer) bool {
	for end := time.Now().Add(abortGrace); time.Now().Before(end); time.Sleep(time.Millisecond) {
		var done C.int
		if C.dg_nccl_event_query(ev, &done) != 0 {
			return false
		}
		if done != 0 {
			return true
		}
	}
	return false
}

// recycle returns an event to the pool, or destroys it once closed.
func (c *ncclComm) recycle(ev unsafe.Pointer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		C.dg_nccl_event_destroy(C.int(c.dev), ev)
		return
	}
	c.events = append(c.events, ev)
}
