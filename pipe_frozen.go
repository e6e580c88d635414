package deepgo

// Frozen parameters (model.Param.Frozen) in the pipeline engine, as in the
// data-parallel one (frozen.go): each stage keeps its modules' frozen
// parameters itself, outside its ZeRO (e.params and the stage's
// zero.ModuleSpecs list the trainable ones only), in the working dtype,
// replicated over the stage's data-parallel group (under TP each TP rank
// its shard of a split one), bound with Data and a nil Grad. A frozen
// weight tied across stages (GPT's wte, on the first and last stage) is
// not in e.tied: it has no gradient to all-reduce; its holders start from
// the first holder's value (broadcast at Initialize, as tieWeights does a
// trainable one's) and, never changed, stay equal. Checkpoints hold each
// frozen value once, as frozen/<name> (frozen/mp_rank_XX/<name> for a TP
// shard), written by data rank 0 of the first stage holding it, and the
// manifest's parameter map places it there, as the data-parallel engine's
// do (ckpt_frozen.go): either engine loads the other's.

import (
	"context"
	"fmt"
	"slices"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// splitFrozen keeps module m's frozen parameters in e.frozen and returns
// its others (a nil one among them, for setupOptimizer's error).
func (e *PipeEngine) splitFrozen(m int, ps []*model.Param) []*model.Param {
	var out []*model.Param
	for _, p := range ps {
		if p != nil && p.Frozen {
			e.frozen = append(e.frozen, frozenParam{m: m, p: p})
			continue
		}
		out = append(out, p)
	}
	return out
}

// checkStagesTrainable refuses a partition with a virtual stage whose
// parameters are all frozen (its ZeRO would have nothing to train). Every
// rank decides from the whole model, before any collective.
func checkStagesTrainable(all []model.Module, bounds func(v int) (lo, hi int), n int) error {
	for v := range n {
		lo, hi := bounds(v)
		frozen, trainable := 0, 0
		for _, m := range all[lo:hi] {
			for _, p := range m.Params() {
				if p != nil && p.Frozen {
					frozen++
				} else {
					trainable++
				}
			}
		}
		if trainable == 0 && frozen > 0 {
			return fmt.Errorf("deepgo.Initialize: not supported: every parameter of pipeline virtual stage %d is frozen (model.Param.Frozen on all %d): nothing for its optimizer to train; freeze fewer, or partition otherwise", v, frozen)
		}
	}
	return nil
}

// checkFrozenInitial refuses a frozen parameter without a usable initial
// value (before any collective, as setupOptimizer does a trainable one).
func (e *PipeEngine) checkFrozenInitial() error {
	for _, f := range e.frozen {
		if f.p.Name == "" || f.p.Data == nil || f.p.Data.Numel() != numel(f.p.Shape) {
			return fmt.Errorf("deepgo.Initialize: pipeline stage %d: frozen parameter %q: want a named parameter with an initial value of shape %v", e.stage, f.p.Name, f.p.Shape)
		}
	}
	return nil
}

// initFrozen copies the stage's frozen parameters' initial values into
// engine memory in dt (data rank 0's, broadcast over the stage's data
// group), then makes the holders of a frozen weight tied across stages
// agree on the first holder's.
func (e *PipeEngine) initFrozen(ctx context.Context, dt tensor.DType) error {
	var c comm.Comm
	if e.data.Size() > 1 {
		c = e.data
	}
	seen := map[string]bool{}
	for i := range e.frozen {
		f := &e.frozen[i]
		t, err := e.be.Empty(dt, f.p.Shape...)
		if err != nil {
			return err
		}
		f.t = t
		if err := castOver(ctx, e.be, c, t, f.p.Data); err != nil {
			return fmt.Errorf("deepgo.Initialize: frozen parameter %s: %w", f.p.Name, err)
		}
		f.copy = seen[f.p.Name]
		seen[f.p.Name] = true
	}
	return e.tieFrozen(ctx)
}

// tieFrozen finds the frozen weights several stages hold and broadcasts
// the first holder's value into the others' (a collective over e.pipe).
func (e *PipeEngine) tieFrozen(ctx context.Context) error {
	var mine []string
	for _, f := range e.frozen {
		if !f.copy {
			mine = append(mine, f.p.Name)
		}
	}
	holders, names, err := sharedNames(ctx, e.pipe, mine)
	if err != nil {
		return fmt.Errorf("deepgo.Initialize: pipeline: listing the stages' frozen parameters: %w", err)
	}
	for _, name := range names {
		g, err := comm.NewSubgroup(ctx, e.pipe, holders[name])
		if err != nil {
			return fmt.Errorf("deepgo.Initialize: pipeline: group of tied frozen weight %s: %w", name, err)
		}
		if g == nil {
			continue
		}
		for i := range e.frozen {
			f := &e.frozen[i]
			if f.p.Name != name || f.copy {
				continue
			}
			f.copy, f.tied = holders[name][0] != e.stage, true
			if err = castOver(ctx, e.be, g, f.t, f.t); err != nil {
				err = fmt.Errorf("deepgo.Initialize: pipeline: synchronizing tied frozen weight %s over stages %v: %w", name, holders[name], err)
			}
			break
		}
		if cerr := g.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	// a second holder on this stage takes the first's value
	for i, f := range e.frozen {
		if !f.copy {
			continue
		}
		for _, o := range e.frozen[:i] {
			if o.p.Name == f.p.Name {
				if err := e.be.Copy(f.t, o.t); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// frozenParameters adds the stage's frozen values (not the copies) to
// Parameters' encoding.
func (e *PipeEngine) frozenParameters(mine []byte) ([]byte, error) {
	for _, f := range e.frozen {
		if f.copy {
			continue
		}
		v, err := float32sOf(e.be, f.t)
		if err != nil {
			return nil, fmt.Errorf("deepgo: frozen parameter %s: %w", f.p.Name, err)
		}
		mine = appendNamedFloats(mine, f.p.Name, v)
	}
	return mine, nil
}

// saveFrozen adds the stage's frozen values to st (data rank 0; under TP
// each TP rank its shards of the split ones, TP rank 0 the replicated
// ones), or with exclude drops them from st's parameter map and returns
// the whole model's frozen names for engineCheckpoint.FrozenExcluded.
func (e *PipeEngine) saveFrozen(st *checkpoint.State, exclude bool) ([]string, error) {
	if exclude {
		var names []string
		for _, m := range e.net.Modules() {
			for _, p := range m.Params() {
				if p.Frozen && !slices.Contains(names, p.Name) {
					names = append(names, p.Name)
				}
			}
		}
		st.Params = slices.DeleteFunc(st.Params, func(r checkpoint.ParamRef) bool { return slices.Contains(names, r.Name) })
		return names, nil
	}
	tpRank, tpN := e.tpRank(), e.tpSize()
	for _, f := range e.frozen {
		split := f.p.Parallel.Split && tpN > 1
		if f.copy || e.data.Rank() != 0 || !split && tpRank != 0 {
			continue
		}
		name := frozenPrefix + f.p.Name
		if split {
			name = tpTensorName(name, tpRank)
		}
		h, err := stageFloat32(e.be, &e.staged, f.t, f.p.Shape)
		if err != nil {
			return nil, fmt.Errorf("frozen parameter %s: %w", f.p.Name, err)
		}
		st.Tensors = append(st.Tensors, checkpoint.Entry{Name: name, File: "model", Data: h})
	}
	return nil, nil
}

// readFrozen reads the stage's frozen values from ck as this rank holds
// them (float32 host tensors, by e.frozen; nil where the checkpoint lacks
// one, which keeps its value).
func (e *PipeEngine) readFrozen(ctx context.Context, ck *checkpoint.Checkpoint) ([]*tensor.Tensor, error) {
	refs := map[string]checkpoint.ParamRef{}
	for _, r := range ck.Manifest.Params {
		refs[r.Name] = r
	}
	out := make([]*tensor.Tensor, len(e.frozen))
	fail := func(err error) ([]*tensor.Tensor, error) {
		for _, o := range out {
			if o != nil {
				o.Free()
			}
		}
		return nil, fmt.Errorf("%s: %w", pipeLoad, err)
	}
	for i, f := range e.frozen {
		r, ok := refs[f.p.Name]
		if !ok {
			continue
		}
		t, err := tensor.Empty(tensor.Float32, f.p.Shape...)
		if err != nil {
			return fail(err)
		}
		out[i] = t
		if err := readTPSlot(ctx, ck, r, f.p, e.tpRank(), e.tpSize(), 0, t); err != nil {
			return fail(fmt.Errorf("frozen parameter %s: %w", f.p.Name, err))
		}
	}
	return out, nil
}

// installFrozen writes the values read into the frozen parameters, rounded
// to the working dtype.
func (e *PipeEngine) installFrozen(ctx context.Context, vals []*tensor.Tensor) error {
	for i, v := range vals {
		if v == nil {
			continue
		}
		f := e.frozen[i]
		if err := castOver(ctx, e.be, nil, f.t, v); err != nil {
			return fmt.Errorf("%s: frozen parameter %s: %w", pipeLoad, f.p.Name, err)
		}
	}
	return nil
}

// isFrozen reports whether the model's parameter name is frozen.
func (e *PipeEngine) isFrozen(name string) bool {
	for _, m := range e.net.Modules() {
		for _, p := range m.Params() {
			if p.Name == name {
				return p.Frozen
			}
		}
	}
	return false
}

// tiedFrozen adds the stage's frozen weights tied across stages to out
// (TiedCopies): their values widened to float32.
func (e *PipeEngine) tiedFrozen(out map[string][]float32) error {
	for _, f := range e.frozen {
		if !f.tied {
			continue
		}
		v, err := float32sOf(e.be, f.t)
		if err != nil {
			return fmt.Errorf("deepgo: frozen parameter %s: %w", f.p.Name, err)
		}
		out[f.p.Name] = v
	}
	return nil
}

// bindFrozen points module m's frozen parameters at their values, with no
// gradient.
func (e *PipeEngine) bindFrozen(m int) { bindFrozenIn(e.frozen, m) }

// freeFrozen frees the frozen values (Close).
func (e *PipeEngine) freeFrozen() error { return freeFrozenIn(e.frozen) }

// frozenMemory adds the stage's frozen values to m (Memory).
func (e *PipeEngine) frozenMemory(m *zero.Memory) { frozenMemoryIn(e.frozen, m) }
