package zero

// This file holds the Optimizer's step: overflow agreement, the global norm,
// the optimizer on the owned chunks, the re-gather.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Overflow reduces the accumulated gradients where that happens at the
// boundary (stages 0-1), then reports whether any rank's gradients hold
// inf or nan (false when Config.CheckOverflow is off).
func (z *Optimizer) Overflow(ctx context.Context) (bool, error) {
	if err := z.reduceBoundary(ctx); err != nil {
		return false, err
	}
	if !z.cfg.CheckOverflow {
		return false, nil
	}
	g, err := z.grads()
	if err != nil {
		return false, err
	}
	bad, err := z.be.NonFinite(g)
	if err != nil {
		return false, err
	}
	if z.world == 1 || z.cfg.Stage == 0 { // stage 0: all-reduced grads are identical on every rank
		return bad, nil
	}
	flag, err := z.be.Empty(tensor.Int32, 1)
	if err != nil {
		return false, err
	}
	defer flag.Free()
	host, err := tensor.Empty(tensor.Int32, 1)
	if err != nil {
		return false, err
	}
	defer host.Free()
	v, _ := host.Int32s()
	if bad {
		v[0] = 1
	}
	if err := z.be.Copy(flag, host); err != nil {
		return false, err
	}
	t0 := time.Now()
	err = z.c.AllReduce(ctx, flag, comm.Max)
	z.timers.Comm += time.Since(t0)
	if err != nil {
		return false, fmt.Errorf("zero: agreeing on overflow: %w", err)
	}
	if err := z.be.Copy(host, flag); err != nil {
		return false, err
	}
	return v[0] != 0, nil
}

// GlobalNorm is the L2 norm of the (still loss-scaled) reduced gradients
// over all ranks, summed in float64 in rank order.
func (z *Optimizer) GlobalNorm(ctx context.Context) (float64, error) {
	g, err := z.grads()
	if err != nil {
		return 0, err
	}
	ss, err := z.be.SumSquares(g, nil)
	if err != nil {
		return 0, err
	}
	if z.world == 1 || z.cfg.Stage == 0 {
		return math.Sqrt(ss), nil
	}
	sum, err := z.sumOverRanks(ctx, []float64{ss})
	if err != nil {
		return 0, err
	}
	return math.Sqrt(sum[0]), nil
}

// Step applies the base optimizer to this rank's shard with learning
// rate lr, dividing the gradients by gradScale (optim.CombinedScale of the
// loss scale and the clip), then all-gathers the updated parameters
// (stages 1-2) or re-gathers persistent ones (stage 3), and zeroes the
// gradients.
func (z *Optimizer) Step(ctx context.Context, lr, gradScale float64) error {
	g, err := z.grads()
	if err != nil {
		return err
	}
	t0 := time.Now()
	err = z.stepSubGroups(ctx, g, lr, gradScale)
	z.timers.Optimizer += time.Since(t0)
	if err != nil {
		return fmt.Errorf("zero: optimizer step: %w", err)
	}
	if err := z.ZeroGrad(); err != nil {
		return err
	}
	if err := z.writeBack(ctx); err != nil {
		return err
	}
	switch z.cfg.Stage {
	case 1, 2:
		for u := range z.lay.Units {
			lo, n := z.own(u)
			own, err := z.param[u].Slice(lo, n)
			if err != nil {
				return err
			}
			t0 := time.Now()
			err = z.c.AllGather(ctx, z.param[u], own)
			z.timers.Comm += time.Since(t0)
			if err != nil {
				return fmt.Errorf("zero: gathering updated parameters of bucket %d: %w", u, err)
			}
		}
	case 3:
		z.staleSecondaries()
		if err := z.execute(ctx, z.coord.ReleaseAll()); err != nil {
			return err
		}
		return z.gatherPersistent(ctx)
	}
	return nil
}

// gatherPersistent (re)gathers the stage-3 persistent modules.
func (z *Optimizer) gatherPersistent(ctx context.Context) error {
	for m, u := range z.unitOf {
		if u < 0 || !z.coord.persistent[m] {
			continue
		}
		if z.full[u] == nil {
			buf, err := z.gathered.get(z.cfg.ModelDType, z.lay.Units[u].Numel)
			if err != nil {
				return err
			}
			z.full[u] = buf
		}
		src, done, err := z.gatherSource(ctx, u)
		if err != nil {
			return fmt.Errorf("zero: stage 3: persistent module %q: %w", z.mods[m].Name, err)
		}
		t0 := time.Now()
		err = z.gatherPersistentUnit(ctx, u, z.full[u], src)
		z.timers.Comm += time.Since(t0)
		z.held = slices.DeleteFunc(z.held, func(h int) bool { return h == u })
		done()
		if err != nil {
			return fmt.Errorf("zero: stage 3: gathering persistent module %q: %w", z.mods[m].Name, err)
		}
		if err := z.bind(m, z.data[m], z.full); err != nil {
			return err
		}
	}
	return nil
}

// ZeroGrad clears the accumulated gradients (after a step or a skipped one).
func (z *Optimizer) ZeroGrad() error {
	if err := z.settleDownloads(context.Background()); err != nil {
		return err
	}
	return z.be.Zero(z.acc)
}
