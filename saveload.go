package deepgo

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
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Engine checkpoints. Save and Load use package checkpoint's layout
// (see checkpoint/doc.go) with these tensors, every one sharded over the
// data-parallel ranks as the ZeRO partition is:
//
//	fp32/unit<u>            the fp32 master weights of ZeRO unit u: the
//	                        unit's parameters back to back, unpadded
//	                        length (Shard.Numel) = the unit's used elements
//	optim/<state>/unit<u>   the optimizer's state <state> (exp_avg,
//	                        exp_avg_sq, momentum_buffer, ...) of unit u,
//	                        laid out like fp32/unit<u> (after the first step)
//
// Rank r saves chunk r of each unit's padded flat (the unit padded to a
// multiple of 2×W), so the pieces have equal sizes in rank order (stage 0
// too, whose ranks all hold every unit). The manifest's parameter map
// places every parameter "module.param" in fp32/unit<u> at its unpadded
// offset, which is what Consolidate exports and what Load reads from:
// Load fills each parameter's part of the new rank's chunks from the
// parameter's range, so a checkpoint loads into any data-parallel world,
// ZeRO stage and reduce_bucket_size for the same model.
//
// Small state is JSON in every rank's manifest entry: deepgo.engine
// (engineCheckpoint: counters, optimizer step count, loss scaler, LR
// schedule) and client_state (the caller's, per rank). The resolved
// config is recorded as the manifest's config.

// Checkpoint meta keys and tensor name prefixes.
const (
	metaEngine   = "deepgo.engine"
	metaClient   = "client_state"
	masterPrefix = "fp32/"
	statePrefix  = "optim/"
)

func masterName(u int) string { return fmt.Sprintf("%sunit%d", masterPrefix, u) }

// stateSource is the name of state s's tensor laid out like master
// tensor src ("fp32/unit3" → "optim/exp_avg/unit3").
func stateSource(s, src string) (string, bool) {
	rest, ok := strings.CutPrefix(src, masterPrefix)
	return statePrefix + s + "/" + rest, ok
}

// engineCheckpoint is the engine's small state in a checkpoint (meta key
// deepgo.engine).
type engineCheckpoint struct {
	GlobalSteps   int   `json:"global_steps"`
	SkippedSteps  int   `json:"skipped_steps"`
	MicroSteps    int   `json:"micro_steps"`
	GlobalSamples int64 `json:"global_samples"`
	// OptimizerGroup and OptimizerSteps are the base optimizer's state key
	// and step count (bias correction); OptimizerState lists the state
	// tensors saved (none before the first step).
	OptimizerGroup string   `json:"optimizer_group"`
	OptimizerSteps int64    `json:"optimizer_steps"`
	OptimizerType  string   `json:"optimizer_type"`
	OptimizerState []string `json:"optimizer_state,omitempty"`
	ModelDType     string   `json:"model_dtype"`
	// Scaler and Schedule are the loss scaler's and LR schedule's state.
	Scaler   optim.ScalerState    `json:"loss_scaler"`
	Schedule *optim.ScheduleState `json:"lr_scheduler,omitempty"`
}

// atBoundary reports an error unless the engine is between optimizer
// steps (no forward pending, no partial accumulation).
func (e *Engine) atBoundary(op string) error {
	if e.seq != nil || e.microSteps%e.batch.GradAccum != 0 {
		return fmt.Errorf("deepgo: %s: only between optimizer steps (micro step %d of %d, forward pending %v)", op, e.microSteps%e.batch.GradAccum, e.batch.GradAccum, e.seq != nil)
	}
	return nil
}

