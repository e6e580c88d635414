package deepgo

// Frozen parameters in checkpoints. Save writes each whole, once (rank 0),
// as the float32 tensor frozen/<name> (its working-dtype value widened:
// lossless, and what Consolidate and a trainable load read), placed by the
// manifest's parameter map like any parameter. SaveOptions.ExcludeFrozen
// (DeepSpeed's exclude_frozen_parameters) leaves them out and lists their
// names in deepgo.engine's frozen_excluded instead, so that Load knows
// them deliberately absent: it keeps the model's current values without
// NonStrict (DeepSpeed's strict load_state_dict reports them missing and
// needs load_module_strict=False).
//
// Load reads a frozen parameter from whatever the checkpoint holds under
// its name: a frozen value, or a trainable one's fp32 master (rounded to
// the working dtype). A parameter saved frozen and trainable now has a
// master (the frozen value) but no optimizer state: Load refuses it,
// naming it, unless ModuleOnly or SkipOptimizerStates, which keep the
// optimizer state the engine has (fresh before its first step).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/tensor"
)

// frozenPrefix names the tensors of frozen parameters in a checkpoint.
const frozenPrefix = "frozen/"

// saveFrozen adds the frozen parameters to st (rank 0's tensors, every
// rank's parameter map), or with exclude returns their names for
// engineCheckpoint.FrozenExcluded. The float32 copies live until
// releaseStaged.
func (e *Engine) saveFrozen(st *checkpoint.State, exclude bool) ([]string, error) {
	var excluded []string
	for _, f := range e.frozen {
		if exclude {
			excluded = append(excluded, f.p.Name)
			continue
		}
		name := frozenPrefix + f.p.Name
		st.Params = append(st.Params, checkpoint.ParamRef{Name: f.p.Name, Shape: slices.Clone(f.p.Shape), Source: name})
		if e.c.Rank() != 0 {
			continue
		}
		h, err := stageFloat32(e.be, &e.staged, f.t, f.p.Shape)
		if err != nil {
			return nil, fmt.Errorf("frozen parameter %s: %w", f.p.Name, err)
		}
		st.Tensors = append(st.Tensors, checkpoint.Entry{Name: name, File: "model", Data: h})
	}
	return excluded, nil
}

// tpFrozenRefs turns saveFrozen's parameter map refs (one per frozen
// parameter, none with ExcludeFrozen) into TP rank 0's over n TP ranks'
// tensors (tpCollect, tpParamRef).
func (e *Engine) tpFrozenRefs(refs []checkpoint.ParamRef, n int) []checkpoint.ParamRef {
	out := make([]checkpoint.ParamRef, 0, len(refs))
	for i, ref := range refs {
		out = append(out, tpParamRef(e.frozen[i].p, ref, n))
	}
	return out
}

// frozenRef is where frozen parameter e.frozen[i] loads from (found false:
// it keeps its value).
type frozenRef struct {
	ref   checkpoint.ParamRef
	found bool
}

// matchFrozen pairs every frozen parameter with its checkpoint entry, as
// matchParams does the trainable ones, claiming the entries it takes.
func (e *Engine) matchFrozen(ck *checkpoint.Checkpoint, refs map[string]checkpoint.ParamRef, ec engineCheckpoint, opts LoadOptions, res *LoadResult, claimed map[string]string) ([]frozenRef, error) {
	out := make([]frozenRef, len(e.frozen))
	for i, f := range e.frozen {
		names := e.checkpointNames(f.m, f.p, ec.ParamNames == "")
		for _, n := range names {
			if r, ok := refs[n]; ok {
				out[i] = frozenRef{ref: r, found: true}
				break
			}
		}
		if !out[i].found {
			switch {
			case slices.ContainsFunc(names, func(n string) bool { return slices.Contains(ec.FrozenExcluded, n) }):
				res.Notes = append(res.Notes, fmt.Sprintf("frozen parameter %s: saved with ExcludeFrozen; keeps its current value", f.p.Name))
			case opts.NonStrict:
				res.Missing = append(res.Missing, f.p.Name)
			default:
				return nil, fmt.Errorf("deepgo: Load: %s: the checkpoint has no parameter %q", ck.Path, f.p.Name)
			}
			continue
		}
		r := out[i].ref
		if other, dup := claimed[r.Name]; dup {
			return nil, fmt.Errorf("deepgo: Load: %s: checkpoint parameter %q matches both %q and %q", ck.Path, r.Name, other, f.p.Name)
		}
		claimed[r.Name] = f.p.Name
		if full := e.fullShape(f.p); !slices.Equal(r.Shape, full) {
			return nil, fmt.Errorf("deepgo: Load: %s: parameter %q has shape %v in the checkpoint, %v in the model", ck.Path, f.p.Name, r.Shape, full)
		}
		if _, n := e.tpDegree(); n > 1 && f.p.Parallel.Split {
			if err := f.p.Parallel.Check(r.Shape, n); err != nil {
				return nil, fmt.Errorf("deepgo: Load: parameter %q: %w", f.p.Name, err)
			}
		}
	}
	return out, nil
}

