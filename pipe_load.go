package deepgo

// The pipeline engine's Load: each stage reads its parameters by name
// (the layout is in pipe_save.go) within the load frame it shares with
// the data-parallel Engine (ckpt_load.go).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// pipeLoad prefixes the pipeline engine's load errors.
const pipeLoad = "deepgo: pipeline engine: Load"

// pipeSlot is where one of the stage's parameters is read from.
type pipeSlot struct {
	name  string              // the parameter's name, or its tied copy's key
	ref   checkpoint.ParamRef // its fp32 value in the checkpoint
	p     *model.Param        // the stage's parameter (maybe a TP shard)
	found bool                // false: NonStrict, the checkpoint lacks it; it keeps its values
}

// Load restores the pipeline from a checkpoint of dir ("": the config's
// checkpoint.load_path, else save_dir), like Engine.Load: every rank reads
// its ZeRO partition of its stage's parameters (its TP shards under tensor
// parallelism, cut from each split parameter's full value) and their
// optimizer state by parameter name (so the checkpoint may come from
// another pipeline degree, TP degree, data-parallel size or ZeRO stage, or
// from the data-parallel Engine), every file read verified; only when
// every rank of the pipeline has succeeded does any rank change its
// engine (a background save in flight, SaveAsync, is waited for first;
// its failure fails Load, which then changes nothing). With
// opts.NonStrict (DeepSpeed's load_module_strict=False) the parameters of
// the whole model the checkpoint lacks keep their values and optimizer
// state, and checkpoint parameters the model lacks are ignored; both are
// listed in the LoadResult, the same on every rank. Finally the parameters meant to
// be identical are compared by digest: each stage's replicated parameters
// across its data-parallel ranks, those TP replicates across its TP
// group, and each tied weight's copies (per TP rank) across the stages
// holding it; a difference fails Load on every rank with an error naming
// the parameter and the ranks or stages. As with Engine.Load, an error
// before the engine changes leaves it as it was; one after (such a
// difference, or a failed restore) says Load failed part way, and every
// call but Load and Close is refused until a Load succeeds.
func (e *PipeEngine) Load(ctx context.Context, dir string, opts LoadOptions) (LoadResult, error) {
	if e.closed {
		return LoadResult{}, errClosed("Load")
	}
	if e.broken != nil { // p2p transfers of the failed batch may be in flight
		return LoadResult{}, errBroken("Load", "batch", e.broken)
	}
	ctx = e.devCtx(ctx)
	pre := e.WaitSave()
	if pre == nil {
		pre = halfLoadedOpts(pipeLoad, opts, e.halfLoaded)
	}
	plan, err := runLoad(e.cfg, dir, pipeLoad, pre, func(dir string) (*loadPlan, error) {
		return e.preparePipeLoad(ctx, dir, opts)
	}, agreeLoad(ctx, e.world))
	if err != nil {
		return LoadResult{}, err // the engine is as it was
	}
	defer plan.free()
	// From here on the engine changes: a failure leaves it half restored.
	if err := e.install(ctx, plan, opts); err != nil {
		e.halfLoaded = loadFailedPartWay(pipeLoad, plan.res.Tag, err)
		return LoadResult{}, e.halfLoaded
	}
	e.halfLoaded = nil // a whole checkpoint is in place (halfLoadedOpts)
	return plan.res, nil
}

// install is the part of Load that changes the engine: the plan's
// optimizer state and masters, loss scaler, LR schedule and counters, then
// the comparison of what must be identical across ranks and stages, whose
// verdict every rank of the pipeline shares.
func (e *PipeEngine) install(ctx context.Context, plan *loadPlan, opts LoadOptions) error {
	// a stage (or a TP rank of one) whose restore failed tells every rank
	// before the comparisons, which would otherwise wait for it
	if err := agreeOn(ctx, e.world, "Load", restoreZero(ctx, e.z, plan)); err != nil {
		return err
	}
	if err := agreeOn(ctx, e.world, "Load", e.installFrozen(ctx, plan.frozen)); err != nil {
		return err
	}
	plan.install(&e.scaler, &e.lrs)
	if !opts.ModuleOnly {
		e.globalSteps, e.skippedSteps = plan.ec.GlobalSteps, plan.ec.SkippedSteps
	}
	e.gradNorm = 0
	for m := range e.params {
		e.bind(m)
	}
	return agreeOn(ctx, e.world, "Load", e.verifyIdentical(ctx))
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
	slots, err := e.matchPipeParams(ck, opts, p.ec.FrozenExcluded, &p.res)
	if err != nil {
		return nil, err
	}
	if p.frozen, err = e.readFrozen(ctx, ck); err != nil {
		return nil, err
	}
	if e.halfLoaded != nil && len(p.res.Missing) > 0 {
		return nil, fmt.Errorf("%s: %s: NonStrict: refused: an earlier Load failed part way, and the parameters this checkpoint lacks (%s) would keep values that may be that Load's half; load a checkpoint that has every parameter first (the failure: %w)", pipeLoad, where, strings.Join(p.res.Missing, ", "), e.halfLoaded)
	}
	p.masters, err = e.readSlots(ctx, ck, slots, func(s pipeSlot) (checkpoint.ParamRef, error) { return s.ref, nil }, e.z.Master)
	if err != nil {
		return nil, err
	}
	err = planSmallState(ck, p, e.world.Rank(), e.cfg, e.z, e.lrs != nil, e.opt, opts, pipeLoad, func() error {
		return e.readPipeOptimizerState(ctx, ck, p, slots)
	})
	return p, err
}

