package deepgo

// Pipeline checkpoints. PipeEngine.Save writes package checkpoint's layout
// (checkpoint/doc.go) over every rank of the pipe × data grid, keyed by
// parameter name rather than by ZeRO unit, so that what a stage holds
// does not depend on how the model was cut:
//
//	fp32/<param>                 the parameter's fp32 master weights, flat,
//	                             sharded over the stage's data-parallel
//	                             ranks as its ZeRO partition is
//	optim/<state>/<param>        the optimizer's state <state>, laid out
//	                             like fp32/<param> (after the first step)
//	fp32/<param>@<module>        a stage's own copy of a weight tied across
//	optim/<state>/<param>@<module>  stages (GPT's wte in its head module),
//	                             under the module holding it
//
// This is DeepSpeed's one-file-per-layer idea in the checkpoint's one
// namespace: the manifest's parameter map lists every parameter once
// (Source fp32/<param>, offset 0), so Consolidate exports the model, and
// a stage finds its parameters by name whatever the pipeline degree,
// data-parallel size or ZeRO stage (0 or 1) of the run that saved them;
// the data-parallel Engine loads such a checkpoint too, and a pipeline
// loads the Engine's. A tied copy is read from its own module's tensors
// when the checkpoint has them, else from the parameter's; each copy is
// stored separately so that a resume can compare them.
//
// Small state is the data-parallel engine's (deepgo.engine, client_state),
// with the topology {"pipe": pp, "data": dp, "model": 1}.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// pipeLoad prefixes the pipeline engine's load errors.
const pipeLoad = "deepgo: pipeline engine: Load"

// tiedCopyKey is the checkpoint key of a stage's copy of tied weight name
// held by module mod.
func tiedCopyKey(name, mod string) string { return name + "@" + mod }

// ckptKeys are the checkpoint keys of the stage's parameters, [module][param]:
// the parameter's name, or for a copy of a tied weight (a non-owner
// stage's, or a second holder on the same stage) name@module.
func (e *PipeEngine) ckptKeys() [][]string {
	seen := map[string]bool{}
	keys := make([][]string, len(e.params))
	for m, ps := range e.params {
		keys[m] = make([]string, len(ps))
		for j, p := range ps {
			keys[m][j] = p.Name
			if seen[p.Name] || e.isTiedCopy(m, j) {
				keys[m][j] = tiedCopyKey(p.Name, e.mods[m].Name())
			}
			seen[p.Name] = true
		}
	}
	return keys
}

// modelParams lists every parameter of the whole model once, in module
// order, as the manifest's parameter map: each in fp32/<name> at offset 0.
func (e *PipeEngine) modelParams() []checkpoint.ParamRef {
	var out []checkpoint.ParamRef
	seen := map[string]bool{}
	for _, m := range e.net.Modules() {
		for _, p := range m.Params() {
			if seen[p.Name] {
				continue
			}
			seen[p.Name] = true
			out = append(out, checkpoint.ParamRef{Name: p.Name, Shape: slices.Clone(p.Shape), Source: masterPrefix + p.Name})
		}
	}
	return out
}

