package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// kernels is what a Backend runs through its CPU view.
type kernels interface {
	backend.Backend
	backend.NN
	backend.GradWriter
	backend.Quantizer
}

// Backend is a backend.Backend, backend.NN and optim.KernelSource on a
// simulated device: every kernel runs the CPU backend's C call (the same
// element math, so the same result bits) on the goroutine of a Stream,
// after the call that issued it has returned. Safe for concurrent use.
type Backend struct {
	kernels // the CPU view whose C calls go to s
	view    *backend.CPU
	d       *device
	s       *Stream
	owner   bool // made by NewBackend: Close ends the device
}

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.NN         = (*Backend)(nil)
	_ backend.GradWriter = (*Backend)(nil)
	_ backend.Quantizer  = (*Backend)(nil)
	_ optim.KernelSource = (*Backend)(nil)
)

// NewBackend makes simulated device dev (tensor.Sim(dev)) with its own
// memory, C thread pool and compute stream.
func NewBackend(dev int, opts Options) (*Backend, error) {
	if dev < 0 {
		return nil, fmt.Errorf("sim.NewBackend: dev = %d: must be >= 0", dev)
	}
	o, err := opts.resolve()
	if err != nil {
		return nil, fmt.Errorf("sim.NewBackend: %w", err)
	}
	cpu, err := backend.NewCPU(o.Threads)
	if err != nil {
		return nil, fmt.Errorf("sim.NewBackend: %w", err)
	}
	d := &device{dev: tensor.Sim(dev), opts: o, cpu: cpu, streams: map[*Stream]struct{}{}}
	s, err := d.newStream()
	if err != nil {
		cpu.Close()
		return nil, err
	}
	b := d.backendOn(s)
	b.owner = true
	return b, nil
}

func (d *device) backendOn(s *Stream) *Backend {
	v := d.cpu.On(d.dev, s.exec)
	return &Backend{kernels: v, view: v, d: d, s: s}
}

// Name describes the device, e.g. "sim:0 (cpu(avx2, 2 threads), max delay 200µs)".
func (b *Backend) Name() string {
	return fmt.Sprintf("%v (%s, max delay %v)", b.d.dev, b.d.cpu.Name(), b.d.opts.MaxDelay)
}

// MaxDelay is the bound of the random sleep before each kernel (0: none).
func (b *Backend) MaxDelay() time.Duration { return b.d.opts.MaxDelay }

// Stream is the stream this backend's kernels and copies are issued on.
func (b *Backend) Stream() *Stream { return b.s }

// NewStream makes another stream on the device; close it when done (the
// device's Close closes any left).
func (b *Backend) NewStream() (*Stream, error) { return b.d.newStream() }

// On returns a backend of the same device that issues its work on s (made
// by this device's NewStream); its Close does nothing.
func (b *Backend) On(s *Stream) (*Backend, error) {
	if s == nil || s.d != b.d {
		return nil, fmt.Errorf("sim: %v: On: stream %v is not one of this device's", b.d.dev, s)
	}
	return b.d.backendOn(s), nil
}

// Empty allocates a zeroed tensor in the device's memory. Go code cannot
// read or write it (tensor.Float32s and friends refuse it); Copy moves data
// in and out. Its Free is stream-ordered: the memory goes once the work
// issued before the Free on every stream of the device has run.
func (b *Backend) Empty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	return b.d.alloc(dt, shape)
}

// Synchronize waits until the work issued on this backend's stream is
// done, or ctx ends, and returns the device's sticky error (the first
// kernel failure, naming the kernel) if any.
func (b *Backend) Synchronize(ctx context.Context) error { return b.s.Synchronize(ctx) }

// OptimKernels runs optim's CPU kernels on this backend's stream, in order
// with its other work; Step with trust ratios (Lamb) and UnscaleCheck
// wait for their results.
func (b *Backend) OptimKernels() (optim.Kernels, error) { return optim.NewCPUKernels(b.view), nil }

// Close waits for all work on the device, closes its streams and stops its
// thread pool. On a backend made by On it does nothing.
func (b *Backend) Close() error {
	if !b.owner {
		return nil
	}
	return b.d.close()
}
