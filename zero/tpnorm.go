package zero

import (
	"context"
	"fmt"

	"time"

	"github.com/deepgo-ml/deepgo/tensor"
)

// SumSquaresSplit is the sum of squares of the (still loss-scaled) reduced
// gradients over all ranks, in two parts: of the parameters for which
// in(module, param) is true, and of the rest. A tensor-parallel engine
// needs them apart: its sharded parameters' squares add up over the TP
// group, its replicated ones count once.
func (z *Optimizer) SumSquaresSplit(ctx context.Context, in func(module, param int) bool) (yes, no float64, err error) {
	g, err := z.grads()
	if err != nil {
		return 0, 0, err
	}
	var parts [2][]*tensor.Tensor
	for u, unit := range z.lay.Units {
		lo, n := z.own(u)
		for _, s := range unit.Slots {
			a, b := max(lo, s.Offset), min(lo+n, s.Offset+s.Numel)
			if a >= b {
				continue
			}
			v, err := g[u].Slice(a-lo, b-a)
			if err != nil {
				return 0, 0, err
			}
			k := 1
			if in(s.Module, s.Param) {
				k = 0
			}
			parts[k] = append(parts[k], v)
		}
	}
	var ss [2]float64
	for k, ts := range parts {
		if len(ts) == 0 {
			continue
		}
		if ss[k], err = z.be.SumSquares(ts, nil); err != nil {
			return 0, 0, err
		}
	}
	if z.world == 1 || z.cfg.Stage == 0 {
		return ss[0], ss[1], nil
	}
	sum, err := z.sumOverRanks(ctx, ss[:])
	if err != nil {
		return 0, 0, err
	}
	return sum[0], sum[1], nil
}

// sumOverRanks adds vals elementwise over the ranks in float64, in rank
// order (an all-gather: the collectives reduce no float64).
func (z *Optimizer) sumOverRanks(ctx context.Context, vals []float64) ([]float64, error) {
	k := len(vals)
	src, err := z.be.Empty(tensor.Float64, k)
	if err != nil {
		return nil, err
	}
	defer src.Free()
	all, err := z.be.Empty(tensor.Float64, k*z.world)
	if err != nil {
		return nil, err
	}
	defer all.Free()
	hs, err := tensor.Empty(tensor.Float64, k)
	if err != nil {
		return nil, err
	}
	defer hs.Free()
	s, _ := hs.Float64s()
	copy(s, vals)
	if err := z.be.Copy(src, hs); err != nil {
		return nil, err
	}
	t0 := time.Now()
	err = z.c.AllGather(ctx, all, src)
	z.timers.Comm += time.Since(t0)
	if err != nil {
		return nil, fmt.Errorf("zero: global gradient norm: %w", err)
	}
	ha, free, err := ToHost(z.be, all)
	if err != nil {
		return nil, err
	}
	defer free()
	a, _ := ha.Float64s()
	out := make([]float64, k)
	for r := 0; r < z.world; r++ {
		for i := range out {
			out[i] += a[r*k+i]
		}
	}
	return out, nil
}
