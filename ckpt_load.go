package deepgo

// What the data-parallel Engine's and the PipeEngine's checkpoint loads
// share: the collective frame of a load (prepare, agree, apply), the
// engine's small state, and the loss scaler and LR schedule rebuilt from
// it. who prefixes their errors ("deepgo: Load").

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// runLoad is the first half of a load's collective frame, the half that
// changes nothing: unless pre already failed, it resolves dir ("":
// checkpoint.load_path, else save_dir) and prepares the plan (reading and
// verifying, touching nothing); agree makes the ranks agree that every
// one succeeded and on the tag (agreeLoad over the engine's group, or
// more groups). An error from it leaves the engine as it was. The caller
// then installs the plan (restoreZero first) and frees it; a failure
// from there on has changed the engine (loadFailedPartWay, guard.go).
func runLoad(cfg *config.Config, dir, who string, pre error,
	prepare func(dir string) (*loadPlan, error), agree func(err error, tag string) error) (*loadPlan, error) {
	if dir == "" {
		ck := cfg.Checkpoint
		dir = ck.SaveDir
		if ck.LoadPath != nil && *ck.LoadPath != "" {
			dir = *ck.LoadPath
		}
	}
	var plan *loadPlan
	err := pre
	if err == nil && dir == "" {
		err = errors.New(who + ": no directory given and neither checkpoint.load_path nor save_dir is set")
	}
	if err == nil {
		plan, err = prepare(dir)
	}
	ptag := ""
	if plan != nil {
		ptag = plan.res.Tag
	}
	if err = agree(err, ptag); err != nil {
		plan.free()
		return nil, err
	}
	return plan, nil
}

// restoreZero gives z the plan's optimizer state (when the plan has it)
// and master weights: the first change a load makes to the engine. Either
// may fail after it has written part of what it restores (a state
// tensor copied, a unit's masters, the re-gather of the parameters), so
// any error leaves the engine half restored.
func restoreZero(ctx context.Context, z *zero.Optimizer, plan *loadPlan) error {
	return z.Restore(ctx, plan.state, plan.ec.OptimizerSteps, plan.masters)
}

// agreeLoad is Load's agreement over c: every rank's verdict, then the
// tag each found.
func agreeLoad(ctx context.Context, c comm.Comm) func(err error, tag string) error {
	return func(err error, tag string) error {
		if err = agreeOn(ctx, c, "Load", err); err == nil {
			err = checkpoint.AgreeTag(ctx, c, tag)
		}
		return err
	}
}

// readOwned reads, for every unit of z, this rank's owned range into a
// new float32 tensor (padding zero): fill(u, i, dst, off, at) writes dst,
// the part of the range that slot i of unit u covers, which starts at
// element off of the slot's parameter and element at of the range.
func readOwned(z *zero.Optimizer, fill func(u, i int, dst *tensor.Tensor, off, at int) error) ([]*tensor.Tensor, error) {
	lay := z.Layout()
	out := make([]*tensor.Tensor, 0, len(lay.Units))
	fail := func(err error) ([]*tensor.Tensor, error) {
		for _, t := range out {
			t.Free()
		}
		return nil, err
	}
	for u, unit := range lay.Units {
		lo, n := z.Own(u)
		t, err := tensor.Empty(tensor.Float32, n)
		if err != nil {
			return fail(err)
		}
		out = append(out, t)
		v, err := t.Float32s()
		if err != nil {
			return fail(err)
		}
		clear(v)
		for i, s := range unit.Slots {
			a, b := max(lo, s.Offset), min(lo+n, s.Offset+s.Numel)
			if a >= b {
				continue
			}
			dst, err := t.Slice(a-lo, b-a)
			if err != nil {
				return fail(err)
			}
			if err := fill(u, i, dst, a-s.Offset, a-lo); err != nil {
				return fail(err)
			}
		}
	}
	return out, nil
}