// pipeCheckpointState builds this rank's checkpoint.State: the pieces of
// each of the stage's parameters this data-parallel rank saves (chunk r of
// each unit's padded flat, as Engine.Save cuts them), per parameter.
func (e *PipeEngine) pipeCheckpointState(op, dir string, so SaveOptions) (checkpoint.Options, *checkpoint.State, error) {
	o := checkpoint.OptionsFromConfig(e.cfg.Checkpoint)
	if dir != "" {
		o.Dir = dir
	}
	o.Tag, o.Comm = so.Tag, e.world
	switch {
	case o.Dir == "":
		return o, nil, fmt.Errorf("deepgo: pipeline engine: %s: no directory given and checkpoint.save_dir is not set", op)
	case o.Gathered:
		return o, nil, fmt.Errorf("deepgo: pipeline engine: %s: checkpoint.zero_checkpoint false: not supported with pipeline stages (the stages save their parameters' shards; allowed true)", op)
	case so.ClientState != nil && !json.Valid(so.ClientState):
		return o, nil, fmt.Errorf("deepgo: pipeline engine: %s: client state is not valid JSON", op)
	}
	cfgJSON, err := e.cfg.JSON()
	if err != nil {
		return o, nil, fmt.Errorf("deepgo: pipeline engine: %s: config: %w", op, err)
	}
	z := e.z
	zc, lay := z.Config(), z.Layout()
	dp, r := e.data.Size(), e.data.Rank()
	state, steps := z.OptimizerState()
	names := slices.Sorted(maps.Keys(state))
	st := &checkpoint.State{
		Step:      int64(e.globalSteps),
		ZeroStage: zc.Stage,
		Topology:  map[string]int{"data": dp, "pipe": e.stages, "model": 1},
		Config:    cfgJSON,
		Params:    e.modelParams(),
	}
	keys := e.ckptKeys()
	// pieces adds, for every parameter of unit u, the part of this rank's
	// chunk that falls in it, from full (the rank's owned range of u).
	pieces := func(full *tensor.Tensor, u int, prefix, file string) error {
		unit := lay.Units[u]
		n := unit.Numel / dp
		lo, _ := z.Own(u)
		for _, s := range unit.Slots {
			a, b := max(r*n, s.Offset), min(r*n+n, s.Offset+s.Numel)
			if a >= b {
				continue
			}
			v, err := full.Slice(a-lo, b-a)
			if err != nil {
				return err
			}
			st.Tensors = append(st.Tensors, checkpoint.Entry{Name: prefix + keys[s.Module][s.Param], File: file, Data: v,
				Shard: &checkpoint.Shard{Numel: int64(s.Numel), Offset: int64(a - s.Offset)}})
		}
		return nil
	}
	for u := range lay.Units {
		if err := pieces(z.Master(u), u, masterPrefix, "model"); err != nil {
			return o, nil, fmt.Errorf("deepgo: pipeline engine: %s: %w", op, err)
		}
		for _, s := range names {
			if err := pieces(state[s][u], u, statePrefix+s+"/", "optim"); err != nil {
				return o, nil, fmt.Errorf("deepgo: pipeline engine: %s: %w", op, err)
			}
		}
	}
	ec := newEngineCheckpoint(z, names, steps, e.scaler, e.lrs, e.globalSteps, e.skippedSteps, e.globalSteps*e.batch.GradAccum, e.batch)
	if err := st.SetMeta(metaEngine, ec); err != nil {
		return o, nil, err
	}
	if so.ClientState != nil {
		st.Meta[metaClient] = slices.Clone(so.ClientState)
	}
	return o, st, nil
}

// Save writes a checkpoint of the whole pipeline under dir ("": the
// config's checkpoint.save_dir) with opts.Tag ("": global_step<N>): every
// stage's parameters' fp32 master weights and optimizer state, keyed by
// parameter name (see the layout above), each tied weight's copies
// separately, the loss scaler, LR schedule and counters, the resolved
// config and opts.ClientState (this rank's). It is a collective over every
// rank of the pipeline, atomic and durable (checkpoint.Save), and updates
// dir/latest and keeps checkpoint.keep_n_most_recent checkpoints.
func (e *PipeEngine) Save(ctx context.Context, dir string, opts SaveOptions) error {
	ctx = e.devCtx(ctx)
	o, st, err := e.pipeCheckpointState("Save", dir, opts)
	if err := agreeOn(ctx, e.world, "Save", err); err != nil { // no rank enters the save alone
		return err
	}
	if _, err := checkpoint.Save(ctx, o, st); err != nil {
		return fmt.Errorf("deepgo: pipeline engine: Save: %w", err)
	}
	return nil
}

// pipeSlot is where one of the stage's parameters is read from.
type pipeSlot struct {
	name   string // the parameter's name
	source string // its fp32 tensor in the checkpoint
	offset int64  // where it starts there
}

// Load restores the pipeline from a checkpoint of dir ("": the config's
// checkpoint.load_path, else save_dir), like Engine.Load: every rank reads
// its ZeRO partition of its stage's parameters and their optimizer state
// by parameter name (so the checkpoint may come from another pipeline
// degree, data-parallel size or ZeRO stage, or from the data-parallel
// Engine), every file read verified; only when every rank of the pipeline
// has succeeded does any rank change its engine. opts.NonStrict is not
// supported. Finally the parameters meant to be identical are compared by
// digest: each stage's replicated parameters across its data-parallel
// ranks, and each tied weight's copies across the stages holding it; a
// difference fails Load on every rank with an error naming the parameter
// and the ranks or stages (the engine then holds the checkpoint's values).
func (e *PipeEngine) Load(ctx context.Context, dir string, opts LoadOptions) (LoadResult, error) {
	ctx = e.devCtx(ctx)
	var pre error
	if opts.NonStrict {
		pre = errors.New("deepgo: pipeline engine: Load: NonStrict: not supported yet (a pipeline loads every parameter)")
	}
	plan, err := runLoad(ctx, e.world, e.cfg, e.z, dir, pipeLoad, pre, func(dir string) (*loadPlan, error) {
		return e.preparePipeLoad(ctx, dir, opts)
	})
	if err != nil {
		return LoadResult{}, err
	}
	defer plan.free()
	plan.install(&e.scaler, &e.lrs)
	if !opts.ModuleOnly {
		e.globalSteps, e.skippedSteps = plan.ec.GlobalSteps, plan.ec.SkippedSteps
	}
	e.gradNorm = 0
	for m := range e.params {
		e.bind(m)
	}
	err = e.verifyIdentical(ctx)
	if err = agreeOn(ctx, e.world, "Load", err); err != nil {
		return LoadResult{}, fmt.Errorf("deepgo: pipeline engine: Load: after restoring %s: %w", plan.res.Tag, err)
	}
	return plan.res, nil
}

