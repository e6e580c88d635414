package deepgo

// Where checkpointed segments' boundary activations live between forward
// and backward: whole on the device, this rank's 1/tp share
// (partition_activations, all-gathered again before the recompute), or in
// host memory (cpu_checkpointing, copied back before the recompute);
// each in its own buffer or in one buffer sized from number_checkpoints
// (contiguous_memory_optimization).
//
// Host copies (cpu_checkpointing) live in the backend's fastest host
// memory (backend.HostEmpty: page-locked on CUDA) and move with
// backend.CopyAsync: a boundary goes down while the next segment runs
// forward (it is waited for before that segment's whole input is freed),
// and in backward segment s-1's comes back up while segment s recomputes
// and runs backward.

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// kept is one segment's input as the engine holds it until backward.
type kept struct {
	ref   model.Activation // kept as it is: not a buffer the engine made
	data  *tensor.Tensor   // the engine's copy: whole, or this rank's share
	shape []int            // the whole input's
	part  bool             // data is this rank's share of ceil(numel/tp)
	host  bool             // data is in host memory

	// copying is the host copy in flight: data going down in forward, or
	// coming back up into dev in backward.
	copying backend.Copying
	dev     *tensor.Tensor // host data's device copy (in a pre arena)
}

func (k kept) bytes() int64 {
	if k.data == nil {
		return 0
	}
	return int64(k.data.Bytes())
}

// store allocates the kept copies.
type store struct {
	saved     tensor.Arena   // one buffer per boundary, on the compute device
	hostSaved tensor.Arena   // the same in host memory
	buf       *tensor.Tensor // contiguous_memory_optimization's
	used      int            // elements of buf handed out this micro-step
}

func (s *store) reset() {
	s.saved.Reset()
	s.hostSaved.Reset()
	s.used = 0
}

func (s *store) bytes() (dev, host int64) {
	dev, host = s.saved.Bytes(), s.hostSaved.Bytes()
	if s.buf != nil {
		if s.buf.Device().IsCPU() {
			host += int64(s.buf.Bytes())
		} else {
			dev += int64(s.buf.Bytes())
		}
	}
	return dev, host
}

func (s *store) bufferBytes() int64 {
	if s.buf == nil {
		return 0
	}
	return int64(s.buf.Bytes())
}

func (s *store) close() {
	s.reset()
	if s.buf != nil {
		s.buf.Free()
		s.buf = nil
	}
}

// slot is n elements of dt for one kept boundary.
func (c *ckptRun) slot(dt tensor.DType, n int) (*tensor.Tensor, error) {
	ar := &c.saved
	if c.host {
		ar = &c.hostSaved
	}
	if !c.cfg.ContiguousMemoryOptimization {
		return ar.Empty(dt, n)
	}
	// DeepSpeed sizes the buffer at the first checkpoint of a forward:
	// number_checkpoints of that size
	count := len(c.spans)
	if p := c.cfg.NumberCheckpoints; p != nil {
		count = *p
	}
	if c.used == 0 && (c.buf == nil || c.buf.DType() != dt || c.buf.Numel() != n*count) {
		if c.buf != nil {
			c.buf.Free()
			c.buf = nil
		}
		var err error
		switch {
		case c.host:
			c.buf, err = backend.HostEmpty(c.be, dt, n*count)
		case c.be.Device().IsCPU():
			c.buf, err = tensor.Empty(dt, n*count)
		default:
			c.buf, err = c.be.Empty(dt, n*count)
		}
		if err != nil {
			return nil, fmt.Errorf("deepgo: activation_checkpointing.contiguous_memory_optimization: %d checkpoints of %d elements: %w", count, n, err)
		}
	}
	if c.buf.DType() != dt || c.used+n > c.buf.Numel() {
		return nil, fmt.Errorf("deepgo: activation_checkpointing.contiguous_memory_optimization: a boundary of %d %v elements does not fit the buffer sized at the forward's first checkpoint (%d used of %d %v, number_checkpoints %d): not supported: boundaries must have one size and dtype", n, dt, c.used, c.buf.Numel(), c.buf.DType(), count)
	}
	v, err := c.buf.Slice(c.used, n)
	c.used += n
	return v, err
}

