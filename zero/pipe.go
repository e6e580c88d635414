package zero

// This file holds what a pipeline engine needs beyond the data-parallel
// protocol: the accumulated gradient of one parameter (to sum a tied
// weight's gradient across stages before the data-parallel reduction) and
// this rank's share of the squared gradient norm without the stage's
// copies of tied weights (counted once, on the stage that owns them).

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/tensor"
)

// AccumGrad is the gradient of parameter p of module m accumulated over
// the micro-steps so far, before the boundary reduction: a view of the
// full accumulation buffer (accumulation dtype). Only stages 0-1 keep the
// full gradient; later stages reduce as buckets complete.
func (z *Optimizer) AccumGrad(m, p int) (*tensor.Tensor, error) {
	if z.cfg.Stage > 1 {
		return nil, fmt.Errorf("zero: the accumulated gradient of %s: stage %d keeps only the owned shard (stages 0-1 keep it whole)", z.mods[m].Params[p].Name, z.cfg.Stage)
	}
	w := z.lay.Where[m][p]
	s := z.lay.Units[w.Unit].Slots[w.Slot]
	return z.acc[w.Unit].Slice(s.Offset, s.Numel)
}

// OwnedSumSquares is the sum of squares, in float64, of this rank's range
// of the reduced gradients (call after Overflow), leaving out the
// parameters skip selects. At stage 0 every rank owns everything.
func (z *Optimizer) OwnedSumSquares(skip func(m, p int) bool) (float64, error) {
	var parts []*tensor.Tensor
	for u, unit := range z.lay.Units {
		lo, n := z.own(u)
		accLo := 0 // where acc[u] starts in the unit
		if z.cfg.Stage >= 2 {
			accLo = lo
		}
		cut := lo // next element of the owned range not yet listed
		add := func(to int) error {
			if to > cut {
				v, err := z.acc[u].Slice(cut-accLo, to-cut)
				if err != nil {
					return err
				}
				parts = append(parts, v)
			}
			return nil
		}
		for _, s := range unit.Slots {
			if !skip(s.Module, s.Param) {
				continue
			}
			a, b := max(s.Offset, lo), min(s.Offset+s.Numel, lo+n)
			if a >= b {
				continue
			}
			if err := add(a); err != nil {
				return 0, err
			}
			cut = b
		}
		if err := add(lo + n); err != nil {
			return 0, err
		}
	}
	if len(parts) == 0 {
		return 0, nil
	}
	return z.be.SumSquares(parts, nil)
}