// preparePipeLoad reads and checks everything Load needs, touching
// nothing.
func (e *PipeEngine) preparePipeLoad(ctx context.Context, dir string, opts LoadOptions) (plan *loadPlan, err error) {
	ck, p, err := openPlan(dir, opts, pipeLoad)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	where := ck.Path
	plan = p
	defer func() {
		if err != nil {
			p.free()
			plan = nil
		}
	}()
	if p.ec.ParamNames != paramNamesModel {
		return nil, fmt.Errorf("deepgo: pipeline engine: Load: %s: parameters named by module (a checkpoint older than model-wide names): not supported by the pipeline engine; load it into the data-parallel Engine and save again", where)
	}
	slots, err := e.matchPipeParams(ck)
	if err != nil {
		return nil, err
	}
	if p.masters, err = e.readSlots(ctx, ck, slots, func(s pipeSlot) (string, error) { return s.source, nil }); err != nil {
		return nil, err
	}
	err = planSmallState(ck, p, e.world.Rank(), e.cfg, e.z, e.lrs != nil, e.opt.Defaults().LR, opts, pipeLoad, func() error {
		return e.readPipeOptimizerState(ctx, ck, p, slots)
	})
	return p, err
}

// matchPipeParams checks the checkpoint's parameter map against the whole
// model's (names and shapes, strictly) and places each of the stage's
// parameters, [unit][slot]: a tied copy in its own module's tensor when
// the checkpoint has it, else in the parameter's.
func (e *PipeEngine) matchPipeParams(ck *checkpoint.Checkpoint) ([][]pipeSlot, error) {
	where := ck.Path
	refs := map[string]checkpoint.ParamRef{}
	for _, r := range ck.Manifest.Params {
		refs[r.Name] = r
	}
	want := e.modelParams()
	var missing, unexpected []string
	for _, w := range want {
		r, ok := refs[w.Name]
		if !ok {
			missing = append(missing, w.Name)
			continue
		}
		if !slices.Equal(r.Shape, w.Shape) {
			return nil, fmt.Errorf("deepgo: pipeline engine: Load: %s: parameter %q has shape %v in the checkpoint, %v in the model", where, w.Name, r.Shape, w.Shape)
		}
	}
	for n := range refs {
		if !slices.ContainsFunc(want, func(w checkpoint.ParamRef) bool { return w.Name == n }) {
			unexpected = append(unexpected, n)
		}
	}
	slices.Sort(unexpected)
	switch {
	case len(missing) > 0:
		return nil, fmt.Errorf("deepgo: pipeline engine: Load: %s: the checkpoint lacks parameters of the model: %s", where, strings.Join(missing, ", "))
	case len(unexpected) > 0:
		return nil, fmt.Errorf("deepgo: pipeline engine: Load: %s: the checkpoint has parameters the model lacks: %s", where, strings.Join(unexpected, ", "))
	}
	keys := e.ckptKeys()
	lay := e.z.Layout()
	slots := make([][]pipeSlot, len(lay.Units))
	for u, unit := range lay.Units {
		slots[u] = make([]pipeSlot, len(unit.Slots))
		for i, s := range unit.Slots {
			p := e.params[s.Module][s.Param]
			r, ok := refs[p.Name]
			if !ok {
				return nil, fmt.Errorf("deepgo: pipeline engine: Load: %s: the checkpoint has no parameter %q", where, p.Name)
			}
			sl := pipeSlot{name: p.Name, source: r.Source, offset: r.Offset}
			if k := keys[s.Module][s.Param]; k != p.Name {
				if g, ok := ck.Lookup(masterPrefix + k); ok {
					if g.Numel != int64(s.Numel) {
						return nil, fmt.Errorf("deepgo: pipeline engine: Load: %s: tied copy %q has %d elements, parameter %q %d", where, masterPrefix+k, g.Numel, p.Name, s.Numel)
					}
					sl = pipeSlot{name: k, source: masterPrefix + k}
				}
			}
			if g, ok := ck.Lookup(sl.source); !ok || g.DType != "F32" {
				return nil, fmt.Errorf("deepgo: pipeline engine: Load: %s: parameter %q: source %q is not a float32 tensor of the checkpoint", where, sl.name, sl.source)
			}
			slots[u][i] = sl
		}
	}
	return slots, nil
}