// checkpointState builds this rank's checkpoint.State and the save options.
func (e *Engine) checkpointState(op, dir, tag string, client json.RawMessage) (checkpoint.Options, *checkpoint.State, error) {
	o := checkpoint.OptionsFromConfig(e.cfg.Checkpoint)
	if err := e.atBoundary(op); err != nil {
		return o, nil, err
	}
	if dir != "" {
		o.Dir = dir
	}
	if o.Dir == "" {
		return o, nil, fmt.Errorf("deepgo: %s: no directory given and checkpoint.save_dir is not set", op)
	}
	o.Tag, o.Comm = tag, e.c
	if client != nil && !json.Valid(client) {
		return o, nil, fmt.Errorf("deepgo: %s: client state is not valid JSON", op)
	}
	cfgJSON, err := e.cfg.JSON()
	if err != nil {
		return o, nil, fmt.Errorf("deepgo: %s: config: %w", op, err)
	}
	z := e.z
	zc := z.Config()
	lay := z.Layout()
	world, rank := e.c.Size(), e.c.Rank()
	state, steps := z.OptimizerState()
	names := slices.Sorted(maps.Keys(state))
	st := &checkpoint.State{
		Step:      int64(e.globalSteps),
		ZeroStage: zc.Stage,
		Topology:  map[string]int{"data": world, "pipe": 1, "model": 1},
		Config:    cfgJSON,
	}
	piece := func(full *tensor.Tensor, u int, name, file string) error {
		unit := lay.Units[u]
		n := unit.Numel / world
		lo, _ := z.Own(u)
		v, err := full.Slice(rank*n-lo, n)
		if err != nil {
			return err
		}
		if !v.Device().IsCPU() {
			return fmt.Errorf("%s is in %v memory: engine checkpoints need host-resident ZeRO buffers", name, v.Device())
		}
		st.Tensors = append(st.Tensors, checkpoint.Entry{Name: name, File: file, Data: v,
			Shard: &checkpoint.Shard{Numel: int64(unit.Used), Offset: int64(rank * n)}})
		return nil
	}
	for u := range lay.Units {
		if err := piece(z.Master(u), u, masterName(u), "model"); err != nil {
			return o, nil, fmt.Errorf("deepgo: %s: %w", op, err)
		}
		for _, s := range names {
			if err := piece(state[s][u], u, statePrefix+s+"/"+strings.TrimPrefix(masterName(u), masterPrefix), "optim"); err != nil {
				return o, nil, fmt.Errorf("deepgo: %s: %w", op, err)
			}
		}
	}
	for m, ps := range e.params {
		for j, p := range ps {
			w := lay.Where[m][j]
			st.Params = append(st.Params, checkpoint.ParamRef{Name: e.mods[m].Name() + "." + p.Name, Shape: slices.Clone(p.Shape),
				Source: masterName(w.Unit), Offset: int64(lay.Units[w.Unit].Slots[w.Slot].Offset)})
		}
	}
	ec := engineCheckpoint{
		GlobalSteps: e.globalSteps, SkippedSteps: e.skippedSteps, MicroSteps: e.microSteps,
		GlobalSamples:  int64(e.globalSteps) * int64(e.batch.TrainBatchSize),
		OptimizerGroup: zc.GroupName, OptimizerSteps: steps, OptimizerType: z.Base().Kind().String(), OptimizerState: names,
		ModelDType: zc.ModelDType.String(), Scaler: e.scaler.State(),
	}
	if e.sched != nil {
		ss := e.sched.State()
		ec.Schedule = &ss
	}
	if err := st.SetMeta(metaEngine, ec); err != nil {
		return o, nil, err
	}
	if client != nil {
		st.Meta[metaClient] = slices.Clone(client)
	}
	return o, st, nil
}

// Save writes a checkpoint of the engine under dir (""; the config's
// checkpoint.save_dir) with tag ("": global_step<N>), like DeepSpeed's
// save_checkpoint: fp32 master weights and optimizer state as each rank's
// ZeRO partition (or gathered on rank 0 with checkpoint.zero_checkpoint
// false), loss scaler, LR schedule, counters, the resolved config, and
// client, this rank's client state (data-sampler position, RNG states;
// nil for none). It updates dir/latest and keeps
// checkpoint.keep_n_most_recent checkpoints. It is a collective over the
// data-parallel group, atomic and durable (see checkpoint.Save), and must
// be called between optimizer steps. A background save in flight
// (SaveAsync) is waited for first.
func (e *Engine) Save(ctx context.Context, dir, tag string, client json.RawMessage) error {
	o, st, err := e.checkpointState("Save", dir, tag, client)
	if err := e.agree(ctx, "Save", err); err != nil { // no rank enters the save alone
		return err
	}
	if err := e.WaitSave(); err != nil {
		return err
	}
	if _, err := checkpoint.Save(ctx, o, st); err != nil {
		return fmt.Errorf("deepgo: Save: %w", err)
	}
	return nil
}

