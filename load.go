package deepgo

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// LoadOptions are Load's optional arguments. The zero value loads
// everything and strictly, as DeepSpeed's load_checkpoint does by default;
// each field is one of its keyword arguments turned so that false is the
// default.
type LoadOptions struct {
	// Tag is the checkpoint to load ("": the one dir/latest names).
	Tag string
	// ModuleOnly loads the parameters only (load_module_only=True): the
	// optimizer state, loss scaler, LR schedule and step counters stay as
	// they are, as when fine-tuning from pretrained weights.
	ModuleOnly bool
	// SkipOptimizerStates (load_optimizer_states=False) keeps the
	// optimizer's moments and step count and the loss scaler (which
	// DeepSpeed keeps in the optimizer's state) as they are.
	SkipOptimizerStates bool
	// SkipLRSchedulerStates (load_lr_scheduler_states=False) keeps the LR
	// schedule as it is.
	SkipLRSchedulerStates bool
	// NonStrict (load_module_strict=False) lets parameters the checkpoint
	// lacks keep their current values (and optimizer state) and ignores
	// parameters the model lacks; LoadResult lists both. Shapes must still
	// match.
	NonStrict bool
}

// LoadResult says what Load loaded.
type LoadResult struct {
	// Tag and Path are the checkpoint loaded (Path is dir/Tag).
	Tag, Path string
	// ClientState is this rank's client state (rank 0's when the
	// checkpoint had fewer ranks; nil if none was saved).
	ClientState json.RawMessage
	// Missing lists model parameters the checkpoint lacked and Unexpected
	// checkpoint parameters the model lacks (both empty unless NonStrict).
	Missing, Unexpected []string
	// Notes lists what was saved but not restored as saved, for the
	// trainer to log: for example a checkpoint saved in fp16 loaded by a
	// bf16 or fp32 engine, whose dynamic loss scaler state has no place
	// there and is dropped.
	Notes []string
}

// loadPlan is a checkpoint read into host memory, verified, not applied.
type loadPlan struct {
	res     LoadResult
	ec      engineCheckpoint
	masters []*tensor.Tensor
	frozen  []*tensor.Tensor // by e.frozen; nil: keeps its value
	state   map[string][]*tensor.Tensor
	scaler  optim.LossScaler
	sched   optim.Schedule
}

func (p *loadPlan) free() {
	if p == nil {
		return
	}
	for _, t := range slices.Concat(p.masters, p.frozen) {
		if t != nil {
			t.Free()
		}
	}
	for _, ts := range p.state {
		for _, t := range ts {
			t.Free()
		}
	}
}