// install replaces the engine's loss scaler and LR schedule with the
// plan's, where it has them (opts may have left them out).
func (p *loadPlan) install(scaler *optim.LossScaler, sched *optim.Schedule) {
	if p.scaler != nil {
		*scaler = p.scaler
	}
	if p.sched != nil {
		*sched = p.sched
	}
}

// openPlan opens the checkpoint opts.Tag of dir and starts a plan with
// its engine state, checked. The caller closes the checkpoint.
func openPlan(dir string, opts LoadOptions, who string) (*checkpoint.Checkpoint, *loadPlan, error) {
	ck, err := checkpoint.Open(nil, dir, opts.Tag)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", who, err)
	}
	where := ck.Path
	fail := func(err error) (*checkpoint.Checkpoint, *loadPlan, error) {
		ck.Close()
		return nil, nil, err
	}
	p := &loadPlan{res: LoadResult{Tag: ck.Tag, Path: ck.Path}}
	raw, ok := ck.Meta(0, metaEngine)
	if !ok {
		return fail(fmt.Errorf("%s: %s: not an engine checkpoint (no %q state)", who, where, metaEngine))
	}
	if err := json.Unmarshal(raw, &p.ec); err != nil {
		return fail(fmt.Errorf("%s: %s: %s: %w", who, where, metaEngine, err))
	}
	ec := p.ec
	if ec.GlobalSteps < 0 || ec.SkippedSteps < 0 || ec.SkippedSteps > ec.GlobalSteps || ec.OptimizerSteps < 0 {
		return fail(fmt.Errorf("%s: %s: counters global_steps %d, skipped_steps %d, optimizer_steps %d are inconsistent", who, where, ec.GlobalSteps, ec.SkippedSteps, ec.OptimizerSteps))
	}
	return ck, p, nil
}

// planSmallState completes plan after its master weights: rank's client
// state (rank 0's when the checkpoint had fewer ranks) and, as opts asks,
// the optimizer state (readState), a fresh loss scaler holding the saved
// state, and a fresh LR schedule (when sched; for the optimizer opt, see
// newSchedule) holding the saved one.
func planSmallState(ck *checkpoint.Checkpoint, plan *loadPlan, rank int, cfg *config.Config, z *zero.Optimizer, sched bool, opt optim.Optimizer, opts LoadOptions, who string, readState func() error) error {
	if rank >= ck.Manifest.World {
		rank = 0
	}
	if c, ok := ck.Meta(rank, metaClient); ok {
		plan.res.ClientState = slices.Clone(c)
	}
	if opts.ModuleOnly {
		return nil
	}
	ec, where := plan.ec, ck.Path
	var err error
	if !opts.SkipOptimizerStates {
		if err := readState(); err != nil {
			return err
		}
		if plan.scaler, err = newScaler(cfg, z.Config().Stage); err != nil {
			return err
		}
		if ec.Scaler.Dynamic == plan.scaler.Dynamic() {
			if err := plan.scaler.SetState(ec.Scaler); err != nil {
				return fmt.Errorf("%s: %s: loss scaler: %w", who, where, err)
			}
		} else {
			kind := func(d bool) string {
				if d {
					return "dynamic"
				}
				return "static"
			}
			plan.res.Notes = append(plan.res.Notes, fmt.Sprintf("%s: the checkpoint's %s loss scaler (scale %g) was not restored: this engine's is %s (scale %g), as its config says",
				where, kind(ec.Scaler.Dynamic), ec.Scaler.CurScale, kind(plan.scaler.Dynamic()), plan.scaler.State().CurScale))
		}
	}
	if saved, now := ec.OptimizerType, z.Base().Kind().String(); !opts.SkipOptimizerStates && len(ec.OptimizerState) > 0 && saved != "" && saved != now {
		// the state names matched (stateNames), so the moments load, but
		// they were another optimizer's (DeepSpeed loads them as silently)
		plan.res.Notes = append(plan.res.Notes, fmt.Sprintf("%s: optimizer state %v saved by %s, loaded into this engine's %s, as its config says", where, ec.OptimizerState, saved, now))
	}
	if ec.Schedule != nil && !sched && !opts.ModuleOnly && !opts.SkipLRSchedulerStates {
		plan.res.Notes = append(plan.res.Notes, fmt.Sprintf("%s: the checkpoint's lr schedule %s (at iteration %d) was not restored: this config has no scheduler, so the rate is the optimizer's lr from the config (DeepSpeed would keep the rate the checkpoint's optimizer had)",
			where, ec.Schedule.Type, ec.Schedule.LastBatchIteration))
	}
	if saved, now := ec.ModelDType, z.Config().ModelDType.String(); saved != "" && saved != now {
		plan.res.Notes = append(plan.res.Notes, fmt.Sprintf("%s: saved training in %s, loaded into an engine training in %s: the working parameters are re-cast from the float32 master weights", where, saved, now))
	}
	if sched && !opts.SkipLRSchedulerStates {
		if plan.sched, _, err = newSchedule(cfg, opt); err != nil { // its warnings are Initialize's notes already
			return fmt.Errorf("%s: %w", who, err)
		}
		if ec.Schedule != nil {
			if err := plan.sched.SetState(*ec.Schedule); err != nil {
				return fmt.Errorf("%s: %s: lr_scheduler: %w", who, where, err)
			}
		}
	}
	return nil
}