// SaveAsync is Save in the background (checkpoint.AsyncSaver): it copies
// the state to host memory and returns while a goroutine writes it, on a
// group of its own. It first waits for the previous background save and
// returns that save's error if it failed. WaitSave, the next Save, Load
// and Close wait for it. A collective, like Save.
func (e *Engine) SaveAsync(ctx context.Context, dir, tag string, client json.RawMessage) error {
	o, st, err := e.checkpointState("SaveAsync", dir, tag, client)
	if err := e.agree(ctx, "SaveAsync", err); err != nil { // no rank enters the save alone
		return err
	}
	if e.saver != nil && e.saverDir != o.Dir {
		err := e.saver.Close()
		e.saver = nil
		if err != nil {
			return fmt.Errorf("deepgo: SaveAsync: previous background save failed: %w", err)
		}
	}
	if e.saver == nil {
		o.Tag = ""
		s, err := checkpoint.NewAsyncSaver(ctx, o, 0)
		if err != nil {
			return fmt.Errorf("deepgo: SaveAsync: %w", err)
		}
		e.saver, e.saverDir = s, o.Dir
	}
	if err := e.saver.Save(ctx, tag, st); err != nil {
		return fmt.Errorf("deepgo: SaveAsync: %w", err)
	}
	return nil
}

// WaitSave waits for the background save in flight (if any) and returns
// its error.
func (e *Engine) WaitSave() error {
	if e.saver == nil {
		return nil
	}
	if _, err := e.saver.Wait(); err != nil {
		return fmt.Errorf("deepgo: background save: %w", err)
	}
	return nil
}

// loadPlan is a checkpoint read into host memory, verified, not applied.
type loadPlan struct {
	tag     string
	ec      engineCheckpoint
	masters []*tensor.Tensor
	state   map[string][]*tensor.Tensor
	scaler  optim.LossScaler
	sched   optim.Schedule
	client  json.RawMessage
}

func (p *loadPlan) free() {
	if p == nil {
		return
	}
	for _, t := range p.masters {
		t.Free()
	}
	for _, ts := range p.state {
		for _, t := range ts {
			t.Free()
		}
	}
}

// Load restores the engine from the checkpoint tag ("": the one latest
// names) of dir ("": the config's checkpoint.load_path, else save_dir),
// like DeepSpeed's load_checkpoint, and returns this rank's client state
// (rank 0's when the checkpoint had fewer ranks; nil if none was saved).
//
// It is a collective over the data-parallel group, called between
// optimizer steps. Every rank reads its partition of the fp32 master
// weights and optimizer state (from whichever saved pieces hold it, so
// the checkpoint may come from another data-parallel world size, ZeRO
// stage or bucket size), checks that the checkpoint's parameters match
// the model's names and shapes, the optimizer state its optimizer's, and
// the loss scaler and LR schedule states their config; every data file
// read is verified against its checksum. Only when every rank has
// succeeded does any rank change its engine: masters, working-precision
// parameters (re-cast and re-gathered), optimizer state and step count,
// loss scaler, LR schedule and counters. On any error every rank's engine
// is unchanged and the error names the file or item at fault. Finally the
// replicated parameters are compared across ranks
// (checkpoint.VerifyReplicated).
func (e *Engine) Load(ctx context.Context, dir, tag string) (json.RawMessage, error) {
	if err := e.atBoundary("Load"); err != nil {
		return nil, err
	}
	werr := e.WaitSave()
	if dir == "" {
		ck := e.cfg.Checkpoint
		dir = ck.SaveDir
		if ck.LoadPath != nil && *ck.LoadPath != "" {
			dir = *ck.LoadPath
		}
	}
	var plan *loadPlan
	err := werr
	if err == nil && dir == "" {
		err = errors.New("deepgo: Load: no directory given and neither checkpoint.load_path nor save_dir is set")
	}
	if err == nil {
		plan, err = e.prepareLoad(ctx, dir, tag)
	}
	ptag := ""
	if plan != nil {
		ptag = plan.tag
	}
	if err = e.agree(ctx, "Load", err); err == nil {
		err = checkpoint.AgreeTag(ctx, e.c, ptag)
	}
	if err != nil {
		plan.free()
		return nil, err
	}
	defer plan.free()
	if err := e.z.RestoreOptimizerState(plan.state, plan.ec.OptimizerSteps); err != nil {
		return nil, fmt.Errorf("deepgo: Load: %w", err)
	}
	if err := e.z.RestoreMaster(ctx, plan.masters); err != nil {
		return nil, fmt.Errorf("deepgo: Load: %w", err)
	}
	e.scaler, e.sched = plan.scaler, plan.sched
	e.globalSteps, e.skippedSteps = plan.ec.GlobalSteps, plan.ec.SkippedSteps
	e.microSteps = e.globalSteps * e.batch.GradAccum
	e.stepApplied, e.gradNorm = false, 0
	for m := range e.params {
		e.bind(m)
	}
	if err := checkpoint.VerifyReplicated(ctx, e.c, e.replicated()); err != nil {
		return nil, fmt.Errorf("deepgo: Load: after restoring %s: %w", plan.tag, err)
	}
	return plan.client, nil
}

