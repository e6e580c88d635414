package aio

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/csrc"
)

// Align is the alignment O_DIRECT asks of buffers, offsets and sizes.
const Align = csrc.AIOAlign

// Backend is how the engine moves pieces.
type Backend int

// Back ends.
const (
	// BackendAuto takes io_uring and falls back to threads when refused.
	BackendAuto Backend = Backend(csrc.AIOAuto)
	// BackendURing is io_uring, or an error where the kernel refuses it.
	BackendURing Backend = Backend(csrc.AIOURing)
	// BackendThreads is the pread/pwrite thread pool.
	BackendThreads Backend = Backend(csrc.AIOThreads)
)

func (b Backend) String() string {
	switch b {
	case BackendAuto:
		return "auto"
	case BackendURing:
		return "io_uring"
	case BackendThreads:
		return "threads"
	}
	return fmt.Sprintf("Backend(%d)", int(b))
}

// EnvBackend names the environment variable that overrides BackendAuto.
const EnvBackend = "DEEPGO_AIO"

// FaultKind is a fault the engine injects, for tests of error handling.
type FaultKind int

// Faults.
const (
	FaultNone FaultKind = FaultKind(csrc.AIOFaultNone)
	// FaultErrno makes a transfer fail with Fault.Errno.
	FaultErrno FaultKind = FaultKind(csrc.AIOFaultErrno)
	// FaultShort makes a transfer move half its bytes; the engine resumes it.
	FaultShort FaultKind = FaultKind(csrc.AIOFaultShort)
	// FaultEOF makes a transfer move nothing, as at the end of a file.
	FaultEOF FaultKind = FaultKind(csrc.AIOFaultEOF)
)

// FaultOp is the transfers a Fault counts.
type FaultOp int

// Fault ops.
const (
	// FaultAnyOp counts reads and writes.
	FaultAnyOp FaultOp = FaultOp(csrc.AIOOpAny)
	// FaultRead counts reads only.
	FaultRead FaultOp = FaultOp(csrc.AIOOpRead)
	// FaultWrite counts writes only.
	FaultWrite FaultOp = FaultOp(csrc.AIOOpWrite)
)

// Fault replaces the At-th raw transfer result of Op (0-based, over the
// engine's life or since InjectFault, retries included) for tests. With
// one thread and QueueDepth 1 the At-th result is the At-th block.
type Fault struct {
	Kind  FaultKind
	Errno syscall.Errno
	At    int64
	Op    FaultOp
}

// Options configure an engine; FromConfig fills them from the aio section.
type Options struct {
	// BlockSize is the bytes per piece, a multiple of Align.
	BlockSize int
	// QueueDepth is the pieces each worker keeps in flight.
	QueueDepth int
	// Threads is the number of workers (intra_op_parallelism); the thread
	// back end runs Threads*QueueDepth blocking threads.
	Threads int
	// SingleSubmit submits each piece on its own system call.
	SingleSubmit bool
	// OverlapEvents refills the queue as pieces complete rather than per batch.
	OverlapEvents bool
	// Backend picks io_uring or the thread pool.
	Backend Backend
	// Buffered opens files without O_DIRECT, for file systems without it
	// (tmpfs); I/O then goes through the page cache.
	Buffered bool
	// Fault is injected by the engine; tests only.
	Fault Fault
}

// FromConfig turns the aio section into Options.
func FromConfig(c config.AIO) Options {
	return Options{BlockSize: c.BlockSize, QueueDepth: c.QueueDepth, Threads: c.IntraOpParallelism,
		SingleSubmit: c.SingleSubmit, OverlapEvents: c.OverlapEvents}
}

// Stats are the engine's counters since it opened.
type Stats struct {
	Pieces, Retries, Resumed, Fixed int64
	Backend                         Backend
	// ReadBytes and WriteBytes are the bytes of the requests submitted
	// (padded as moved); Busy is the wall time during which at least one
	// request was submitted and not yet finished.
	ReadBytes, WriteBytes int64
	Busy                  time.Duration
}

// ErrClosed is returned for work submitted to a closed engine.
var ErrClosed = errors.New("aio: engine closed")

// Engine is an open I/O engine. Its methods are safe for concurrent use.
type Engine struct {
	c        *csrc.AIO
	buffered bool
	backend  Backend

	mu      sync.Mutex
	closed  bool
	pending map[int64]*Request
	reaped  chan struct{}
	// under mu: I/O counters (Stats)
	readBytes, writeBytes int64
	busy                  time.Duration
	busySince             time.Time
}

