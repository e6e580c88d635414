package zero

// This file holds the Optimizer's memory accounting, closing, and the state
// checkpoints read and restore.

import (
	"context"
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Memory reports this rank's bytes by category.
func (z *Optimizer) Memory() Memory {
	a := z.acct
	a.mu.Lock()
	defer a.mu.Unlock()
	m := Memory{Params: map[tensor.DType]int64{}, Master: a.cur[CatMaster], Grads: a.cur[CatGrads],
		Buckets: a.cur[CatBuckets], BucketsPeak: a.peak[CatBuckets],
		Gathered: a.cur[CatGathered], GatheredPeak: a.peak[CatGathered], Secondary: a.cur[CatSecondary]}
	for k, v := range a.params {
		if v != 0 {
			m.Params[k] = v
		}
	}
	z.stateMemory(&m)
	if z.pstore != nil {
		m.ParamStoreHost, m.ParamStoreHostPeak, m.ParamsOnDisk = z.pstore.SwapUsage()
		m.Params[z.cfg.ModelDType] += z.stored
		m.HostBytes += m.ParamStoreHost
		if p, ok := z.pstore.(interface{ PinnedBytes() int64 }); ok {
			m.Pinned += p.PinnedBytes()
		}
	}
	m.Pinned += z.pinned
	m.Device = z.be.Device()
	m.HostBytes += a.host
	m.DeviceBytes += a.device
	m.Peak = a.totalMax + m.OptimizerState - m.OptimizerStateOnDisk + m.SwapBuffersPeak + m.ParamStoreHostPeak
	return m
}

// Close frees every buffer. The base optimizer is not closed. It is safe on
// an Optimizer New failed part way through (New calls it then) and a
// second call does nothing.
func (z *Optimizer) Close() error {
	if z.closed {
		return nil
	}
	z.closed = true
	errs := []error{z.settleDownloads(context.Background())}
	for u := range z.gwork {
		errs = append(errs, z.waitGather(u))
	}
	for _, p := range z.pending {
		errs = append(errs, wait(p.work))
		z.recycle(p)
	}
	z.pending = nil
	for u := range z.lay.Units {
		z.acct.free(CatParams, z.param[u])
		z.acct.free(CatParams, z.shard[u])
		z.acct.free(CatGathered, z.full[u])
		if z.cfg.ModelDType != tensor.Float32 || z.offloaded() || z.pstore != nil {
			z.acct.free(CatMaster, z.master[u])
		}
		z.acct.free(CatGrads, z.acc[u])
		z.acct.free(CatBuckets, z.gbuf[u])
	}
	z.freeOffload()
	errs = append(errs, z.closeHPZ())
	z.buckets.close()
	z.gathered.close()
	z.freeStateCache()
	z.freeMasterCache()
	if z.pstore != nil {
		errs = append(errs, z.pstore.Close())
		z.pstore = nil
	}
	return errors.Join(errs...)
}

// GatherMaster returns the full fp32 master weights (the parameters
// themselves for fp32 models) of every parameter, as out[m][p]: a
// collective, every rank must call it (zero_to_fp32's consolidation).
func (z *Optimizer) GatherMaster(ctx context.Context) ([][][]float32, error) {
	out := make([][][]float32, len(z.mods))
	for m := range z.mods {
		out[m] = make([][]float32, len(z.mods[m].Params))
	}
	for u, unit := range z.lay.Units {
		full := z.Master(u)
		if z.cfg.Stage > 0 {
			tmp, err := z.be.Empty(tensor.Float32, unit.Numel)
			if err != nil {
				return nil, err
			}
			defer tmp.Free()
			src, done, err := onDevice(z.be, full)
			if err != nil {
				return nil, err
			}
			err = z.c.AllGather(ctx, tmp, src)
			done()
			if err != nil {
				return nil, fmt.Errorf("zero: gathering master weights: %w", err)
			}
			full = tmp
		}
		h, free, err := ToHost(z.be, full)
		if err != nil {
			return nil, err
		}
		defer free()
		v, err := h.Float32s()
		if err != nil {
			return nil, err
		}
		for _, s := range unit.Slots {
			out[s.Module][s.Param] = append([]float32(nil), v[s.Offset:s.Offset+s.Numel]...)
		}
	}
	return out, nil
}

// Checkpoint access. The methods below read and restore the state a
// checkpoint holds; they are called between optimizer steps only.

// Own returns this rank's owned range of unit u, elements [lo, lo+n) of
// the padded unit: the whole unit for stage 0, chunk Rank of World for
// stages 1-3.
func (z *Optimizer) Own(u int) (lo, n int) { return z.own(u) }

// Master is this rank's fp32 master chunk of unit u (Own(u) elements; for
// float32 models the parameters' owned range itself). Callers must not
// write it; RestoreMaster does.
//
// With bfloat16 masters (Config.MasterDType) it is a float32 copy, exact,
// made on first use and kept until the next Step or Close; the bfloat16
// chunk itself when the copy cannot be made.
func (z *Optimizer) Master(u int) *tensor.Tensor {
	if !z.bf16Master() {
		return z.master[u]
	}
	if z.masterW == nil {
		z.masterW = make([]*tensor.Tensor, len(z.master))
	}
	if z.masterW[u] == nil {
		w, err := z.widen(z.master[u])
		if err != nil {
			return z.master[u]
		}
		z.masterW[u] = w
	}
	return z.masterW[u]
}

// Config is the resolved configuration the Optimizer runs with (Align and
// GroupName filled in).
func (z *Optimizer) Config() Config { return z.cfg }

// Base is the optimizer that steps this rank's shard.
func (z *Optimizer) Base() optim.Optimizer { return z.base }

// OptimizerState returns the base optimizer's state of this rank's shard,
// by state name one float32 tensor per unit aligned with Master (nil
// before the first step), and the group's step count. With several
// sub-groups the tensors are a host copy assembled from them, valid until
// the next Step, OptimizerState or Close; a failure to assemble it is
// reported as no state (nil), like a store's failed Lookup. Checkpoints
// use ReadOptimizerState, which reports it.
func (z *Optimizer) OptimizerState() (map[string][]*tensor.Tensor, int64) {
	st, steps, _ := z.ReadOptimizerState()
	return st, steps
}

// ReadOptimizerState is OptimizerState with the error of reading the
// state (a swap file that cannot be read): nil state and no error mean
// there is none yet.
func (z *Optimizer) ReadOptimizerState() (map[string][]*tensor.Tensor, int64, error) {
	if len(z.subs) > 1 {
		st, err := z.assembleState()
		if err != nil {
			z.freeStateCache()
			return nil, z.base.Steps(z.subs[0].name), err
		}
		return st, z.base.Steps(z.subs[0].name), nil
	}
	st, err := z.readState(z.cfg.GroupName)
	if err == nil && z.bf16Master() && st != nil {
		z.freeStateCache()
		if st, err = z.widenState(st); err != nil {
			z.freeStateCache()
			st = nil
		}
	}
	return st, z.base.Steps(z.cfg.GroupName), err
}

// ReplicatedParams lists the working-precision parameters that are
// identical on every rank, as (module, param) pairs with their tensors:
// every parameter for stages 0-2, the gathered (persistent) ones for
// stage 3 between steps.
func (z *Optimizer) ReplicatedParams() (idx [][2]int, ts []*tensor.Tensor) {
	for m := range z.mods {
		for p := range z.mods[m].Params {
			if t := z.data[m][p]; t != nil {
				idx = append(idx, [2]int{m, p})
				ts = append(ts, t)
			}
		}
	}
	return idx, ts
}

// RestoreMaster overwrites this rank's fp32 master chunks with masters
// (per unit one float32 tensor of Own(u) elements, in host memory or on
// the backend's device), re-casts them to the working-precision parameters, discards
// accumulated gradients, and re-gathers the replicated parameters
// (stages 1-2: every unit; stage 3: the persistent modules). It is a
// collective: Restore without optimizer state.
func (z *Optimizer) RestoreMaster(ctx context.Context, masters []*tensor.Tensor) error {
	return z.Restore(ctx, nil, 0, masters)
}

// Restore installs a checkpoint: this rank's shard of the optimizer state
// with its step count steps, then the master weights (see RestoreMaster).
// A nil state leaves the optimizer state and step count as they are; an
// empty one resets the state to zero; otherwise it holds, by state name,
// one float32 host tensor per unit of Own(u) elements (OptimizerState's
// layout, copied to the host). It is a collective. Each rank's local part
// (the state, the masters copied and re-cast, the gradients discarded)
// runs first and the ranks agree on its outcome before the re-gathers, so
// that a failure on one rank alone fails every rank at once, naming it,
// instead of leaving the others in a re-gather until their timeout. The
// arguments are checked before anything is written; a failure after that
// leaves the parameters partly restored.
func (z *Optimizer) Restore(ctx context.Context, state map[string][]*tensor.Tensor, steps int64, masters []*tensor.Tensor) error {
	// a restore between steps is no step: its re-gathers stay out of the
	// timers (see Timers)
	defer func(t Timers) { z.timers = t }(z.timers)
	err := z.restoreLocal(ctx, state, steps, masters)
	if aerr := comm.Agree(ctx, z.c, "zero: restore", err); err != nil {
		return err
	} else if aerr != nil {
		return aerr
	}
	return z.regather(ctx)
}

// restoreLocal is Restore's part on this rank alone.
func (z *Optimizer) restoreLocal(ctx context.Context, state map[string][]*tensor.Tensor, steps int64, masters []*tensor.Tensor) error {
	if len(masters) != len(z.lay.Units) {
		return fmt.Errorf("zero: restore: %d master chunks for %d units", len(masters), len(z.lay.Units))
	}
	for u, t := range masters {
		if _, n := z.own(u); t == nil || t.DType() != tensor.Float32 || t.Numel() != n || !t.Contiguous() {
			return fmt.Errorf("zero: restore: unit %d: master chunk %v, want %d contiguous float32 elements", u, t, n)
		}
	}
	if len(z.pending) > 0 {
		return errors.New("zero: restore: gradient reductions are in flight (restore between steps only)")
	}
	z.staleSecondaries() // before anything is written
	if state != nil {
		if err := z.restoreOptimizerState(state, steps); err != nil {
			return err
		}
	}
	for u := range z.lay.Units {
		if err := z.castInto(z.master[u], masters[u]); err != nil {
			return fmt.Errorf("zero: restore: unit %d: %w", u, err)
		}
		if z.copies[u] != nil && z.bf16Master() {
			if err := z.be.Copy(z.copies[u], z.master[u]); err != nil {
				return fmt.Errorf("zero: restore: unit %d: %w", u, err)
			}
		} else if z.copies[u] != nil {
			if err := z.stepBackend().Cast([]*tensor.Tensor{z.copies[u]}, []*tensor.Tensor{z.master[u]}); err != nil {
				return fmt.Errorf("zero: restore: unit %d: %w", u, err)
			}
		}
	}
	z.freeMasterCache() // after the copies: masters may be Master's own
	if z.offloaded() {
		if err := z.uploadParts(z.allParts()); err != nil {
			return fmt.Errorf("zero: restore: %w", err)
		}
	}
	if err := z.writeBack(ctx); err != nil {
		return fmt.Errorf("zero: restore: %w", err)
	}
	if err := z.ZeroGrad(); err != nil {
		return err
	}
	return nil
}

// regather is Restore's collective part: the replicated parameters from
// the restored masters.
func (z *Optimizer) regather(ctx context.Context) error {
	switch z.cfg.Stage {
	case 1, 2:
		for u := range z.lay.Units {
			lo, n := z.own(u)
			own, err := z.param[u].Slice(lo, n)
			if err != nil {
				return err
			}
			if err := z.c.AllGather(ctx, z.param[u], own); err != nil {
				return fmt.Errorf("zero: restore: gathering bucket %d: %w", u, err)
			}
		}
	case 3:
		if err := z.execute(ctx, z.coord.ReleaseAll()); err != nil {
			return err
		}
		return z.gatherPersistent(ctx)
	}
	return nil
}

// restoreOptimizerState replaces the base optimizer's state of this
// rank's shard with state (see Restore; empty resets it to zero) and its
// step count with steps (see optim.LoadState).
func (z *Optimizer) restoreOptimizerState(state map[string][]*tensor.Tensor, steps int64) error {
	load := func() error { return optim.LoadState(z.base, z.cfg.GroupName, z.master, state, steps) }
	if len(z.subs) > 1 {
		load = func() error { return z.restoreSubGroups(state, steps) }
	}
	if err := load(); err != nil {
		return fmt.Errorf("zero: restore: %w", err)
	}
	return nil
}
