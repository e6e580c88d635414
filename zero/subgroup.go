package zero

// This file holds sub_group_size: the owned shard stepped in consecutive
// sub-groups, each an optim.ParamGroup of its own, so the optimizer's
// StateStore holds one sub-group's state at a time (the NVMe store pages it
// in before the sub-group's step and out after, reading the next one
// meanwhile).
//
// DeepSpeed partitions into sub-groups in stage 3 only
// (_create_fp16_sub_groups: whole parameters, a group closed once it holds
// sub_group_size elements); stages 1-2 step each flat partition whole. Here
// the engine passes Config.SubGroupSize for stage 3 and, at any stage, with
// NVMe optimizer offload, where it is what bounds host memory. Our shard is
// a few flat units, so a sub-group is a run of element ranges of at most
// SubGroupSize elements, cut anywhere: the elementwise update rules (Adam,
// SGD, Lion) give the same bits however the shard is cut, because the C
// kernels' vector bodies and scalar tails do the same arithmetic. Lamb's
// trust ratio needs each tensor's norms, so for Lamb units are never cut:
// whole units are packed while they fit and a larger one steps alone.
//
// Checkpoints keep one state tensor per unit under Config.GroupName:
// OptimizerState assembles the sub-groups' state back into units and
// Restore cuts it again, so a checkpoint does not depend on
// sub_group_size.