// ErrSavedFrozen is wrapped by Load's error when a parameter the model
// trains was frozen when the checkpoint was saved, so the checkpoint has
// no optimizer state for it (LoadOptions.ModuleOnly or
// SkipOptimizerStates load it), or, saved with SaveOptions.ExcludeFrozen,
// no value at all (LoadOptions.NonStrict keeps the model's current one).
var ErrSavedFrozen = errors.New("was frozen when saved")

// refuseThawed refuses to load a trainable parameter from a checkpoint
// that saved it frozen while the optimizer state is loaded: there is none
// for it.
func refuseThawed(ck *checkpoint.Checkpoint, ec engineCheckpoint, opts LoadOptions, name string, r checkpoint.ParamRef) error {
	if !strings.HasPrefix(r.Pieces()[0].Source, frozenPrefix) || opts.ModuleOnly || opts.SkipOptimizerStates || len(ec.OptimizerState) == 0 {
		return nil
	}
	return fmt.Errorf("deepgo: Load: %s: parameter %q is trainable but %w: the checkpoint has no optimizer state for it; load with ModuleOnly or SkipOptimizerStates to start from its value with the optimizer state the engine has", ck.Path, name, ErrSavedFrozen)
}

// readFrozen reads the frozen parameters' values from ck as this rank
// holds them (its TP shard of a split one, cut from the full value at any
// degree the checkpoint was saved with): float32 host tensors, nil where
// one keeps its value.
func (e *Engine) readFrozen(ctx context.Context, ck *checkpoint.Checkpoint, refs []frozenRef) ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(refs))
	fail := func(err error) ([]*tensor.Tensor, error) {
		for _, o := range out {
			if o != nil {
				o.Free()
			}
		}
		return nil, fmt.Errorf("deepgo: Load: %w", err)
	}
	for i, r := range refs {
		if !r.found {
			continue
		}
		p := e.frozen[i].p
		t, err := tensor.Empty(tensor.Float32, p.Shape...)
		if err != nil {
			return fail(err)
		}
		out[i] = t
		if err := e.readSlot(ctx, ck, r.ref, p, 0, t); err != nil {
			return fail(fmt.Errorf("frozen parameter %s: %w", p.Name, err))
		}
	}
	return out, nil
}

// installFrozen writes the values read into the frozen parameters, rounded
// to the working dtype (every rank read the same checkpoint: no broadcast).
func (e *Engine) installFrozen(vals []*tensor.Tensor) error {
	for i, v := range vals {
		if v == nil {
			continue
		}
		f := e.frozen[i]
		if err := e.castInto(f.t, v); err != nil {
			return fmt.Errorf("frozen parameter %s: %w", f.p.Name, err)
		}
	}
	return nil
}

// FrozenExcluded lists the frozen parameters a checkpoint saved with
// SaveOptions.ExcludeFrozen left out (nil when none, or when ck is not an
// engine's checkpoint): a consolidated file of ck lacks them, and Load
// keeps the model's own values for them.
func FrozenExcluded(ck *checkpoint.Checkpoint) []string {
	raw, ok := ck.Meta(0, metaEngine)
	if !ok {
		return nil
	}
	var ec engineCheckpoint
	if json.Unmarshal(raw, &ec) != nil {
		return nil
	}
	return ec.FrozenExcluded
}

// stageFloat32 returns t (a frozen value on be's device) widened to a
// float32 host tensor of shape, alive until staged is released (both
// engines' saveFrozen).
func stageFloat32(be backend.Backend, staged *[]func(), t *tensor.Tensor, shape []int) (*tensor.Tensor, error) {
	w, err := be.Empty(tensor.Float32, shape...)
	if err != nil {
		return nil, err
	}
	if err := castFlat(be, w, t); err != nil {
		w.Free()
		return nil, err
	}
	h, err := stageOnHost(be, staged, w)
	switch {
	case err != nil || h != w:
		w.Free() // the host copy, if any, is staged
	default:
		*staged = append(*staged, func() { w.Free() })
	}
	return h, err
}
