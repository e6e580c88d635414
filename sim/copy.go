package sim

import (
	"context"
	"fmt"
	"hash/crc32"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

var _ backend.HostStager = (*Backend)(nil)

// poison is the byte a host destination of CopyAsync is filled with until
// the copy lands: every float dtype reads it as NaN, so code that reads
// the destination before Wait computes NaN rather than stale numbers.
const poison = 0xFF

// CopyStats counts this device's copies: the asynchronous ones
// (CopyAsync), and the bytes every copy (Copy and CopyAsync, on any of
// its streams) moved between host memory and the device's.
type CopyStats struct {
	// Async is the number of copies started.
	Async int64
	// Overlapped is how many of them ran, delay included, while a kernel
	// of some stream was running: copy and compute overlapped.
	Overlapped int64
	// ToHostBytes and FromHostBytes are the bytes copied from the
	// device's memory into host memory and the other way.
	ToHostBytes, FromHostBytes int64
}

// CopyStats reports the device's copies so far.
func (b *Backend) CopyStats() CopyStats {
	return CopyStats{Async: b.d.async.Load(), Overlapped: b.d.overlapped.Load(),
		ToHostBytes: b.d.toHost.Load(), FromHostBytes: b.d.fromHost.Load()}
}

// Copy is backend.Backend's Copy (the CPU view's), counted in CopyStats.
func (b *Backend) Copy(dst, src *tensor.Tensor) error {
	if err := b.kernels.Copy(dst, src); err != nil {
		return err
	}
	b.d.counted(dst.Device().IsCPU(), src.Device().IsCPU(), dst.Bytes())
	return nil
}

// counted adds a copy of n bytes to the transfer counts.
func (d *device) counted(dstHost, srcHost bool, n int) {
	switch {
	case dstHost && !srcHost:
		d.toHost.Add(int64(n))
	case srcHost && !dstHost:
		d.fromHost.Add(int64(n))
	}
}

// HostEmpty allocates aligned host memory: the simulated device reads the
// host's memory directly, there is nothing to page-lock.
func (b *Backend) HostEmpty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	return tensor.Empty(dt, shape...)
}

// CopyAsync queues the copy on the device's copy stream, after the work
// issued on b's stream so far, with the delay mode's random sleep as its
// transfer time. It enforces the rule that neither side is touched before
// Wait where the host can see it: a host destination reads as NaN
// (poison bytes) until the copy lands, and a host destination written or a
// host source changed between CopyAsync and the copy fails the copy with a
// sticky error naming it.
func (b *Backend) CopyAsync(dst, src *tensor.Tensor) (backend.Copying, error) {
	const op = "CopyAsync"
	dstHost, srcHost, err := backend.CheckCopy(op, dst, src, b.d.dev)
	if err != nil {
		return nil, err
	}
	if err := b.d.sticky(); err != nil {
		return nil, err
	}
	cs, err := b.d.copyStream()
	if err != nil {
		return nil, err
	}
	d, s := raw(dst), raw(src)
	var sum uint32
	if srcHost {
		sum = crc32.ChecksumIEEE(s)
	}
	if dstHost {
		for i := range d {
			d[i] = poison
		}
	}
	run := func() error {
		if srcHost && crc32.ChecksumIEEE(s) != sum {
			return fmt.Errorf("host source %v changed before the copy's Wait", src)
		}
		if dstHost && !poisoned(d) {
			return fmt.Errorf("host destination %v written before the copy's Wait", dst)
		}
		copy(d, s)
		return nil
	}
	done := make(chan struct{})
	after := b.s.mark() // the work issued on b's stream so far
	if err := cs.push(task{op: op, wait: after, run: run, kernel: true, copy: true, mark: done}); err != nil {
		return nil, fmt.Errorf("sim: %v: %s: %w", b.d.dev, op, err)
	}
	b.d.async.Add(1)
	b.d.counted(dstHost, srcHost, dst.Bytes())
	return &copying{d: b.d, done: done}, nil
}

// copyStream is the device's stream for CopyAsync, made at the first.
func (d *device) copyStream() (*Stream, error) {
	d.copyMu.Lock()
	defer d.copyMu.Unlock()
	if d.copies == nil {
		s, err := d.newStream()
		if err != nil {
			return nil, err
		}
		d.copies = s
	}
	return d.copies, nil
}

func poisoned(b []byte) bool {
	for _, x := range b {
		if x != poison {
			return false
		}
	}
	return true
}

// raw is a checked tensor's bytes, wherever it lives.
func raw(t *tensor.Tensor) []byte {
	if t.Bytes() == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(t.Ptr()), t.Bytes())
}

// copying is a CopyAsync in flight.
type copying struct {
	d    *device
	done chan struct{}
}

func (c *copying) Done() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *copying) Wait(ctx context.Context) error {
	select {
	case <-c.done:
	case <-ctx.Done():
		return fmt.Errorf("sim: %v: waiting for CopyAsync: %w", c.d.dev, ctx.Err())
	}
	return c.d.sticky()
}
