package offload

// The parameter swapper of offload_param.device "nvme" (ZeRO-Infinity):
// each ZeRO-3 rank's partition of the working-precision parameters lives in
// one swap file and is paged through buffer_count host buffers of at most
// buffer_size elements. Partitions are placed in unit order; while their
// running total stays within max_in_cpu elements they are kept in host
// memory instead and never touch the file (DeepSpeed's "parameter elements
// to maintain in CPU memory"). A buffer is free, reading (a prefetch), ready
// (read, not yet taken) or acquired (the caller gathers from it); a
// prefetch takes only free buffers, an Acquire may evict a ready one.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/deepgo-ml/deepgo/aio"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/tensor"
)

// ParamSwapOptions configure a ParamSwapper.
type ParamSwapOptions struct {
	// Path is offload_param.nvme_path; the swapper works in a folder of its
	// own under it, one per rank.
	Path string
	// Rank names the folder.
	Rank int
	// BufferCount and BufferSize (elements) are offload_param.buffer_count
	// and buffer_size: the host buffers swapped partitions pass through.
	BufferCount, BufferSize int
	// MaxInCPU is offload_param.max_in_cpu: elements kept in host memory.
	MaxInCPU int
	// AIO configures the I/O engine (the aio section).
	AIO aio.Options
}

// ParamSwapOptionsFromConfig reads offload_param and aio for rank.
func ParamSwapOptionsFromConfig(c *config.Config, rank int) (ParamSwapOptions, error) {
	op := c.ZeroOptimization.OffloadParam
	if op == nil || op.Device != "nvme" || op.NvmePath == nil || *op.NvmePath == "" {
		return ParamSwapOptions{}, errors.New(`offload: zero_optimization.offload_param: want device "nvme" with an nvme_path`)
	}
	return ParamSwapOptions{Path: *op.NvmePath, Rank: rank, BufferCount: op.BufferCount, BufferSize: op.BufferSize,
		MaxInCPU: op.MaxInCPU, AIO: aio.FromConfig(c.AIO)}, nil
}

// ParamSwapDir is the folder of rank's parameter swap file under path.
func ParamSwapDir(path string, rank int) string {
	return filepath.Join(path, fmt.Sprintf("deepgo-param-swap-rank%d", rank))
}

// ParamSwapper keeps partitions of one dtype in a swap file and host
// memory. Its methods are safe for concurrent use, but a partition must be
// released before it is acquired or written again.
type ParamSwapper struct {
	eng   *aio.Engine
	dir   string
	lock  *swapLock // dir, for this run
	file  *aio.File
	dt    tensor.DType
	parts []paramPart

	mu              sync.Mutex
	bufs            []*paramBuf
	inCPU           int64 // bytes of the partitions kept in host memory
	disk            int64 // bytes of the partitions in the file
	reads, prefetch int64 // reads from the file, and of those the ones a Prefetch started
	writes          int64
}

// paramPart is one partition: in host memory (cpu) or at off in the file.
type paramPart struct {
	name    string
	n       int
	off     int64
	cpu     *tensor.Tensor
	written bool
}

// paramBuf is one swap buffer and the partition it holds (unit -1: none).
type paramBuf struct {
	buf      *aio.Buffer
	unit     int
	req      *aio.Request // the read in flight or done, nil once waited for
	acquired bool
}

