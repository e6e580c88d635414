package sim

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
)

// device is the state the backends of one simulated device share: the C
// pool, the live streams, the sticky error and the frees in flight.
type device struct {
	dev  tensor.Device
	opts Options
	cpu  *backend.CPU // owns the C pool

	mu      sync.Mutex
	streams map[*Stream]struct{}
	next    int
	err     error // sticky: the first kernel failure
	closed  bool
	frees   sync.WaitGroup

	busy       atomic.Int64 // kernels running now, on any stream
	copyMu     sync.Mutex
	copies     *Stream      // CopyAsync's stream, made at the first
	async      atomic.Int64 // CopyAsync calls
	overlapped atomic.Int64 // of those, the ones that ran while a kernel did
	toHost     atomic.Int64 // bytes Copy and CopyAsync moved to host memory
	fromHost   atomic.Int64 // and from it

	allocated tensor.MemCounter // bytes of live tensors (down at Free)
	reserved  tensor.MemCounter // and of freed ones whose stream-ordered free has not run
}

func (d *device) newStream() (*Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("sim: %v: NewStream: %w", d.dev, errClosed)
	}
	s := newStream(d, d.next)
	d.next++
	d.streams[s] = struct{}{}
	return s, nil
}

func (d *device) forget(s *Stream) {
	d.mu.Lock()
	delete(d.streams, s)
	d.mu.Unlock()
}

// fail records the first kernel failure; like a CUDA sticky error it is
// returned by every later call that reports errors.
func (d *device) fail(op string, err error) {
	d.mu.Lock()
	if d.err == nil {
		d.err = fmt.Errorf("sim: %v: kernel %s failed: %w", d.dev, op, err)
	}
	d.mu.Unlock()
}

func (d *device) sticky() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// free releases p once every stream has run the work issued on it before
// the Free, like cudaFreeAsync: a kernel still queued never sees its
// memory go. n leaves the allocated count at once and the reserved one
// when the memory goes.
func (d *device) free(p unsafe.Pointer, n int64) {
	d.allocated.Add(-n)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		csrc.Free(p)
		d.reserved.Add(-n)
		return
	}
	marks := make([]<-chan struct{}, 0, len(d.streams))
	for s := range d.streams {
		marks = append(marks, s.mark())
	}
	d.frees.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.frees.Done()
		for _, m := range marks {
			<-m
		}
		csrc.Free(p)
		d.reserved.Add(-n)
	}()
}

// alloc allocates a zeroed tensor in the device's memory: C memory the
// host addresses, marked as the device's so that Go accessors refuse it.
func (d *device) alloc(dt tensor.DType, shape []int) (*tensor.Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("sim: %v: Empty: dtype %v: not a valid dtype", d.dev, dt)
	}
	n := 1
	for i, k := range shape {
		if k < 0 {
			return nil, fmt.Errorf("sim: %v: Empty: shape[%d] = %d: must be >= 0", d.dev, i, k)
		}
		if k > 0 && n > (1<<62)/dt.Size()/k {
			return nil, fmt.Errorf("sim: %v: Empty: shape %v: more than 2^62 bytes", d.dev, shape)
		}
		n *= k
	}
	p, err := csrc.Alloc(n*dt.Size(), tensor.HostAlign)
	if err != nil {
		return nil, fmt.Errorf("sim: %v: Empty(%v%v): %w", d.dev, dt, shape, err)
	}
	nb := int64(n * dt.Size())
	d.allocated.Add(nb)
	d.reserved.Add(nb)
	st := tensor.WrapStorage(p, n*dt.Size(), d.dev, func(p unsafe.Pointer) { d.free(p, nb) })
	t, err := tensor.FromStorage(st, dt, 0, shape...)
	if err != nil {
		st.Free()
		return nil, fmt.Errorf("sim: %v: %w", d.dev, err)
	}
	return t, nil
}

// close drains and ends every stream, lets the queued frees finish, and
// stops the pool.
func (d *device) close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	streams := make([]*Stream, 0, len(d.streams))
	for s := range d.streams {
		streams = append(streams, s)
	}
	d.mu.Unlock()
	for _, s := range streams {
		s.Close()
	}
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.frees.Wait()
	return d.cpu.Close()
}
