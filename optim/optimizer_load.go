package optim

import (
	"fmt"
	"maps"
	"slices"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// StateLoader is implemented by optimizers that can restore a group's
// state from a checkpoint, creating it when the group has not stepped
// yet. The optimizers New returns implement it.
type StateLoader interface {
	// LoadState replaces group's state with state (by name one float32
	// host tensor per params[i], of its size; nil or empty means zero
	// state) and its step count with steps. Everything is checked before
	// anything is written.
	LoadState(group string, params []*tensor.Tensor, state map[string][]*tensor.Tensor, steps int64) error
}

// LoadState restores group's state and step count into o (checkpoint
// load): through StateLoader when o implements it; otherwise into the
// tensors State(group) returns, which fails when the group has no state
// yet but state is not empty.
func LoadState(o Optimizer, group string, params []*tensor.Tensor, state map[string][]*tensor.Tensor, steps int64) error {
	if l, ok := o.(StateLoader); ok {
		return l.LoadState(group, params, state, steps)
	}
	cur := o.State(group)
	if cur == nil && len(state) > 0 {
		return fmt.Errorf("optim.LoadState(%q): the optimizer (%T) has no state to load into and does not implement StateLoader", group, o)
	}
	if err := checkLoad(group, slices.Sorted(maps.Keys(cur)), params, state); err != nil {
		return err
	}
	if err := copyState(nil, cur, state); err != nil {
		return err
	}
	return o.SetSteps(group, steps)
}

// checkLoad checks that state holds exactly names (or nothing), each one
// float32 host tensor per param of its size.
func checkLoad(group string, names []string, params []*tensor.Tensor, state map[string][]*tensor.Tensor) error {
	op := fmt.Sprintf("optim.LoadState(%q)", group)
	if len(state) == 0 {
		return nil
	}
	for k := range state {
		if !slices.Contains(names, k) {
			return fmt.Errorf("%s: state %q is not one of this optimizer's %v", op, k, names)
		}
	}
	for _, n := range names {
		ts, ok := state[n]
		if !ok {
			return fmt.Errorf("%s: state %q is missing", op, n)
		}
		if len(ts) != len(params) {
			return fmt.Errorf("%s: state %q has %d tensors for %d params", op, n, len(ts), len(params))
		}
		for i, t := range ts {
			if t == nil || t.DType() != tensor.Float32 || t.Numel() != params[i].Numel() || !t.Device().IsCPU() || !t.Contiguous() {
				return fmt.Errorf("%s: state %q[%d] is %v, want %d contiguous float32 host elements", op, n, i, t, params[i].Numel())
			}
		}
	}
	return nil
}

// copyState copies host src into dst (same names and sizes; nil src
// zeroes); dst not in host memory is written through be. src is float32;
// bfloat16 dst (bf16_optimizer_states) gets it rounded to nearest even.
func copyState(be backend.Backend, dst, src map[string][]*tensor.Tensor) error {
	for n, ts := range dst {
		for i, d := range ts {
			if d.DType() == tensor.BFloat16 && len(src) > 0 {
				if err := castState(be, d, src[n][i]); err != nil {
					return fmt.Errorf("optim: state %q[%d]: %w", n, i, err)
				}
				continue
			}
			if !d.Device().IsCPU() {
				if be == nil {
					return fmt.Errorf("optim: state %q[%d] is on %v: the optimizer must implement StateLoader to load it", n, i, d.Device())
				}
				var err error
				if len(src) == 0 {
					err = be.Zero([]*tensor.Tensor{d})
				} else {
					err = be.Copy(d, src[n][i])
				}
				if err != nil {
					return fmt.Errorf("optim: state %q[%d]: %w", n, i, err)
				}
				continue
			}
			b, err := d.RawBytes()
			if err != nil {
				return fmt.Errorf("optim: state %q[%d]: %w", n, i, err)
			}
			if len(src) == 0 {
				clear(b)
				continue
			}
			s, err := src[n][i].RawBytes()
			if err != nil {
				return fmt.Errorf("optim: state %q[%d]: %w", n, i, err)
			}
			copy(b, s)
		}
	}
	return nil
}

// LoadState implements StateLoader.
func (o *fused) LoadState(group string, params []*tensor.Tensor, state map[string][]*tensor.Tensor, steps int64) error {
	if steps < 0 {
		return fmt.Errorf("optim.LoadState(%q): steps %d: must be >= 0", group, steps)
	}
	names := o.StateNames()
	if err := checkLoad(group, names, params, state); err != nil {
		return err
	}
	if len(state) > 0 || o.store.Lookup(group) != nil {
		st, err := o.store.Acquire(group, names, params)
		if err != nil {
			return fmt.Errorf("optim.LoadState(%q): %w", group, err)
		}
		cur := make(map[string][]*tensor.Tensor, len(names))
		for _, n := range names {
			cur[n] = st[n]
		}
		err = copyState(o.be, cur, state)
		if rerr := o.store.Release(group); err == nil {
			err = rerr
		}
		if err != nil {
			return fmt.Errorf("optim.LoadState(%q): %w", group, err)
		}
	}
	return o.SetSteps(group, steps)
}

// castState rounds the float32 host tensor src into the bfloat16 d, on the
// host or through be on its device.
func castState(be backend.Backend, d, src *tensor.Tensor) error {
	if d.Device().IsCPU() {
		out, err := d.Uint16s()
		if err != nil {
			return err
		}
		in, err := src.Float32s()
		if err != nil {
			return err
		}
		for i, v := range in {
			out[i] = tensor.Float32ToBFloat16(v)
		}
		return nil
	}
	if be == nil {
		return fmt.Errorf("bfloat16 state on %v: the optimizer must implement StateLoader to load it", d.Device())
	}
	tmp, err := be.Empty(tensor.Float32, d.Numel())
	if err != nil {
		return err
	}
	defer tmp.Free()
	if err := be.Copy(tmp, src); err != nil {
		return err
	}
	return be.Cast([]*tensor.Tensor{d}, []*tensor.Tensor{tmp})
}