// keep stores t, segment next's input, and returns the tensor that
// segment's forward runs on.
func (c *ckptRun) keep(ctx context.Context, next int, t *tensor.Tensor) (kept, *tensor.Tensor, error) {
	n := t.Numel()
	per := n
	if c.tp != nil {
		p := c.tp.Size()
		per = (n + p - 1) / p
	}
	dst, err := c.slot(t.DType(), per)
	if err != nil {
		return kept{}, nil, err
	}
	k := kept{shape: t.Shape(), part: c.tp != nil, host: c.host}
	if !k.part && !k.host {
		// the kept copy is the input itself
		if err := c.be.Copy(dst, t); err != nil {
			return kept{}, nil, err
		}
		if k.data, err = dst.Reshape(k.shape...); err != nil {
			return kept{}, nil, err
		}
		return k, k.data, nil
	}
	// the whole input lives on only while the next segment runs forward
	whole, err := c.edge[next%2].Empty(t.DType(), k.shape...)
	if err == nil {
		err = c.be.Copy(whole, t)
	}
	if err != nil {
		return kept{}, nil, err
	}
	flat, _ := whole.Reshape(n)
	src, share := flat, dst
	if k.part {
		lo := min(n, c.tp.Rank()*per)
		ln := min(n, lo+per) - lo
		if ln == 0 {
			k.data = share
			return k, whole, nil // the last ranks' shares may be all padding
		}
		if src, err = flat.Slice(lo, ln); err != nil {
			return kept{}, nil, err
		}
		if dst, err = dst.Slice(0, ln); err != nil {
			return kept{}, nil, err
		}
	}
	if k.host {
		// the next segment's forward runs while it goes down
		k.copying, err = backend.CopyAsync(c.be, dst, src)
		c.stats.AsyncCopies++
	} else {
		err = c.be.Copy(dst, src)
	}
	if err != nil {
		return kept{}, nil, fmt.Errorf("deepgo: keeping a checkpoint boundary: %w", err)
	}
	k.data = share // padded to per elements: the all-gather's unit
	return k, whole, nil
}

// settle waits for segment s's host copy in flight, if any, counting it
// when it had not finished by the time the engine came to wait: the work
// issued meanwhile overlapped it.
func (c *ckptRun) settle(ctx context.Context, s int) error {
	k := &c.kept[s]
	if k.copying == nil {
		return nil
	}
	if !k.copying.Done() {
		c.stats.CopiesInFlight++
	}
	err := k.copying.Wait(ctx)
	k.copying = nil
	return err
}

// drain waits for every host copy in flight (a forward or backward that
// failed half-way left them) before their buffers go.
func (c *ckptRun) drain() {
	for i := range c.kept {
		if k := &c.kept[i]; k.copying != nil {
			_ = k.copying.Wait(context.Background()) // the buffers go whatever its error
			k.copying = nil
		}
	}
}

// prefetch starts copying segment s's host-kept input back to the device,
// into pre[s%2]: in backward that arena last held segment s+2's input,
// whose backward is over.
func (c *ckptRun) prefetch(s int) error {
	if s < 0 || s >= len(c.kept) {
		return nil
	}
	k := &c.kept[s]
	if !k.host || k.data == nil || k.copying != nil || k.dev != nil {
		return nil
	}
	a := &c.pre[s%2]
	a.Reset()
	dev, err := a.Empty(k.data.DType(), k.data.Numel())
	if err != nil {
		return err
	}
	cp, err := backend.CopyAsync(c.be, dev, k.data)
	if err != nil {
		return fmt.Errorf("deepgo: prefetching a checkpoint boundary from host memory: %w", err)
	}
	k.dev, k.copying = dev, cp
	c.stats.AsyncCopies++
	return nil
}

// restore makes segment s's input whole again on the device, in a.
func (c *ckptRun) restore(ctx context.Context, s int, a *tensor.Arena) (model.Activation, error) {
	k := c.kept[s]
	if k.data == nil {
		return k.ref, nil
	}
	if !k.part && !k.host {
		return k.data, nil
	}
	src := k.data
	if k.host {
		if k.dev == nil {
			// the first segment of backward: nothing ran to hide the copy
			dev, err := a.Empty(src.DType(), src.Numel())
			if err == nil {
				err = c.be.Copy(dev, src)
			}
			if err != nil {
				return nil, fmt.Errorf("deepgo: copying a checkpoint boundary back from host memory: %w", err)
			}
			src = dev
		} else {
			if err := c.settle(ctx, s); err != nil {
				return nil, fmt.Errorf("deepgo: copying a checkpoint boundary back from host memory: %w", err)
			}
			src = k.dev
		}
	}
	if !k.part {
		return src.Reshape(k.shape...)
	}
	per, p := src.Numel(), c.tp.Size()
	all, err := a.Empty(src.DType(), per*p)
	if err != nil {
		return nil, err
	}
	if err := c.tp.AllGather(ctx, all, src); err != nil {
		return nil, fmt.Errorf("deepgo: all-gathering a partitioned checkpoint boundary over tensor parallelism: %w", err)
	}
	n := 1
	for _, d := range k.shape {
		n *= d
	}
	v, err := all.Slice(0, n)
	if err != nil {
		return nil, err
	}
	return v.Reshape(k.shape...)
}