// Load restores the engine from a checkpoint of dir ("": the config's
// checkpoint.load_path, else save_dir), like DeepSpeed's load_checkpoint,
// and says which checkpoint it loaded and this rank's client state. A dir
// with no checkpoint yet is an error wrapping fs.ErrNotExist (DeepSpeed's
// load_checkpoint warns and returns None there).
//
// It is a collective over the data-parallel group, called between
// optimizer steps. A background save in flight (SaveAsync) is waited for
// first; if it failed, Load fails with its error and changes nothing.
// Every rank reads its partition of the fp32 master
// weights and optimizer state (from whichever saved pieces hold it, so
// the checkpoint may come from another data-parallel world size, ZeRO
// stage or bucket size), checks that the checkpoint's parameters match
// the model's names (model.Param.Name, or one of its Aliases) and shapes,
// the optimizer state its optimizer's, and the loss scaler and LR
// schedule states their config; every data file read is verified against
// its checksum. Only when every rank has succeeded does any rank change
// its engine: masters, working-precision parameters (re-cast and
// re-gathered), optimizer state and step count, loss scaler, LR schedule
// and counters, less what opts leaves out. Finally the replicated
// parameters are compared across ranks (checkpoint.VerifyReplicated), and
// under tensor parallelism the parameters TP replicates across the TP
// group. The ranks agree on the restore's local part and on each
// comparison's verdict before going on, so a failure on one rank (or in
// one TP group) fails every rank at once, naming it, rather than leaving
// the others waiting in a collective until their timeout.
//
// An error before the engine changes (reading, verifying, matching,
// agreeing) leaves every rank's engine as it was, and it trains on as if
// Load had not been called; the error names the file or item at fault.
// An error after (the restore itself, say a failed re-gather, or the
// replicas found to differ) says Load "failed part way": the engine may
// hold parts of two states, so until a Load succeeds every call but Load
// and Close is refused with that cause. A Load that then succeeds has
// installed a whole checkpoint and makes the engine usable again; while
// the mark stands Load refuses ModuleOnly, SkipOptimizerStates,
// SkipLRSchedulerStates, and NonStrict with parameters the checkpoint
// lacks, which would keep half-restored state. (An engine that failed
// part way through a micro-step refuses Load too: Close it.)
//
// Under tensor parallelism every rank reads its own shard of each split
// parameter, assembled from the checkpoint's shards whatever TP degree
// saved it (a checkpoint without TP included) and cut at this engine's.
//
// Checkpoints written before parameter names became model-wide (when the
// engine prefixed each with its module's name) load too.
func (e *Engine) Load(ctx context.Context, dir string, opts LoadOptions) (LoadResult, error) {
	if err := e.loadable(ctx, "Load"); err != nil {
		return LoadResult{}, err
	}
	ctx = e.devCtx(ctx)
	if err := e.atBoundary("Load"); err != nil {
		return LoadResult{}, err
	}
	pre := e.WaitSave()
	if pre == nil {
		pre = halfLoadedOpts("deepgo: Load", opts, e.halfLoaded)
	}
	plan, err := runLoad(e.cfg, dir, "deepgo: Load", pre, func(dir string) (*loadPlan, error) {
		return e.prepareLoad(ctx, dir, opts)
	}, func(err error, tag string) error {
		if err = e.agreeTP(ctx, "Load", err); err == nil {
			err = checkpoint.AgreeTag(ctx, e.c, tag)
		}
		return e.tpAgreeTag(ctx, tag, err)
	})
	if err != nil {
		return LoadResult{}, err // the engine is as it was
	}
	defer plan.free()
	// From here on the engine changes: a failure leaves it half restored.
	if err := e.install(ctx, plan, opts); err != nil {
		e.halfLoaded = loadFailedPartWay("deepgo: Load", plan.res.Tag, err)
		return LoadResult{}, e.halfLoaded
	}
	e.halfLoaded = nil // a whole checkpoint is in place (halfLoadedOpts)
	return plan.res, nil
}

// install is the part of Load that changes the engine: the plan's
// optimizer state and masters (re-cast, re-gathered), loss scaler, LR
// schedule and counters, then the comparison of what must be identical
// across ranks.
func (e *Engine) install(ctx context.Context, plan *loadPlan, opts LoadOptions) error {
	if err := restoreZero(ctx, e.z, plan); err != nil {
		// the data group failed together (Restore agrees over it); under
		// TP the other data groups are on their way to the first agreement
		// below, over the TP groups: meet them there
		if _, n := e.tpDegree(); n > 1 {
			return e.agreeTP(ctx, "Load", err)
		}
		return err
	}
	if err := e.installFrozen(plan.frozen); err != nil {
		return fmt.Errorf("deepgo: Load: %w", err)
	}
	plan.install(&e.scaler, &e.sched)
	if !opts.ModuleOnly {
		e.globalSteps, e.skippedSteps = plan.ec.GlobalSteps, plan.ec.SkippedSteps
		e.microSteps = e.globalSteps * e.batch.GradAccum
	}
	e.stepApplied, e.gradNorm, e.acc = false, 0, stepAcc{}
	for m := range e.params {
		e.bind(m)
	}
	rep, err := e.replicated()
	defer e.releaseStaged()
	// a rank whose host copies failed still meets the others here, so that
	// none waits for it in the comparison
	if err = e.agree(ctx, "Load", err); err == nil {
		err = checkpoint.VerifyReplicated(ctx, e.c, rep)
	}
	// Under TP every rank's verdict so far reaches every rank before the
	// TP groups compare: a TP peer that failed its data group's check would
	// otherwise leave this rank waiting in that comparison until the
	// timeout. After it, a TP group's verdict reaches the others (a data
	// group meets every TP group), so that no rank keeps a Load that
	// another found half done.
	if _, n := e.tpDegree(); n == 1 {
		return err
	}
	if err = e.agreeTP(ctx, "Load", err); err != nil {
		return err
	}
	return e.agreeTP(ctx, "Load", e.verifyTPReplicated(ctx))
}