// readSlots reads, for every unit, this rank's owned range from the
// tensors source names for each parameter (at the parameter's offset).
func (e *PipeEngine) readSlots(ctx context.Context, ck *checkpoint.Checkpoint, slots [][]pipeSlot, source func(pipeSlot) (string, error)) ([]*tensor.Tensor, error) {
	return readOwned(e.z, func(u, i int, dst *tensor.Tensor, off, _ int) error {
		sl := slots[u][i]
		src, err := source(sl)
		if err != nil {
			return err
		}
		if err := ck.ReadRange(ctx, src, sl.offset+int64(off), dst); err != nil {
			return fmt.Errorf("%s: parameter %q: %w", pipeLoad, sl.name, err)
		}
		return nil
	})
}

// readPipeOptimizerState reads the optimizer's state tensors into
// plan.state (empty when the checkpoint was saved before the first step).
func (e *PipeEngine) readPipeOptimizerState(ctx context.Context, ck *checkpoint.Checkpoint, plan *loadPlan, slots [][]pipeSlot) error {
	plan.state = map[string][]*tensor.Tensor{}
	want, err := stateNames(ck, plan.ec, e.z, pipeLoad)
	if err != nil {
		return err
	}
	for _, s := range want {
		ts, err := e.readSlots(ctx, ck, slots, func(sl pipeSlot) (string, error) {
			return stateTensor(ck, s, sl.source, sl.name, pipeLoad)
		})
		if err != nil {
			return err
		}
		plan.state[s] = ts
	}
	return nil
}

// verifyIdentical compares by digest what must be identical after a
// load: the stage's replicated parameters (and, under ZeRO stage 0 with
// fp16/bf16 weights, its fp32 masters) across its data-parallel ranks,
// then each tied weight's fp32 values across the stages holding it. Every
// comparison runs on every rank whatever the others found, so that no
// group is left waiting; the errors are joined.
func (e *PipeEngine) verifyIdentical(ctx context.Context) error {
	keys := e.ckptKeys()
	idx, ts := e.z.ReplicatedParams()
	rep := make([]checkpoint.Named, 0, len(ts))
	for i, t := range ts {
		rep = append(rep, checkpoint.Named{Name: keys[idx[i][0]][idx[i][1]], Tensor: t})
	}
	if e.z.Config().Stage == 0 && e.z.Config().ModelDType != tensor.Float32 {
		for u := range e.z.Layout().Units {
			rep = append(rep, checkpoint.Named{Name: masterName(u), Tensor: e.z.Master(u)})
		}
	}
	var errs []error
	if err := checkpoint.VerifyReplicated(ctx, e.data, rep); err != nil {
		errs = append(errs, fmt.Errorf("pipeline stage %d, whose data-parallel ranks are world ranks %v: %w", e.stage, e.dataWorldRanks(), err))
	}
	if len(e.tied) == 0 {
		return errors.Join(errs...)
	}
	all, err := e.z.GatherMaster(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, t := range e.tied {
		v, err := tensor.FromFloat32(all[t.m][t.p])
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		err = checkpoint.VerifyReplicated(ctx, t.group, []checkpoint.Named{{Name: t.name, Tensor: v}})
		v.Free()
		var me *checkpoint.ReplicaMismatchError
		if errors.As(err, &me) {
			bad := make([]int, len(me.Ranks))
			for i, r := range me.Ranks {
				bad[i] = t.stages[r]
			}
			err = &TiedMismatchError{Param: t.name, Stages: bad, Owner: t.stages[0]}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dataWorldRanks are the world ranks of this stage's data-parallel group.
func (e *PipeEngine) dataWorldRanks() []int {
	out := make([]int, e.data.Size())
	for d := range out {
		out[d], _ = e.grid.Rank(e.stage, d) // in range: the grid made the group
	}
	return out
}

// TiedMismatchError says that the copies of a weight tied across pipeline
// stages differ after a load.
type TiedMismatchError struct {
	// Param is the tied weight's name.
	Param string
	// Stages are the stages whose copy differs from the owner's.
	Stages []int
	// Owner is the lowest stage holding the weight, whose copy is the
	// reference.
	Owner int
}

// Error names the weight and the stages.
func (e *TiedMismatchError) Error() string {
	return fmt.Sprintf("tied weight %q: the copy on pipeline stage(s) %v differs from stage %d's", e.Param, e.Stages, e.Owner)
}

// agreeOn is comm.Agree in the engine's words: every rank gets nil only if
// every rank of c succeeded at op; a rank that failed gets its own error,
// the others a *comm.RankError read "deepgo: Save failed on rank 1: ...".
func agreeOn(ctx context.Context, c comm.Comm, op string, err error) error {
	aerr := comm.Agree(ctx, c, op, err)
	var re *comm.RankError
	if err != nil && errors.As(aerr, &re) {
		return err // this rank's own failure reads best unwrapped
	}
	if aerr != nil {
		return fmt.Errorf("deepgo: %w", aerr)
	}
	return nil
}