// NewParamSwapper opens the engine and an empty swap folder (one an earlier
// run left behind is removed) for partitions of sizes[u] elements of dt,
// named names[u] in errors. Partitions kept in host memory are allocated
// now; a partition that goes to the file must fit buffer_size.
func NewParamSwapper(o ParamSwapOptions, dt tensor.DType, names []string, sizes []int) (*ParamSwapper, error) {
	if o.Path == "" {
		return nil, errors.New("offload: offload_param.nvme_path is empty")
	}
	if o.BufferCount < 1 || o.BufferSize < 1 || o.MaxInCPU < 0 {
		return nil, fmt.Errorf("offload: offload_param buffer_count %d, buffer_size %d, max_in_cpu %d: want buffer_count >= 1, buffer_size >= 1, max_in_cpu >= 0", o.BufferCount, o.BufferSize, o.MaxInCPU)
	}
	if len(names) != len(sizes) {
		return nil, fmt.Errorf("offload: %d partition names for %d sizes", len(names), len(sizes))
	}
	s := &ParamSwapper{dt: dt, parts: make([]paramPart, len(sizes))}
	es := int64(dt.Size())
	kept, largest := 0, 0
	var off int64
	for u, n := range sizes {
		p := &s.parts[u]
		p.name, p.n = names[u], n
		if kept+n <= o.MaxInCPU {
			kept += n
			p.written = true // marks it kept; allocated below
			continue
		}
		if n > o.BufferSize {
			return nil, fmt.Errorf("offload: not supported: partition %s has %d elements, more than zero_optimization.offload_param.buffer_size=%d (a swapped partition must fit one buffer; raise buffer_size or max_in_cpu)", p.name, n, o.BufferSize)
		}
		largest = max(largest, n)
		p.off = off
		off += alignUp(int64(n) * es)
	}
	ok := false
	defer func() {
		if !ok {
			_ = s.Close()
		}
	}()
	for u := range s.parts {
		p := &s.parts[u]
		if !p.written {
			continue
		}
		t, err := tensor.Empty(dt, max(p.n, 1))
		if err != nil {
			return nil, fmt.Errorf("offload: partition %s in host memory: %w", p.name, err)
		}
		if p.cpu, err = t.Slice(0, p.n); err != nil {
			t.Free()
			return nil, err
		}
		s.inCPU += int64(p.n * dt.Size())
	}
	if largest == 0 {
		ok = true
		return s, nil // everything fits max_in_cpu: no file, no engine
	}
	lock, err := lockSwapDir("offload_param.nvme_path", o.Path, ParamSwapDir(o.Path, o.Rank))
	if err != nil {
		return nil, err
	}
	s.dir, s.lock = ParamSwapDir(o.Path, o.Rank), lock
	if err := os.RemoveAll(s.dir); err != nil {
		return nil, fmt.Errorf("offload: removing the parameter swap folder of an earlier run: %w", err)
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("offload: offload_param.nvme_path %q: %w", o.Path, err)
	}
	if s.eng, err = aio.Open(o.AIO); err != nil {
		return nil, err
	}
	if s.file, err = s.eng.OpenFile(filepath.Join(s.dir, "params.swp"), os.O_RDWR|os.O_CREATE|os.O_TRUNC); err != nil {
		return nil, err
	}
	for range o.BufferCount {
		// sized for the largest swapped partition (rounded up to aio.Align
		// bytes): buffer_size is the bound, not the allocation
		b, err := s.eng.NewBuffer(largest * dt.Size())
		if err != nil {
			return nil, fmt.Errorf("offload: parameter swap buffer of %d elements: %w", largest, err)
		}
		s.bufs = append(s.bufs, &paramBuf{buf: b, unit: -1})
	}
	ok = true
	return s, nil
}

func alignUp(n int64) int64 { return (n + aio.Align - 1) &^ (aio.Align - 1) }

// Dir is the swap folder ("" when every partition is kept in host memory).
func (s *ParamSwapper) Dir() string { return s.dir }

// Buffers is how many partitions can surely be acquired at once:
// buffer_count, or every partition when none is swapped.
func (s *ParamSwapper) Buffers() int {
	if len(s.bufs) == 0 {
		return len(s.parts)
	}
	return len(s.bufs)
}

func (s *ParamSwapper) part(u int) (*paramPart, error) {
	if u < 0 || u >= len(s.parts) {
		return nil, fmt.Errorf("offload: partition %d: want 0..%d", u, len(s.parts)-1)
	}
	return &s.parts[u], nil
}

func (s *ParamSwapper) view(b *paramBuf, n int) (*tensor.Tensor, error) {
	st := tensor.WrapStorage(b.buf.Ptr(), b.buf.Cap(), tensor.CPU, nil)
	return tensor.FromStorage(st, s.dt, 0, n)
}

// ioErr names the partition, the file and the offset of a failed transfer.
func (s *ParamSwapper) ioErr(op string, p *paramPart, err error) error {
	return fmt.Errorf("offload: %s of parameter partition %s (%s at offset %d): %w", op, p.name, s.file.Path(), p.off, err)
}

// holding returns the buffer holding partition u, or nil.
func (s *ParamSwapper) holding(u int) *paramBuf {
	for _, b := range s.bufs {
		if b.unit == u {
			return b
		}
	}
	return nil
}

// take returns a free buffer; evict allows taking one that holds a
// partition read ahead and not acquired (its read is waited for first).
// nil when every buffer is acquired (or, without evict, busy).
func (s *ParamSwapper) take(ctx context.Context, evict bool) (*paramBuf, error) {
	for _, b := range s.bufs {
		if b.unit < 0 {
			return b, nil
		}
	}
	if !evict {
		return nil, nil
	}
	for _, b := range s.bufs {
		if !b.acquired {
			if err := s.settle(ctx, b); err != nil {
				return nil, err
			}
			b.unit = -1
			return b, nil
		}
	}
	return nil, nil
}

// settle waits for b's read, if one is in flight.
func (s *ParamSwapper) settle(ctx context.Context, b *paramBuf) error {
	if b.req == nil {
		return nil
	}
	r := b.req
	b.req = nil
	if err := r.Wait(ctx); err != nil {
		p := &s.parts[b.unit]
		b.unit = -1
		return s.ioErr("read", p, err)
	}
	return nil
}

// Prefetch starts reading partition u into a free buffer, if it is
// swapped, not already buffered, and a buffer is free; it never waits.
func (s *ParamSwapper) Prefetch(ctx context.Context, u int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.part(u)
	if err != nil || p.cpu != nil || !p.written || s.holding(u) != nil {
		return err
	}
	b, err := s.take(ctx, false)
	if b == nil || err != nil {
		return err
	}
	if b.req, err = s.file.ReadAt(b.buf, p.n*s.dt.Size(), p.off); err != nil {
		return s.ioErr("read", p, err)
	}
	b.unit = u
	s.reads++
	s.prefetch++
	return nil
}

