package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// errClosed is returned for work issued on a closed stream.
var errClosed = errors.New("stream closed")

// task is one entry of a stream's queue.
type task struct {
	op     string       // kernel name, for a sticky error
	run    func() error // nil: a marker that only closes mark
	kernel bool         // delayed in delay mode; its error is sticky
	copy   bool         // a CopyAsync: counts as overlapped if a kernel runs meanwhile
	mark   chan struct{}
	wait   <-chan struct{} // run after this closes (Stream.Wait)
	done   chan error      // receives the device's error once run (a waited kernel)
}

// Stream is an in-order queue of work on a simulated device, run by its
// own goroutine, like a CUDA stream: work issued on one stream runs in
// issue order; work on two streams runs in no defined order unless an
// Event orders it. Safe for concurrent use.
type Stream struct {
	d    *device
	id   int
	rng  *rand.Rand // the worker's alone
	mu   sync.Mutex
	q    []task
	wake chan struct{}
	shut bool
	done chan struct{} // closed when the worker has run everything and left
}

func newStream(d *device, id int) *Stream {
	s := &Stream{d: d, id: id, wake: make(chan struct{}, 1), done: make(chan struct{}),
		rng: rand.New(rand.NewPCG(uint64(d.opts.Seed), uint64(id)))}
	go s.work()
	return s
}

func (s *Stream) String() string { return fmt.Sprintf("%v stream %d", s.d.dev, s.id) }

func (s *Stream) push(t task) error {
	s.mu.Lock()
	if s.shut {
		s.mu.Unlock()
		return fmt.Errorf("sim: %v: %w", s, errClosed)
	}
	s.q = append(s.q, t)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// work runs the queue until the stream is closed and drained.
func (s *Stream) work() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.q) == 0 {
			if s.shut {
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			<-s.wake
			s.mu.Lock()
		}
		t := s.q[0]
		s.q[0] = task{}
		s.q = s.q[1:]
		s.mu.Unlock()
		s.run(t)
	}
}

func (s *Stream) run(t task) {
	if t.wait != nil {
		<-t.wait
	}
	// the delay is a kernel's running time, and a copy's transfer
	busy := t.kernel && !t.copy
	if busy {
		s.d.busy.Add(1)
	}
	overlapped := t.copy && s.d.busy.Load() > 0
	if t.kernel && s.d.opts.MaxDelay > 0 {
		time.Sleep(time.Duration(s.rng.Int64N(int64(s.d.opts.MaxDelay))))
	}
	if t.run != nil {
		if err := t.run(); err != nil && t.kernel {
			s.d.fail(t.op, err)
		}
	}
	if busy {
		s.d.busy.Add(-1)
	}
	if t.copy && (overlapped || s.d.busy.Load() > 0) {
		s.d.overlapped.Add(1)
	}
	if t.mark != nil {
		close(t.mark)
	}
	if t.done != nil {
		t.done <- s.d.sticky()
	}
}

// exec is the Executor of the backend view on s: it queues kernel, and
// when wait is set returns once it has run.
func (s *Stream) exec(op string, wait bool, kernel func() error) error {
	if err := s.d.sticky(); err != nil {
		return err
	}
	t := task{op: op, run: kernel, kernel: true}
	if wait {
		t.done = make(chan error, 1)
	}
	if err := s.push(t); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if wait {
		return <-t.done
	}
	return nil
}

// mark queues a marker and returns the channel closed when the stream
// reaches it; on a closed stream, the channel closed once it has drained.
func (s *Stream) mark() <-chan struct{} {
	ch := make(chan struct{})
	if s.push(task{mark: ch}) != nil {
		return s.done
	}
	return ch
}

// Synchronize waits until the work issued on s so far is done, or ctx
// ends, and returns the device's sticky error if a kernel failed.
func (s *Stream) Synchronize(ctx context.Context) error {
	select {
	case <-s.mark():
	case <-ctx.Done():
		return fmt.Errorf("sim: %v: Synchronize: %w", s, ctx.Err())
	}
	return s.d.sticky()
}

// Wait makes the stream (not the host) wait for the work e last captured
// before running what is issued on it next, like cudaStreamWaitEvent. An
// event never recorded is no wait.
func (s *Stream) Wait(e *Event) error {
	if e == nil {
		return fmt.Errorf("sim: %v: Wait: event is nil", s)
	}
	ch := e.last()
	if ch == nil {
		return nil
	}
	return s.push(task{wait: ch})
}

// Close waits for the stream's work and ends it; later work on it fails.
// The backend's own stream is closed by the backend's Close.
func (s *Stream) Close() error {
	s.mu.Lock()
	s.shut = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	s.d.forget(s)
	return nil
}

// Event marks a point in a stream's work, like a CUDA event: Record
// captures the work issued on a stream so far, Stream.Wait orders another
// stream after it, Synchronize makes the host wait for it.
type Event struct {
	mu sync.Mutex
	at <-chan struct{}
	d  *device
}

// NewEvent makes an event of b's device, not yet recorded.
func (b *Backend) NewEvent() *Event { return &Event{d: b.d} }

// Record captures the work issued on s so far (nil: the backend's stream
// is not known here, so nil is an error).
func (e *Event) Record(s *Stream) error {
	if s == nil {
		return errors.New("sim: Event.Record: stream is nil")
	}
	ch := s.mark()
	e.mu.Lock()
	e.at = ch
	e.mu.Unlock()
	return nil
}

func (e *Event) last() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at
}

// Synchronize waits until the captured work is done, or ctx ends, and
// returns the device's sticky error if a kernel failed. An event never
// recorded is done.
func (e *Event) Synchronize(ctx context.Context) error {
	if ch := e.last(); ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("sim: %v: Event.Synchronize: %w", e.d.dev, ctx.Err())
		}
	}
	return e.d.sticky()
}