// stateNames are the optimizer state tensors to read (none when the
// checkpoint was saved before the first step), after checking that they
// are the ones z's optimizer keeps.
func stateNames(ck *checkpoint.Checkpoint, ec engineCheckpoint, z *zero.Optimizer, who string) ([]string, error) {
	if len(ec.OptimizerState) == 0 {
		return nil, nil
	}
	want := slices.Sorted(slices.Values(z.Base().StateNames()))
	if got := slices.Sorted(slices.Values(ec.OptimizerState)); !slices.Equal(got, want) {
		return nil, fmt.Errorf("%s: %s: optimizer state %v (%s), this engine's optimizer (%s) keeps %v", who, ck.Path, got, ec.OptimizerType, z.Base().Kind(), want)
	}
	return want, nil
}

// stateTensor is the checkpoint's float32 tensor of optimizer state s laid
// out like master tensor src, for parameter name.
func stateTensor(ck *checkpoint.Checkpoint, s, src, name, who string) (string, error) {
	if strings.HasPrefix(src, frozenPrefix) {
		return "", fmt.Errorf("%s: %s: parameter %q is trainable but %w: the checkpoint has no optimizer state for it; load with ModuleOnly or SkipOptimizerStates to start from its value with the optimizer state the engine has", who, ck.Path, name, ErrSavedFrozen)
	}
	t, ok := stateSource(s, src)
	if g, found := ck.Lookup(t); !ok || !found || g.DType != "F32" {
		return "", fmt.Errorf("%s: %s: parameter %q: no float32 optimizer state %q", who, ck.Path, name, t)
	}
	return t, nil
}

// newEngineCheckpoint is an engine's small state for a checkpoint: its
// counters, the optimizer's (state names, steps), the loss scaler's and the
// LR schedule's (sched may be nil).
func newEngineCheckpoint(z *zero.Optimizer, names []string, steps int64, scaler optim.LossScaler, sched optim.Schedule,
	global, skipped, micro int, batch config.BatchSizes) engineCheckpoint {
	zc := z.Config()
	ec := engineCheckpoint{
		GlobalSteps: global, SkippedSteps: skipped, MicroSteps: micro,
		GlobalSamples:  int64(global) * int64(batch.TrainBatchSize),
		OptimizerGroup: zc.GroupName, OptimizerSteps: steps, OptimizerType: z.Base().Kind().String(), OptimizerState: names,
		ModelDType: zc.ModelDType.String(), Scaler: scaler.State(), ParamNames: paramNamesModel,
	}
	if sched != nil {
		ss := sched.State()
		ec.Schedule = &ss
	}
	return ec
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