// Acquire returns partition u in host memory, waiting for its read; the
// tensor is the caller's to read until Release(u).
func (s *ParamSwapper) Acquire(ctx context.Context, u int) (*tensor.Tensor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.part(u)
	if err != nil {
		return nil, err
	}
	if p.cpu != nil {
		return p.cpu, nil
	}
	if !p.written {
		return nil, fmt.Errorf("offload: parameter partition %s: acquired before it was written", p.name)
	}
	b := s.holding(u)
	switch {
	case b != nil && b.acquired:
		return nil, fmt.Errorf("offload: parameter partition %s: acquired twice", p.name)
	case b == nil:
		if b, err = s.take(ctx, true); err != nil {
			return nil, err
		}
		if b == nil {
			return nil, fmt.Errorf("offload: parameter partition %s: all %d offload_param buffers are acquired; release one first", p.name, len(s.bufs))
		}
		if b.req, err = s.file.ReadAt(b.buf, p.n*s.dt.Size(), p.off); err != nil {
			return nil, s.ioErr("read", p, err)
		}
		b.unit = u
		s.reads++
	}
	if err := s.settle(ctx, b); err != nil {
		return nil, err
	}
	b.acquired = true
	return s.view(b, p.n)
}

// Release gives partition u's buffer back.
func (s *ParamSwapper) Release(u int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.holding(u); b != nil && b.acquired {
		b.acquired, b.unit = false, -1
	}
}

// Write stores partition u: fill writes its new value into the host tensor
// it is given (the kept copy, or a swap buffer then written to the file
// before Write returns). A copy read ahead is dropped first.
func (s *ParamSwapper) Write(ctx context.Context, u int, fill func(dst *tensor.Tensor) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.part(u)
	if err != nil {
		return err
	}
	if p.cpu != nil {
		return fill(p.cpu)
	}
	b := s.holding(u)
	if b != nil {
		if b.acquired {
			return fmt.Errorf("offload: parameter partition %s: written while acquired", p.name)
		}
		if err := s.settle(ctx, b); err != nil {
			return err
		}
	} else if b, err = s.take(ctx, true); err != nil {
		return err
	} else if b == nil {
		return fmt.Errorf("offload: parameter partition %s: all %d offload_param buffers are acquired; release one first", p.name, len(s.bufs))
	}
	b.unit = -1 // whatever happens, the buffer holds no valid partition after this
	dst, err := s.view(b, p.n)
	if err != nil {
		return err
	}
	if err := fill(dst); err != nil {
		return err
	}
	r, err := s.file.WriteAt(b.buf, p.n*s.dt.Size(), p.off)
	if err == nil {
		err = r.Wait(ctx)
	}
	if err != nil {
		return s.ioErr("write", p, err)
	}
	if !p.written {
		p.written = true
		s.disk += int64(p.n * s.dt.Size())
	}
	s.writes++
	return nil
}

// SwapUsage reports the host memory the swapper holds (the kept
// partitions and the swap buffers), its high-water mark (the same: both
// are allocated up front), and the partition bytes in the file.
func (s *ParamSwapper) SwapUsage() (resident, peak, disk int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resident = s.inCPU
	for _, b := range s.bufs {
		resident += int64(b.buf.Cap())
	}
	return resident, resident, s.disk
}

// ParamSwapStats count the swapper's file transfers.
type ParamSwapStats struct {
	// Reads are partitions read from the file; Prefetched are those of them
	// a Prefetch started ahead of their Acquire (or dropped unused).
	Reads, Prefetched int64
	// Writes are partitions written to the file.
	Writes int64
	// InCPU and Swapped count partitions kept in host memory and in the file.
	InCPU, Swapped int
}

// Stats returns the counters.
func (s *ParamSwapper) Stats() ParamSwapStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ParamSwapStats{Reads: s.reads, Prefetched: s.prefetch, Writes: s.writes}
	for _, p := range s.parts {
		if p.cpu != nil {
			st.InCPU++
		} else if p.n > 0 {
			st.Swapped++
		}
	}
	return st
}

// Close waits for reads in flight, frees the buffers and kept partitions,
// stops the engine and removes the swap folder.
func (s *ParamSwapper) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, b := range s.bufs {
		if b.req != nil {
			errs = append(errs, b.req.Wait(context.Background()))
			b.req = nil
		}
		errs = append(errs, b.buf.Free())
	}
	s.bufs = nil
	for i := range s.parts {
		if t := s.parts[i].cpu; t != nil {
			t.Free()
			s.parts[i].cpu = nil
		}
	}
	s.inCPU = 0
	if s.file != nil {
		errs = append(errs, s.file.Close())
	}
	if s.eng != nil {
		errs = append(errs, s.eng.Close())
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	errs = append(errs, s.lock.release())
	s.lock = nil
	return errors.Join(errs...)
}