// checkpointNames are the names under which parameter p of module m may
// stand in a checkpoint, in order of preference. Checkpoints without the
// param_names marker were written when the engine named a parameter
// "<module>.<Param.Name>".
func (e *Engine) checkpointNames(m int, p *model.Param, legacy bool) []string {
	names := append([]string{p.Name}, p.Aliases...)
	if !legacy {
		return names
	}
	out := make([]string, 0, 2*len(names))
	for _, n := range names {
		out = append(out, e.mods[m].Name()+"."+n)
	}
	return append(out, names...)
}

// slotRef is where one parameter's values come from: a checkpoint entry,
// or (found false, NonStrict) the engine's current values.
type slotRef struct {
	ref   checkpoint.ParamRef
	p     *model.Param
	name  string
	found bool
}

// matchParams pairs every model parameter with its checkpoint entry,
// by ZeRO unit and slot.
func (e *Engine) matchParams(ck *checkpoint.Checkpoint, ec engineCheckpoint, opts LoadOptions, res *LoadResult) ([][]slotRef, []frozenRef, error) {
	where := ck.Path
	refs := map[string]checkpoint.ParamRef{}
	for _, r := range ck.Manifest.Params {
		refs[r.Name] = r
	}
	lay := e.z.Layout()
	bySlot := make([][]slotRef, len(lay.Units))
	for u := range lay.Units {
		bySlot[u] = make([]slotRef, len(lay.Units[u].Slots))
	}
	claimed := map[string]string{} // checkpoint name -> model parameter
	for m, ps := range e.params {
		for j, p := range ps {
			var sr slotRef
			for _, n := range e.checkpointNames(m, p, ec.ParamNames == "") {
				if r, ok := refs[n]; ok {
					sr = slotRef{ref: r, p: p, name: p.Name, found: true}
					break
				}
			}
			if !sr.found {
				if !opts.NonStrict {
					if slices.ContainsFunc(e.checkpointNames(m, p, ec.ParamNames == ""), func(n string) bool { return slices.Contains(ec.FrozenExcluded, n) }) {
						return nil, nil, fmt.Errorf("deepgo: Load: %s: parameter %q is trainable but %w and left out (SaveOptions.ExcludeFrozen): the checkpoint has no value for it; freeze it, or load with NonStrict to keep its current value", where, p.Name, ErrSavedFrozen)
					}
					return nil, nil, fmt.Errorf("deepgo: Load: %s: the checkpoint has no parameter %q", where, p.Name)
				}
				res.Missing = append(res.Missing, p.Name)
				sr.name = p.Name
			} else {
				if other, dup := claimed[sr.ref.Name]; dup {
					return nil, nil, fmt.Errorf("deepgo: Load: %s: checkpoint parameter %q matches both %q and %q", where, sr.ref.Name, other, p.Name)
				}
				claimed[sr.ref.Name] = p.Name
				if full := e.fullShape(p); !slices.Equal(sr.ref.Shape, full) {
					return nil, nil, fmt.Errorf("deepgo: Load: %s: parameter %q has shape %v in the checkpoint, %v in the model", where, p.Name, sr.ref.Shape, full)
				}
				if _, n := e.tpDegree(); n > 1 && p.Parallel.Split {
					if err := p.Parallel.Check(sr.ref.Shape, n); err != nil {
						return nil, nil, fmt.Errorf("deepgo: Load: parameter %q: %w", p.Name, err)
					}
				}
				if err := refuseThawed(ck, ec, opts, p.Name, sr.ref); err != nil {
					return nil, nil, err
				}
				for _, pc := range sr.ref.Pieces() {
					if g, ok := ck.Lookup(pc.Source); !ok || g.DType != "F32" {
						return nil, nil, fmt.Errorf("deepgo: Load: %s: parameter %q: source %q is not a float32 tensor of the checkpoint", where, p.Name, pc.Source)
					}
				}
			}
			w := lay.Where[m][j]
			bySlot[w.Unit][w.Slot] = sr
		}
	}
	fz, err := e.matchFrozen(ck, refs, ec, opts, res, claimed)
	if err != nil {
		return nil, nil, err
	}
	for n := range refs {
		if _, ok := claimed[n]; !ok {
			res.Unexpected = append(res.Unexpected, n)
		}
	}
	slices.Sort(res.Unexpected)
	if len(res.Unexpected) > 0 && !opts.NonStrict {
		return nil, nil, fmt.Errorf("deepgo: Load: %s: the checkpoint has parameters the model lacks: %s", where, strings.Join(res.Unexpected, ", "))
	}
	return bySlot, fz, nil
}