// matchPipeParams checks the checkpoint's parameter map against the whole
// model's (names and shapes; names strictly unless opts.NonStrict, which
// lists the differences in res) and places each of the stage's
// parameters, [unit][slot]: a tied copy in its own module's tensor when
// the checkpoint has it, else in the parameter's.
func (e *PipeEngine) matchPipeParams(ck *checkpoint.Checkpoint, opts LoadOptions, excluded []string, res *LoadResult) ([][]pipeSlot, error) {
	where := ck.Path
	refs := map[string]checkpoint.ParamRef{}
	for _, r := range ck.Manifest.Params {
		refs[r.Name] = r
	}
	want := e.modelParams()
	var missing, unexpected []string
	for _, w := range want {
		r, ok := refs[w.Name]
		if !ok && slices.Contains(excluded, w.Name) && e.isFrozen(w.Name) {
			res.Notes = append(res.Notes, fmt.Sprintf("frozen parameter %s: saved with ExcludeFrozen; keeps its current value", w.Name))
			continue
		}
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
	if opts.NonStrict {
		res.Missing, res.Unexpected = missing, unexpected
		missing, unexpected = nil, nil
	}
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
				if !opts.NonStrict {
					return nil, fmt.Errorf("deepgo: pipeline engine: Load: %s: the checkpoint has no parameter %q", where, p.Name)
				}
				slots[u][i] = pipeSlot{name: p.Name, p: p}
				continue
			}
			sl := pipeSlot{name: p.Name, ref: r, p: p, found: true}
			if k := keys[s.Module][s.Param]; k != p.Name {
				if c, ok, err := tiedCopyRef(ck, r, p.Name, k); err != nil {
					return nil, err
				} else if ok {
					sl.name, sl.ref = k, c
				}
			}
			for _, pc := range sl.ref.Pieces() {
				if g, ok := ck.Lookup(pc.Source); !ok || g.DType != "F32" {
					return nil, fmt.Errorf("deepgo: pipeline engine: Load: %s: parameter %q: source %q is not a float32 tensor of the checkpoint", where, sl.name, pc.Source)
				}
			}
			slots[u][i] = sl
		}
	}
	return slots, nil
}

// tiedCopyRef is where the checkpoint holds the tied copy key of
// parameter name (ref): ref with each piece's tensor renamed to the copy's
// (fp32/wte → fp32/wte@head, fp32/mp_rank_01/wte → fp32/mp_rank_01/wte@head),
// ok only if it has them all.
func tiedCopyRef(ck *checkpoint.Checkpoint, ref checkpoint.ParamRef, name, key string) (checkpoint.ParamRef, bool, error) {
	c, err := ref.WithSources(func(src string) (string, error) {
		if !strings.HasSuffix(src, name) { // saved by unit (the Engine): no copies
			return "", errNoCopy
		}
		return strings.TrimSuffix(src, name) + key, nil
	})
	if err != nil {
		return ref, false, nil
	}
	pieces := c.Pieces()
	for _, pc := range pieces {
		g, ok := ck.Lookup(pc.Source)
		if !ok {
			return ref, false, nil
		}
		if want := c.Numel() / int64(len(pieces)); g.Numel != want {
			return ref, false, fmt.Errorf("deepgo: pipeline engine: Load: %s: tied copy %q has %d elements, parameter %q's piece %d", ck.Path, pc.Source, g.Numel, name, want)
		}
	}
	return c, true, nil
}

// errNoCopy says a checkpoint has no tied copies.
var errNoCopy = errors.New("no tied copy")

// readSlots reads, for every unit, this rank's owned range of each
// parameter from where ref places it (a TP shard is cut from the
// parameter's full value, see readTPSlot), or for one the checkpoint
// lacks (NonStrict) from current(u), the unit's present values (nil:
// zeros).
func (e *PipeEngine) readSlots(ctx context.Context, ck *checkpoint.Checkpoint, slots [][]pipeSlot, ref func(pipeSlot) (checkpoint.ParamRef, error), current func(u int) *tensor.Tensor) ([]*tensor.Tensor, error) {
	rank, n := e.tpRank(), e.tpSize()
	return readOwned(e.z, func(u, i int, dst *tensor.Tensor, off, at int) error {
		sl := slots[u][i]
		if !sl.found {
			if err := keep(e.be, dst, current(u), at); err != nil {
				return fmt.Errorf("%s: parameter %q: %w", pipeLoad, sl.name, err)
			}
			return nil
		}
		r, err := ref(sl)
		if err != nil {
			return err
		}
		if err := readTPSlot(ctx, ck, r, sl.p, rank, n, off, dst); err != nil {
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
		ts, err := e.readSlots(ctx, ck, slots, func(sl pipeSlot) (checkpoint.ParamRef, error) {
			return sl.ref.WithSources(func(src string) (string, error) { return stateTensor(ck, s, src, sl.name, pipeLoad) })
		}, currentState(e.z, s))
		if err != nil {
			return err
		}
		plan.state[s] = ts
	}
	return nil
}