// replicated lists the tensors that must be identical on every rank:
// the working-precision parameters (stage 3: the persistent ones), and
// for stage 0 the fp32 masters too.
func (e *Engine) replicated() []checkpoint.Named {
	idx, ts := e.z.ReplicatedParams()
	out := make([]checkpoint.Named, 0, len(ts))
	for i, t := range ts {
		m, p := idx[i][0], idx[i][1]
		out = append(out, checkpoint.Named{Name: e.mods[m].Name() + "." + e.params[m][p].Name, Tensor: t})
	}
	if e.z.Config().Stage == 0 && e.z.Config().ModelDType != tensor.Float32 {
		for u := range e.z.Layout().Units {
			out = append(out, checkpoint.Named{Name: masterName(u), Tensor: e.z.Master(u)})
		}
	}
	return out
}

// prepareLoad reads and checks everything Load needs, touching nothing.
func (e *Engine) prepareLoad(ctx context.Context, dir, tag string) (plan *loadPlan, err error) {
	ck, err := checkpoint.Open(nil, dir, tag)
	if err != nil {
		return nil, fmt.Errorf("deepgo: Load: %w", err)
	}
	defer ck.Close()
	where := ck.Path
	plan = &loadPlan{tag: ck.Tag}
	defer func() {
		if err != nil {
			plan.free()
			plan = nil
		}
	}()
	raw, ok := ck.Meta(0, metaEngine)
	if !ok {
		return nil, fmt.Errorf("deepgo: Load: %s: not an engine checkpoint (no %q state)", where, metaEngine)
	}
	if err := json.Unmarshal(raw, &plan.ec); err != nil {
		return nil, fmt.Errorf("deepgo: Load: %s: %s: %w", where, metaEngine, err)
	}
	ec := plan.ec
	refs := map[string]checkpoint.ParamRef{}
	for _, r := range ck.Manifest.Params {
		refs[r.Name] = r
	}
	// Parameters: names, shapes, float32 sources.
	type slotRef struct {
		ref  checkpoint.ParamRef
		name string
	}
	z := e.z
	lay := z.Layout()
	bySlot := make([][]slotRef, len(lay.Units))
	for u := range lay.Units {
		bySlot[u] = make([]slotRef, len(lay.Units[u].Slots))
	}
	seen := 0
	for m, ps := range e.params {
		for j, p := range ps {
			name := e.mods[m].Name() + "." + p.Name
			r, ok := refs[name]
			if !ok {
				return nil, fmt.Errorf("deepgo: Load: %s: the checkpoint has no parameter %q", where, name)
			}
			seen++
			if !slices.Equal(r.Shape, p.Shape) {
				return nil, fmt.Errorf("deepgo: Load: %s: parameter %q has shape %v in the checkpoint, %v in the model", where, name, r.Shape, p.Shape)
			}
			if g, ok := ck.Lookup(r.Source); !ok || g.DType != "F32" {
				return nil, fmt.Errorf("deepgo: Load: %s: parameter %q: source %q is not a float32 tensor of the checkpoint", where, name, r.Source)
			}
			w := lay.Where[m][j]
			bySlot[w.Unit][w.Slot] = slotRef{ref: r, name: name}
		}
	}
	if seen != len(refs) {
		var extra []string
		for n := range refs {
			if _, ok := e.paramIndex(n); !ok {
				extra = append(extra, n)
			}
		}
		slices.Sort(extra)
		return nil, fmt.Errorf("deepgo: Load: %s: the checkpoint has parameters the model lacks: %s", where, strings.Join(extra, ", "))
	}
	// read fills, for every unit, this rank's owned range from the
	// parameters' ranges of the tensors source(ref) names.
	read := func(source func(checkpoint.ParamRef) (string, error)) ([]*tensor.Tensor, error) {
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
			for i, s := range unit.Slots {
				a, b := max(lo, s.Offset), min(lo+n, s.Offset+s.Numel)
				if a >= b {
					continue
				}
				sr := bySlot[u][i]
				src, err := source(sr.ref)
				if err != nil {
					return fail(err)
				}
				dst, err := t.Slice(a-lo, b-a)
				if err != nil {
					return fail(err)
				}
				if err := ck.ReadRange(ctx, src, sr.ref.Offset+int64(a-s.Offset), dst); err != nil {
					return fail(fmt.Errorf("deepgo: Load: parameter %q: %w", sr.name, err))
				}
			}
		}
		return out, nil
	}
	if plan.masters, err = read(func(r checkpoint.ParamRef) (string, error) { return r.Source, nil }); err != nil {
		return nil, err
	}
	// Optimizer state.
	if len(ec.OptimizerState) > 0 {
		want := slices.Sorted(slices.Values(z.Base().StateNames()))
		if got := slices.Sorted(slices.Values(ec.OptimizerState)); !slices.Equal(got, want) {
			return nil, fmt.Errorf("deepgo: Load: %s: optimizer state %v (%s), this engine's optimizer (%s) keeps %v", where, got, ec.OptimizerType, z.Base().Kind(), want)
		}
		plan.state = map[string][]*tensor.Tensor{}
		for _, s := range want {
			ts, err := read(func(r checkpoint.ParamRef) (string, error) {
				name, ok := stateSource(s, r.Source)
				if g, found := ck.Lookup(name); !ok || !found || g.DType != "F32" {
					return "", fmt.Errorf("deepgo: Load: %s: parameter %q: no float32 optimizer state %q", where, r.Name, name)
				}
				return name, nil
			})
			if err != nil {
				return nil, err
			}
			plan.state[s] = ts
		}
	}
	// Loss scaler and LR schedule: restored into fresh ones.
	if plan.scaler, err = newScaler(e.cfg, z.Config().Stage); err != nil {
		return nil, err
	}
	if ec.Scaler.Dynamic == plan.scaler.Dynamic() {
		if err := plan.scaler.SetState(ec.Scaler); err != nil {
			return nil, fmt.Errorf("deepgo: Load: %s: loss scaler: %w", where, err)
		}
	}
	if e.sched != nil {
		if plan.sched, err = optim.NewSchedule(e.cfg.Scheduler.Type, e.cfg.Scheduler.Params, []float64{e.opt.Defaults().LR}); err != nil {
			return nil, fmt.Errorf("deepgo: Load: %w", err)
		}
		if ec.Schedule != nil {
			if err := plan.sched.SetState(*ec.Schedule); err != nil {
				return nil, fmt.Errorf("deepgo: Load: %s: lr_scheduler: %w", where, err)
			}
		}
	}
	if ec.GlobalSteps < 0 || ec.SkippedSteps < 0 || ec.SkippedSteps > ec.GlobalSteps || ec.OptimizerSteps < 0 {
		return nil, fmt.Errorf("deepgo: Load: %s: counters global_steps %d, skipped_steps %d, optimizer_steps %d are inconsistent", where, ec.GlobalSteps, ec.SkippedSteps, ec.OptimizerSteps)
	}
	r := e.c.Rank()
	if r >= ck.Manifest.World {
		r = 0
	}
	if c, ok := ck.Meta(r, metaClient); ok {
		plan.client = slices.Clone(c)
	}
	return plan, nil
}

// paramIndex finds parameter "module.param".
func (e *Engine) paramIndex(name string) ([2]int, bool) {
	for m, ps := range e.params {
		for j, p := range ps {
			if e.mods[m].Name()+"."+p.Name == name {
				return [2]int{m, j}, true
			}
		}
	}
	return [2]int{}, false
}

// agree is comm.Agree in the engine's words: every rank gets nil only if
// every rank succeeded at op; a rank that failed gets its own error, the
// others a *comm.RankError read "deepgo: Save failed on rank 1: ...".
func (e *Engine) agree(ctx context.Context, op string, err error) error {
	aerr := comm.Agree(ctx, e.c, op, err)
	var re *comm.RankError
	if err != nil && errors.As(aerr, &re) {
		return err // this rank's own failure reads best unwrapped
	}
	if aerr != nil {
		return fmt.Errorf("deepgo: %w", aerr)
	}
	return nil
}