import (
	"context"
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// subPart is elements [off, off+n) of a unit's owned chunk.
type subPart struct{ unit, off, n int }

// subGroup is one optimizer step call: its parts' master (and model-dtype
// copy) views, and the name its state and step count go by.
type subGroup struct {
	name   string
	parts  []subPart
	params []*tensor.Tensor
	copies []*tensor.Tensor
	mirror []*tensor.Tensor // bf16 masters without offload: the parameters copied from params after the step
}

// planSubGroups cuts the owned chunks (ns[u] elements of unit u, in unit
// order) into consecutive sub-groups of at most size elements; size <= 0
// means one group. whole keeps units uncut: units are packed while the
// group stays within size, and a unit larger than size is a group alone.
func planSubGroups(ns []int, size int, whole bool) [][]subPart {
	total := 0
	for _, n := range ns {
		total += n
	}
	if size <= 0 || size >= total {
		size = max(total, 1)
	}
	var out [][]subPart
	var cur []subPart
	used := 0
	flush := func() {
		if len(cur) > 0 {
			out = append(out, cur)
		}
		cur, used = nil, 0
	}
	for u, n := range ns {
		if whole {
			if used > 0 && used+n > size {
				flush()
			}
			if n > 0 {
				cur = append(cur, subPart{u, 0, n})
			}
			used += n
			continue
		}
		for off := 0; off < n; {
			k := min(n-off, size-used)
			cur = append(cur, subPart{u, off, k})
			off += k
			if used += k; used == size {
				flush()
			}
		}
	}
	flush()
	return out
}

// view is elements [off, off+n) of t, t itself when that is all of it.
func view(t *tensor.Tensor, off, n int) (*tensor.Tensor, error) {
	if t == nil || off == 0 && n == t.Numel() {
		return t, nil
	}
	return t.Slice(off, n)
}

// views returns the parts' ranges of per-unit tensors ts.
func views(parts []subPart, ts []*tensor.Tensor) ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(parts))
	for i, p := range parts {
		v, err := view(ts[p.unit], p.off, p.n)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// planSteps builds the sub-groups from Config.SubGroupSize. A single group
// is the whole shard under Config.GroupName, stepped as before sub-groups
// existed.
func (z *Optimizer) planSteps() error {
	ns := make([]int, len(z.lay.Units))
	for u := range ns {
		_, ns[u] = z.own(u)
	}
	plan := planSubGroups(ns, z.cfg.SubGroupSize, z.base.Kind() == optim.KindLamb)
	z.subs = make([]*subGroup, len(plan))
	for i, parts := range plan {
		sg := &subGroup{name: z.cfg.GroupName, parts: parts}
		if len(plan) > 1 {
			sg.name = fmt.Sprintf("%s/sub%d", z.cfg.GroupName, i)
		}
		var err error
		if sg.params, err = views(parts, z.master); err != nil {
			return err
		}
		if z.cfg.ModelDType != tensor.Float32 && z.copies[parts[0].unit] != nil {
			dst := &sg.copies
			if z.bf16Master() {
				dst = &sg.mirror
			}
			if *dst, err = views(parts, z.copies); err != nil {
				return err
			}
		}
		z.subs[i] = sg
	}
	return nil
}

// SubGroups reports how many optimizer step calls (sub-groups) one Step
// makes over this rank's shard.
func (z *Optimizer) SubGroups() int { return len(z.subs) }

// stepSubGroups runs the base optimizer over each sub-group in order with
// the per-unit gradients g. A failure part way leaves the earlier
// sub-groups updated.
func (z *Optimizer) stepSubGroups(ctx context.Context, g []*tensor.Tensor, lr, gradScale float64) error {
	z.freeStateCache()
	z.freeMasterCache()
	if z.offloaded() {
		return z.stepOffloaded(ctx, g, lr, gradScale)
	}
	for _, sg := range z.subs {
		grads, err := views(sg.parts, g)
		if err == nil {
			err = z.stepOne(sg, grads, lr, gradScale)
		}
		if err == nil {
			err = z.mirror(sg)
		}
		if err != nil {
			return z.subErr(sg, err)
		}
	}
	return nil
}

// stepOne steps sub-group sg with its gradients.
func (z *Optimizer) stepOne(sg *subGroup, grads []*tensor.Tensor, lr, gradScale float64) error {
	return z.base.Step(optim.ParamGroup{Name: sg.name, Params: sg.params, Grads: grads, Copies: sg.copies, Hyper: z.hyper}, lr, gradScale)
}

// SetHyper sets the hyperparameters the following Steps pass to the base
// optimizer for every sub-group (optim.ParamGroup.Hyper), in place of its
// defaults; nil goes back to the defaults. Step's lr is the rate whatever
// h.LR says. The engines set the momentum an LR schedule drives this way
// (OneCycle's cycle_momentum writes each param group's betas in
// DeepSpeed). h is copied; an invalid h fails the next Step.
func (z *Optimizer) SetHyper(h *optim.Hyper) {
	if h == nil {
		z.hyper = nil
		return
	}
	c := *h
	z.hyper = &c
}

// subErr names the sub-group of a failed step when there are several.
func (z *Optimizer) subErr(sg *subGroup, err error) error {
	if len(z.subs) > 1 {
		return fmt.Errorf("sub-group %q: %w", sg.name, err)
	}
	return err
}

// assembleState copies the sub-groups' state into one host tensor per
// unit and state name (nil when no sub-group has state yet). The tensors
// are the Optimizer's until the next Step, OptimizerState or Close.
func (z *Optimizer) assembleState() (map[string][]*tensor.Tensor, error) {
	z.freeStateCache()
	var out map[string][]*tensor.Tensor
	for _, sg := range z.subs {
		st, err := z.readState(sg.name)
		if err != nil {
			return nil, fmt.Errorf("zero: state of sub-group %q: %w", sg.name, err)
		}
		if st == nil {
			continue
		}
		if out == nil {
			out = map[string][]*tensor.Tensor{}
			z.stateCache = out
		}
		for name, ts := range st {
			if out[name] == nil {
				out[name] = make([]*tensor.Tensor, len(z.lay.Units))
				for u := range z.lay.Units {
					_, n := z.own(u)
					t, err := tensor.Empty(tensor.Float32, n) // zeroed: sub-groups without state read as zero
					if err != nil {
						return nil, err
					}
					out[name][u] = t
				}
			}
			if len(ts) != len(sg.parts) {
				return nil, fmt.Errorf("zero: state %q of sub-group %q has %d tensors for %d parts", name, sg.name, len(ts), len(sg.parts))
			}
			for i, p := range sg.parts {
				dst, err := view(out[name][p.unit], p.off, p.n)
				if err != nil {
					return nil, err
				}
				if err := z.castInto(dst, ts[i]); err != nil {
					return nil, fmt.Errorf("zero: state %q of sub-group %q: %w", name, sg.name, err)
				}
			}
		}
	}
	return out, nil
}

func (z *Optimizer) freeStateCache() {
	for _, t := range z.widened {
		t.Free()
	}
	z.widened = nil
	for _, ts := range z.stateCache {
		for _, t := range ts {
			if t != nil {
				t.Free()
			}
		}
	}
	z.stateCache = nil
}

// restoreSubGroups loads per-unit state (see restoreOptimizerState) into
// every sub-group, cut as they step. Sizes are checked before anything is
// written.
func (z *Optimizer) restoreSubGroups(state map[string][]*tensor.Tensor, steps int64) error {
	for name, ts := range state {
		if len(ts) != len(z.lay.Units) {
			return fmt.Errorf("state %q has %d tensors for %d units", name, len(ts), len(z.lay.Units))
		}
		for u, t := range ts {
			if _, n := z.own(u); t == nil || t.DType() != tensor.Float32 || t.Numel() != n || !t.Contiguous() || !t.Device().IsCPU() {
				return fmt.Errorf("state %q[%d] is %v, want %d contiguous float32 host elements", name, u, t, n)
			}
		}
	}
	z.freeStateCache()
	var errs []error
	for _, sg := range z.subs {
		var st map[string][]*tensor.Tensor
		if len(state) > 0 {
			st = make(map[string][]*tensor.Tensor, len(state))
			for name, ts := range state {
				v, err := views(sg.parts, ts)
				if err != nil {
					return err
				}
				st[name] = v
			}
		}
		if err := optim.LoadState(z.base, sg.name, sg.params, st, steps); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// StateReader is implemented by optimizer-state stores whose reads can
// fail (offload.NVMeStore reads swap files): ReadState is Lookup with the
// error Lookup's signature drops, so that a checkpoint never takes a
// sub-group it could not read for one without state.
type StateReader interface {
	ReadState(group string) (map[string][]*tensor.Tensor, error)
}

// readState is the base optimizer's state of group, through the store's
// ReadState where it has one.
func (z *Optimizer) readState(group string) (map[string][]*tensor.Tensor, error) {
	if sr, ok := optim.StoreOf(z.base).(StateReader); ok {
		return sr.ReadState(group)
	}
	return z.base.State(group), nil
}

// SwapUsage is implemented by optimizer-state stores that keep the state
// in files and page it through host buffers (offload.NVMeStore): resident
// is the host memory those buffers take now, peak its high-water mark, and
// disk the state bytes in the files.
type SwapUsage interface {
	SwapUsage() (resident, peak, disk int64)
}

// stateMemory fills m's optimizer-state fields: from the store's
// SwapUsage when it pages state from files, else by looking the state up.
func (z *Optimizer) stateMemory(m *Memory) {
	if su, ok := optim.StoreOf(z.base).(SwapUsage); ok {
		resident, peak, disk := su.SwapUsage()
		m.OptimizerState, m.OptimizerStateOnDisk = disk, disk
		m.SwapBuffers, m.SwapBuffersPeak = resident, peak
		m.HostBytes += resident
		return
	}
	for _, sg := range z.subs {
		for _, ts := range z.base.State(sg.name) {
			for _, t := range ts {
				m.OptimizerState += int64(t.Bytes())
				if t.Device().IsCPU() {
					m.HostBytes += int64(t.Bytes())
				} else {
					m.DeviceBytes += int64(t.Bytes())
				}
			}
		}
	}
}