// prepareLoad reads and checks everything Load needs, touching nothing.
func (e *Engine) prepareLoad(ctx context.Context, dir string, opts LoadOptions) (plan *loadPlan, err error) {
	ck, p, err := openPlan(dir, opts, "deepgo: Load")
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	plan = p
	defer func() {
		if err != nil {
			p.free() // not plan: `return nil, err` has cleared it already
			plan = nil
		}
	}()
	ec := plan.ec
	bySlot, fz, err := e.matchParams(ck, ec, opts, &plan.res)
	if err != nil {
		return nil, err
	}
	if plan.frozen, err = e.readFrozen(ctx, ck, fz); err != nil {
		return nil, err
	}
	if e.halfLoaded != nil && len(plan.res.Missing) > 0 {
		return nil, fmt.Errorf("deepgo: Load: %s: NonStrict: refused: an earlier Load failed part way, and the parameters this checkpoint lacks (%s) would keep values that may be that Load's half; load a checkpoint that has every parameter first (the failure: %w)", ck.Path, strings.Join(plan.res.Missing, ", "), e.halfLoaded)
	}
	z := e.z
	// read fills, for every unit, this rank's owned range from the
	// parameters' ranges of the tensors source(ref) names, or for a
	// parameter the checkpoint lacks from current(u) (nil: zeros).
	read := func(source func(checkpoint.ParamRef) (checkpoint.ParamRef, error), current func(u int) *tensor.Tensor) ([]*tensor.Tensor, error) {
		return readOwned(z, func(u, i int, dst *tensor.Tensor, off, at int) error {
			sr := bySlot[u][i]
			if !sr.found {
				if err := keep(e.be, dst, current(u), at); err != nil {
					return fmt.Errorf("deepgo: Load: parameter %q: %w", sr.name, err)
				}
				return nil
			}
			src, err := source(sr.ref)
			if err != nil {
				return err
			}
			if err := e.readSlot(ctx, ck, src, sr.p, off, dst); err != nil {
				return fmt.Errorf("deepgo: Load: parameter %q: %w", sr.name, err)
			}
			return nil
		})
	}
	if plan.masters, err = read(func(r checkpoint.ParamRef) (checkpoint.ParamRef, error) { return r, nil }, z.Master); err != nil {
		return nil, err
	}
	err = planSmallState(ck, plan, e.c.Rank(), e.cfg, z, e.sched != nil, e.opt, opts, "deepgo: Load", func() error {
		return e.readOptimizerState(ck, plan, read)
	})
	return plan, err
}

// readOptimizerState reads the optimizer's state tensors into plan.state
// (an empty map when the checkpoint was saved before the first step).
func (e *Engine) readOptimizerState(ck *checkpoint.Checkpoint, plan *loadPlan,
	read func(func(checkpoint.ParamRef) (checkpoint.ParamRef, error), func(int) *tensor.Tensor) ([]*tensor.Tensor, error)) error {
	ec, z := plan.ec, e.z
	plan.state = map[string][]*tensor.Tensor{}
	want, err := stateNames(ck, ec, z, "deepgo: Load")
	if err != nil {
		return err
	}
	for _, s := range want {
		ts, err := read(func(r checkpoint.ParamRef) (checkpoint.ParamRef, error) {
			return r.WithSources(func(src string) (string, error) {
				return stateTensor(ck, s, src, r.Name, "deepgo: Load")
			})
		}, currentState(z, s))
		if err != nil {
			return err
		}
		plan.state[s] = ts
	}
	return nil
}

// currentState is z's present optimizer state s by unit, what a NonStrict
// Load keeps for the parameters the checkpoint lacks (nil for every unit
// before the first step: keep then writes zeros).
func currentState(z *zero.Optimizer, s string) func(u int) *tensor.Tensor {
	current, _ := z.OptimizerState()
	return func(u int) *tensor.Tensor {
		if current[s] == nil {
			return nil
		}
		return current[s][u]
	}
}

// keep copies dst's range of the engine's current chunk cur (starting at
// offset off), or zeros when there is none yet.
func keep(be backend.Backend, dst, cur *tensor.Tensor, off int) error {
	if cur == nil {
		d, err := dst.Float32s()
		if err != nil {
			return err
		}
		clear(d)
		return nil
	}
	// only the range kept crosses to the host, not the whole unit
	src, err := cur.Slice(off, dst.Numel())
	if err != nil {
		return fmt.Errorf("current values: %w", err)
	}
	if err := be.Copy(dst, src); err != nil {
		return fmt.Errorf("current values: %w", err)
	}
	return nil
}
