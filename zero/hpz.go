package zero

// This file holds ZeRO++ hpZ (zero_optimization.zero_hpz_partition_size
// H > 1) at stage 3, as DeepSpeed 0.19.8's secondary partitions
// (partition_parameters.py: ds_secondary_tensor, _partition_param_sec):
// besides its primary 1/N chunk of each unit, a rank keeps a secondary
// 1/H chunk, inside a group of H consecutive data-parallel ranks. The
// first gather of a unit after its parameters changed (the start, a step,
// a restore) is the world all-gather of the primary chunks; releasing the
// unit then copies chunk rank%H of the full (padded) unit into the
// secondary. Every later gather, until the next change, all-gathers the
// secondaries over the H-rank group only. Both gathers concatenate the
// same bytes, so the parameters are bit-identical. Persistent modules
// keep gathering over the world (DeepSpeed re-gathers them with no
// secondary after each step too).

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// hpz is the Optimizer's hpZ state; nil without hpZ.
type hpz struct {
	c     comm.Comm        // the H-rank group of this rank
	sec   []*tensor.Tensor // each unit's secondary chunk (Numel/H), allocated at its first fill
	valid []bool           // sec holds the current parameters
	fill  []bool           // full[u] came from a world gather of the current parameters: releasing it fills sec
	n     int              // gathers served by the H-rank group
	numel int64            // secondary elements held
}

// openHPZ makes the hpZ group (a collective over the data-parallel group)
// when Config.HPZPartitionSize > 1 at stage 3.
func (z *Optimizer) openHPZ(ctx context.Context) error {
	h := z.cfg.HPZPartitionSize
	if h <= 1 || z.cfg.Stage != 3 {
		return nil
	}
	if z.world%h != 0 {
		return fmt.Errorf("zero: zero_optimization.zero_hpz_partition_size %d: want a divisor of the data-parallel size %d", h, z.world)
	}
	if z.pstore != nil {
		return fmt.Errorf("zero: not supported: zero_optimization.zero_hpz_partition_size %d (ZeRO++ hpZ) with zero_optimization.offload_param: the secondary partitions would stay on the device", h)
	}
	c, err := z.c.Split(ctx, z.rank/h, z.rank%h, fmt.Sprintf("%s-hpz%d", z.c.Name(), z.rank/h))
	if err != nil {
		return fmt.Errorf("zero: zero_optimization.zero_hpz_partition_size %d: making the hpZ group: %w", h, err)
	}
	nu := len(z.lay.Units)
	z.hpz = &hpz{c: c, sec: make([]*tensor.Tensor, nu), valid: make([]bool, nu), fill: make([]bool, nu)}
	return nil
}

// gatherFrom is the group and source of unit u's gather: the hpZ group
// and the secondary chunk while that is current, else the data-parallel
// group and the primary chunk (gatherSource), whose gathered unit then
// fills the secondary when released. done gives the source back.
func (z *Optimizer) gatherFrom(ctx context.Context, u int) (c comm.Comm, src *tensor.Tensor, done func(), err error) {
	if h := z.hpz; h != nil && h.valid[u] {
		h.n++
		return h.c, h.sec[u], func() {}, nil
	}
	src, done, err = z.gatherSource(ctx, u)
	if err == nil && z.hpz != nil {
		z.hpz.fill[u] = true
	}
	return z.c, src, done, err
}

// fillSecondary copies this rank's secondary chunk out of unit u's
// gathered buffer, once its gather is over, when that gather was a world
// one of the current parameters.
func (z *Optimizer) fillSecondary(u int) error {
	h := z.hpz
	if h == nil || !h.fill[u] {
		return nil
	}
	h.fill[u] = false
	n := z.lay.Units[u].Numel / h.c.Size()
	if h.sec[u] == nil {
		t, err := z.acct.alloc(z.be, CatSecondary, z.cfg.ModelDType, n)
		if err != nil {
			return fmt.Errorf("zero: hpZ: secondary partition of unit %d: %w", u, err)
		}
		h.sec[u] = t
		h.numel += int64(n)
	}
	part, err := z.full[u].Slice(h.c.Rank()*n, n)
	if err == nil {
		err = z.be.Copy(h.sec[u], part)
	}
	if err != nil {
		return fmt.Errorf("zero: hpZ: filling the secondary partition of unit %d: %w", u, err)
	}
	h.valid[u] = true
	return nil
}

// staleSecondaries marks every secondary chunk and every gathered unit
// out of date: the primary chunks changed (a step, a restore), as
// DeepSpeed's invalidate_secondary_tensor.
func (z *Optimizer) staleSecondaries() {
	if h := z.hpz; h != nil {
		clear(h.valid)
		clear(h.fill)
	}
}

// closeHPZ frees the secondaries and closes the group.
func (z *Optimizer) closeHPZ() error {
	h := z.hpz
	if h == nil {
		return nil
	}
	for _, t := range h.sec {
		z.acct.free(CatSecondary, t)
	}
	z.hpz = nil
	return h.c.Close()
}
