package zero

// This file holds the Optimizer's gradient reduction: buckets reduced as
// their modules finish backward, and at the accumulation boundary.

import (
	"context"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// PostBackward runs when module m's gradients are ready: every unit whose
// modules are all done is reduced (stages 2-3) or accumulated (stages 0-1
// with a separate accumulation dtype).
func (z *Optimizer) PostBackward(ctx context.Context, m int) error {
	if !z.direct {
		for _, u := range z.lay.UnitsOf(m) {
			z.left[u]--
			if z.left[u] == 0 {
				if err := z.unitReady(ctx, u); err != nil {
					return err
				}
			}
		}
		for p := range z.grad[m] {
			z.grad[m][p] = nil
		}
	}
	return z.release(ctx, m)
}

// unitReady hands a finished micro-step gradient buffer on.
func (z *Optimizer) unitReady(ctx context.Context, u int) error {
	buf := z.gbuf[u]
	if buf == nil {
		return nil
	}
	z.gbuf[u] = nil
	if z.cfg.Stage <= 1 {
		t0 := time.Now()
		defer func() { z.timers.Reduce += time.Since(t0) }()
		err := z.accumulate(z.acc[u], buf, 1)
		z.buckets.put(buf)
		return err
	}
	t0 := time.Now()
	cbuf := buf
	if z.cfg.CommDType != z.cfg.ModelDType {
		var err error
		if cbuf, err = z.buckets.get(z.cfg.CommDType, buf.Numel()); err != nil {
			return err
		}
		if err := z.be.Cast([]*tensor.Tensor{cbuf}, []*tensor.Tensor{buf}); err != nil {
			return err
		}
	}
	if z.pre != 1 {
		if err := z.be.Scale([]*tensor.Tensor{cbuf}, z.pre); err != nil {
			return err
		}
	}
	z.timers.Reduce += time.Since(t0)
	lo, n := z.own(u)
	dst, err := cbuf.Slice(lo, n)
	if err != nil {
		return err
	}
	t1 := time.Now()
	w := z.c.ReduceScatterAsync(ctx, dst, cbuf, comm.Sum)
	z.timers.Comm += time.Since(t1)
	z.pending = append(z.pending, pendingReduce{unit: u, work: w, buf: buf, c: cbuf})
	if !z.cfg.OverlapComm {
		return z.complete(ctx)
	}
	return nil
}

// complete waits for the oldest reduction and folds its chunk into the
// gradient shard.
func (z *Optimizer) complete(ctx context.Context) error {
	p := z.pending[0]
	z.pending = z.pending[1:]
	defer z.recycle(p)
	t0 := time.Now()
	err := wait(p.work)
	z.timers.Comm += time.Since(t0)
	if err != nil {
		return fmt.Errorf("zero: reducing gradient bucket %d: %w", p.unit, err)
	}
	t1 := time.Now()
	defer func() { z.timers.Reduce += time.Since(t1) }()
	lo, n := z.own(p.unit)
	chunk, err := p.c.Slice(lo, n)
	if err != nil {
		return err
	}
	if err := z.settleDownload(ctx, p.unit); err != nil {
		return err
	}
	if err := z.accumulate(z.acc[p.unit], chunk, z.post); err != nil {
		return err
	}
	return z.earlyDownload(p.unit, z.acc[p.unit])
}

// recycle returns a finished reduction's buffers to the pool, on failure
// too: nothing else refers to them once the reduction left z.pending.
func (z *Optimizer) recycle(p pendingReduce) {
	if p.c != p.buf {
		z.buckets.put(p.c)
	}
	z.buckets.put(p.buf)
}

// accumulate does dst += alpha*src, casting src to dst's dtype: alpha
// scales src in its own dtype first (src is a scratch buffer the caller
// drops), so a reduced sum is divided before a cast to a narrower dtype
// could overflow it.
func (z *Optimizer) accumulate(dst, src *tensor.Tensor, alpha float32) error {
	if src.DType() == dst.DType() {
		return z.be.Axpy(alpha, []*tensor.Tensor{src}, []*tensor.Tensor{dst})
	}
	if alpha != 1 {
		if err := z.be.Scale([]*tensor.Tensor{src}, alpha); err != nil {
			return err
		}
		alpha = 1
	}
	tmp, err := z.buckets.get(dst.DType(), src.Numel())
	if err != nil {
		return err
	}
	defer z.buckets.put(tmp)
	if err := z.be.Cast([]*tensor.Tensor{tmp}, []*tensor.Tensor{src}); err != nil {
		return err
	}
	return z.be.Axpy(alpha, []*tensor.Tensor{tmp}, []*tensor.Tensor{dst})
}

// EndBackward flushes units not yet reduced (modules that did not run) and
// waits for every reduction in flight.
func (z *Optimizer) EndBackward(ctx context.Context) error {
	for u := range z.lay.Units {
		if z.touched[u] && z.gbuf[u] != nil {
			if err := z.unitReady(ctx, u); err != nil {
				return err
			}
		}
	}
	for len(z.pending) > 0 {
		if err := z.complete(ctx); err != nil {
			return err
		}
	}
	if z.cfg.Stage <= 1 && z.world == 1 {
		return z.earlyDownloadAll() // nothing reduces them at the boundary
	}
	return nil
}

// reduceBoundary reduces the accumulated full gradients of stages 0-1.
func (z *Optimizer) reduceBoundary(ctx context.Context) error {
	if z.cfg.Stage > 1 || z.world == 1 {
		return nil
	}
	for u := range z.lay.Units {
		acc := z.acc[u]
		c := acc
		if z.cfg.CommDType != z.cfg.AccumDType {
			var err error
			if c, err = z.buckets.get(z.cfg.CommDType, acc.Numel()); err != nil {
				return err
			}
			if err := z.be.Cast([]*tensor.Tensor{c}, []*tensor.Tensor{acc}); err != nil {
				return err
			}
		}
		if z.pre != 1 {
			if err := z.be.Scale([]*tensor.Tensor{c}, z.pre); err != nil {
				return err
			}
		}
		lo, n := z.own(u)
		cOwn, err := c.Slice(lo, n)
		if err != nil {
			return err
		}
		t0 := time.Now()
		if z.cfg.Stage == 0 {
			err = z.c.AllReduce(ctx, c, comm.Sum)
		} else {
			err = z.c.ReduceScatter(ctx, cOwn, c, comm.Sum)
		}
		z.timers.Comm += time.Since(t0)
		if err != nil {
			return fmt.Errorf("zero: reducing gradient bucket %d: %w", u, err)
		}
		aOwn, err := acc.Slice(lo, n)
		if err != nil {
			return err
		}
		// the division after the sum happens in the communication dtype,
		// before the cast back, as DeepSpeed's does: an fp32 sum of fp16
		// gradients may exceed fp16's range where the average does not
		if z.post != 1 {
			if err := z.be.Scale([]*tensor.Tensor{cOwn}, z.post); err != nil {
				if c != acc {
					z.buckets.put(c)
				}
				return err
			}
		}
		if c != acc {
			err = z.be.Cast([]*tensor.Tensor{aOwn}, []*tensor.Tensor{cOwn})
			z.buckets.put(c)
			if err != nil {
				return err
			}
		}
		if err := z.earlyDownload(u, aOwn); err != nil {
			return err
		}
	}
	return nil
}

// grads lists this rank's reduced gradient ranges.
func (z *Optimizer) grads() ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(z.lay.Units))
	for u := range z.lay.Units {
		if z.cfg.Stage >= 2 {
			out[u] = z.acc[u]
			continue
		}
		lo, n := z.own(u)
		g, err := z.acc[u].Slice(lo, n)
		if err != nil {
			return nil, err
		}
		out[u] = g
	}
	return out, nil
}
