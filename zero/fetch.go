package zero

// This file holds the Optimizer's stage-3 parameter gathering: fetch before
// a module runs, release after, prefetch along the recorded order.

import (
	"context"
	"fmt"
	"time"
)

// BeginMicroStep resets per-micro-step bookkeeping; call before forward.
func (z *Optimizer) BeginMicroStep(seq []int) {
	for u, unit := range z.lay.Units {
		z.left[u] = 0
		z.touched[u] = false
		for _, m := range unit.Modules {
			for _, s := range seq {
				if s == m {
					z.left[u]++
				}
			}
		}
	}
	if z.coord != nil {
		z.coord.ResetStep()
	}
}

func (z *Optimizer) fetch(ctx context.Context, m int) error {
	if z.coord == nil || z.unitOf[m] < 0 {
		return nil
	}
	a := z.coord.Fetch(m)
	if err := z.execute(ctx, a); err != nil {
		return err
	}
	u := z.unitOf[m]
	t0 := time.Now()
	err := z.waitGather(u)
	z.timers.Comm += time.Since(t0)
	if err != nil {
		return fmt.Errorf("zero: stage 3: gathering module %q: %w", z.mods[m].Name, err)
	}
	if err := z.prefetchParams(ctx); err != nil {
		return err
	}
	return z.bind(m, z.data[m], z.full)
}

func (z *Optimizer) execute(ctx context.Context, a Actions) error {
	if z.pstore != nil && len(a.Gather) > 1 {
		for _, m := range a.Gather[1:] { // read ahead what the gathers below take in turn
			if err := z.pstore.Prefetch(ctx, z.unitOf[m]); err != nil {
				return err
			}
		}
	}
	for _, m := range a.Gather {
		u := z.unitOf[m]
		gc, src, done, err := z.gatherFrom(ctx, u)
		if err != nil {
			return fmt.Errorf("zero: stage 3: module %q: %w", z.mods[m].Name, err)
		}
		buf, err := z.gathered.get(z.cfg.ModelDType, z.lay.Units[u].Numel)
		if err != nil {
			done()
			return err
		}
		z.full[u] = buf
		t0 := time.Now()
		z.gwork[u], z.gsrc[u] = z.gatherAsync(ctx, gc, u, buf, src), done
		z.timers.Comm += time.Since(t0)
	}
	for _, m := range a.Release {
		u := z.unitOf[m]
		if err := z.waitGather(u); err != nil {
			return err
		}
		if err := z.fillSecondary(u); err != nil {
			return err
		}
		z.gathered.put(z.full[u])
		z.full[u] = nil
		for p := range z.data[m] {
			z.data[m][p] = nil
		}
	}
	return nil
}

// PreForward runs before module m's forward (stage 3: gathers it).
func (z *Optimizer) PreForward(ctx context.Context, m int) error { return z.fetch(ctx, m) }

// PostForward runs after module m's forward (stage 3: may release it).
func (z *Optimizer) PostForward(ctx context.Context, m int) error { return z.release(ctx, m) }

func (z *Optimizer) release(ctx context.Context, m int) error {
	if z.coord == nil || z.unitOf[m] < 0 {
		return nil
	}
	return z.execute(ctx, z.coord.Release(m))
}

// PreBackward runs before module m's backward: stage 3 gathers it, and
// gradient buffers of its units are made ready.
func (z *Optimizer) PreBackward(ctx context.Context, m int) error {
	if err := z.fetch(ctx, m); err != nil {
		return err
	}
	if z.direct {
		return nil
	}
	for _, u := range z.lay.UnitsOf(m) {
		if z.gbuf[u] == nil {
			if err := z.throttle(ctx); err != nil {
				return err
			}
			buf, err := z.buckets.get(z.cfg.ModelDType, z.lay.Units[u].Numel)
			if err != nil {
				return err
			}
			z.gbuf[u] = buf
			z.touched[u] = true
		}
	}
	return z.bind(m, z.grad[m], z.gbuf)
}

// throttle keeps at most two reductions in flight (DeepSpeed's two
// alternating IPG buffers).
func (z *Optimizer) throttle(ctx context.Context) error {
	for len(z.pending) >= 2 {
		if err := z.complete(ctx); err != nil {
			return err
		}
	}
	return nil
}