func (o Options) check() error {
	switch {
	case o.BlockSize <= 0 || o.BlockSize%Align != 0 || o.BlockSize > 1<<30:
		return fmt.Errorf("aio: block_size %d: want a positive multiple of %d up to 1 GiB", o.BlockSize, Align)
	case o.QueueDepth < 1 || o.QueueDepth > 4096:
		return fmt.Errorf("aio: queue_depth %d: want 1..4096", o.QueueDepth)
	case o.Threads < 1 || o.Threads > 256:
		return fmt.Errorf("aio: intra_op_parallelism %d: want 1..256", o.Threads)
	case o.Backend < BackendAuto || o.Backend > BackendThreads:
		return fmt.Errorf("aio: backend %d: want auto, io_uring or threads", int(o.Backend))
	}
	return o.Fault.check()
}

func (f Fault) check() error {
	switch {
	case f.Kind < FaultNone || f.Kind > FaultEOF || f.At < 0:
		return fmt.Errorf("aio: fault %+v: want a known kind at a non-negative index", f)
	case f.Kind == FaultErrno && f.Errno == 0:
		return errors.New("aio: fault kind errno without an errno")
	case f.Op < FaultAnyOp || f.Op > FaultWrite:
		return fmt.Errorf("aio: fault op %d: want any, read or write", int(f.Op))
	}
	return nil
}

func envBackend() (Backend, error) {
	switch v := os.Getenv(EnvBackend); v {
	case "", "auto":
		return BackendAuto, nil
	case "threads":
		return BackendThreads, nil
	case "uring", "io_uring":
		return BackendURing, nil
	default:
		return 0, fmt.Errorf("aio: %s=%q: want threads, uring or auto", EnvBackend, v)
	}
}

// Open starts an engine. With BackendAuto, DEEPGO_AIO may force a back end.
func Open(o Options) (*Engine, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Backend == BackendAuto {
		b, err := envBackend()
		if err != nil {
			return nil, err
		}
		o.Backend = b
	}
	c, err := csrc.AIOOpen(csrc.AIOConfig{
		BlockSize: int64(o.BlockSize), QueueDepth: o.QueueDepth, ThreadCount: o.Threads,
		SingleSubmit: o.SingleSubmit, OverlapEvents: o.OverlapEvents, Backend: csrc.AIOBackend(o.Backend),
		Inject: csrc.AIOFault(o.Fault.Kind), InjectErrno: int(o.Fault.Errno), InjectAt: o.Fault.At,
		InjectOp: csrc.AIOOp(o.Fault.Op),
	})
	if errors.Is(err, csrc.Unsupported) {
		return nil, fmt.Errorf("aio: not supported: the kernel refuses io_uring here (old kernel or seccomp); use backend auto or threads: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("aio: open engine: %w", err)
	}
	e := &Engine{c: c, buffered: o.Buffered, backend: Backend(c.Stats().Backend),
		pending: map[int64]*Request{}, reaped: make(chan struct{})}
	go e.reap()
	return e, nil
}

// InjectFault arms f on the running engine, for tests: its At counts from
// now. Fault{} disarms.
func (e *Engine) InjectFault(f Fault) error {
	if err := f.check(); err != nil {
		return err
	}
	if err := e.c.Inject(csrc.AIOFault(f.Kind), int(f.Errno), csrc.AIOOp(f.Op), f.At); err != nil {
		return fmt.Errorf("aio: inject %+v: %w", f, err)
	}
	return nil
}

// Backend reports the back end in use (never BackendAuto).
func (e *Engine) Backend() Backend { return e.backend }

// Stats reports the engine's counters.
func (e *Engine) Stats() Stats {
	s := e.c.Stats()
	e.mu.Lock()
	defer e.mu.Unlock()
	busy := e.busy
	if len(e.pending) > 0 {
		busy += time.Since(e.busySince)
	}
	return Stats{Pieces: s.Pieces, Retries: s.Retries, Resumed: s.Resumed, Fixed: s.Fixed, Backend: Backend(s.Backend),
		ReadBytes: e.readBytes, WriteBytes: e.writeBytes, Busy: busy}
}

// reap hands each finished request to its waiters: one blocking C call per
// batch of completions, until Close has drained the engine.
func (e *Engine) reap() {
	defer close(e.reaped)
	out := make([]csrc.AIOResult, 64)
	for {
		n, err := e.c.Reap(out, false)
		if err != nil || n == 0 {
			return
		}
		e.mu.Lock()
		for _, r := range out[:n] {
			req := e.pending[r.ID]
			delete(e.pending, r.ID)
			if req != nil {
				req.finish(r)
			}
		}
		if len(e.pending) == 0 {
			e.busy += time.Since(e.busySince)
		}
		e.mu.Unlock()
	}
}

// Close waits for every submitted request to finish, then stops the engine
// and closes its files. Buffers stay the caller's to Free.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.c.Shutdown()
	<-e.reaped
	e.c.Destroy()
	return nil
}
