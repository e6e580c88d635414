package deepgo

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
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
// places every parameter (by model.Param.Name) in fp32/unit<u> at its unpadded
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
	// ParamNames is "model" when parameters are named by model.Param.Name
	// alone; checkpoints without it prefixed each with its module's name.
	ParamNames string `json:"param_names,omitempty"`
	// FrozenExcluded names the frozen parameters SaveOptions.ExcludeFrozen
	// left out (see ckpt_frozen.go).
	FrozenExcluded []string `json:"frozen_excluded,omitempty"`
}

// paramNamesModel marks checkpoints whose parameters carry their
// model-wide names.
const paramNamesModel = "model"

// SaveOptions are Save's and SaveAsync's optional arguments.
type SaveOptions struct {
	// Tag names the checkpoint ("": global_step<N>).
	Tag string
	// ClientState is this rank's own JSON state (data-sampler position,
	// RNG states), returned by Load in LoadResult.ClientState; nil for none.
	ClientState json.RawMessage
	// ExcludeFrozen leaves the frozen parameters (model.Param.Frozen) out
	// of the checkpoint (DeepSpeed's exclude_frozen_parameters): Load then
	// keeps the model's current values for them (see ckpt_frozen.go).
	ExcludeFrozen bool
}

// atBoundary reports an error unless the engine is between optimizer
// steps (no forward pending, no partial accumulation).
func (e *Engine) atBoundary(op string) error {
	done, gas := e.microSteps%e.batch.GradAccum, e.batch.GradAccum
	var why string
	switch {
	case e.phase == phaseForward:
		why = "a Forward is waiting for its Backward and Step"
	case e.phase == phaseBackward:
		why = "a Backward is waiting for its Step"
	case done != 0:
		why = fmt.Sprintf("%d of the %d micro-steps of this optimizer step are done; %d more (Forward, Backward, Step each) reach it", done, gas, gas-done)
	default:
		return nil
	}
	lost := "a checkpoint does not hold an unfinished step's gradients"
	if op == "Load" {
		lost = "loading would discard the unfinished step's gradients"
	}
	return fmt.Errorf("deepgo: %s: only between optimizer steps (%s): %s", op, lost, why)
}

// checkpointState builds this rank's checkpoint.State and the save options.
func (e *Engine) checkpointState(op, dir string, so SaveOptions) (checkpoint.Options, *checkpoint.State, error) {
	tag, client := so.Tag, so.ClientState
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
	state, steps, err := z.ReadOptimizerState()
	if err != nil {
		return o, nil, fmt.Errorf("deepgo: %s: optimizer state: %w", op, err)
	}
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
		if v, err = e.hostCopy(v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
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
			st.Params = append(st.Params, checkpoint.ParamRef{Name: p.Name, Shape: slices.Clone(p.Shape),
				Source: masterName(w.Unit), Offset: int64(lay.Units[w.Unit].Slots[w.Slot].Offset)})
		}
	}
	ec := newEngineCheckpoint(z, names, steps, e.scaler, e.sched, e.globalSteps, e.skippedSteps, e.microSteps, e.batch)
	if ec.FrozenExcluded, err = e.saveFrozen(st, so.ExcludeFrozen); err != nil {
		return o, nil, fmt.Errorf("deepgo: %s: %w", op, err)
	}
	if err := st.SetMeta(metaEngine, ec); err != nil {
		return o, nil, err
	}
	if client != nil {
		st.Meta[metaClient] = slices.Clone(client)
	}
	return o, st, nil
}

// Save writes a checkpoint of the engine under dir ("": the config's
// checkpoint.save_dir) with opts.Tag ("": global_step<N>), like DeepSpeed's
// save_checkpoint: fp32 master weights and optimizer state as each rank's
// ZeRO partition (or gathered on rank 0 with checkpoint.zero_checkpoint
// false), loss scaler, LR schedule, counters, the resolved config, and
// opts.ClientState, this rank's own state. Parameters are named by
// model.Param.Name. Under tensor parallelism it keeps each TP rank's
// shards (see tp_checkpoint.go), and the client state saved is TP rank
// 0's. It updates dir/latest and keeps checkpoint.keep_n_most_recent
// checkpoints. It is a collective over the data-parallel group (and the
// TP group), atomic and durable (see checkpoint.Save), and must be called
// between optimizer steps. A background save in flight
// (SaveAsync) is waited for first.
func (e *Engine) Save(ctx context.Context, dir string, opts SaveOptions) error {
	if err := e.usable(ctx, "Save"); err != nil {
		return err
	}
	ctx = e.devCtx(ctx)
	o, st, err := e.checkpointState("Save", dir, opts)
	defer e.releaseStaged()
	if err := e.agreeTP(ctx, "Save", err); err != nil { // no rank enters the save alone
		return err
	}
	if err := e.WaitSave(); err != nil {
		return err
	}
	if _, n := e.tpDegree(); n > 1 {
		return e.tpSave(ctx, o, st)
	}
	if _, err := checkpoint.Save(ctx, o, st); err != nil {
		return fmt.Errorf("deepgo: Save: %w", err)
	}
	return nil
}

// replicated lists the tensors that must be identical on every rank:
// the working-precision parameters (stage 3: the persistent ones), and
// for stage 0 the fp32 masters too.
// On a device they are host copies, freed by releaseStaged.
func (e *Engine) replicated() ([]checkpoint.Named, error) {
	idx, ts := e.z.ReplicatedParams()
	out := make([]checkpoint.Named, 0, len(ts))
	for i, t := range ts {
		m, p := idx[i][0], idx[i][1]
		h, err := e.hostCopy(t)
		if err != nil {
			return nil, err
		}
		out = append(out, checkpoint.Named{Name: e.params[m][p].Name, Tensor: h})
	}
	for _, f := range e.frozen { // replicated on every rank at every stage
		h, err := e.hostCopy(f.t)
		if err != nil {
			return nil, err
		}
		out = append(out, checkpoint.Named{Name: f.p.Name, Tensor: h})
	}
	if e.z.Config().Stage == 0 && e.z.Config().ModelDType != tensor.Float32 {
		for u := range e.z.Layout().Units {
			h, err := e.hostCopy(e.z.Master(u))
			if err != nil {
				return nil, err
			}
			out = append(out, checkpoint.Named{Name: masterName(u), Tensor: h})
		}
	}
	return out, nil
}

// hostCopy returns t in host memory: t itself on the CPU backend, else a
// copy that lives until releaseStaged (checkpoints read engine memory on
// the host).
func (e *Engine) hostCopy(t *tensor.Tensor) (*tensor.Tensor, error) {
	return stageOnHost(e.be, &e.staged, t)
}

// releaseStaged frees the host copies hostCopy made.
func (e *Engine) releaseStaged() { releaseHostCopies(&e.staged) }

// stageOnHost returns t in host memory: t itself when it is there, else a
// copy from be's device whose free is added to staged (both engines'
// hostCopy).
func stageOnHost(be backend.Backend, staged *[]func(), t *tensor.Tensor) (*tensor.Tensor, error) {
	h, free, err := zero.ToHost(be, t)
	if err != nil {
		return nil, err
	}
	if h != t {
		*staged = append(*staged, free)
	}
	return h, nil
}

// releaseHostCopies frees the host copies stageOnHost added to staged.
func releaseHostCopies(staged *[]func()) {
	for _, f := range *staged {
		f()
	}
	*staged = nil
}

// agree is comm.Agree in the engine's words: every rank gets nil only if
// every rank succeeded at op; a rank that failed gets its own error, the
// others a *comm.RankError read "deepgo: Save failed on rank 1: ...".
func (e *Engine) agree(ctx context.Context, op string, err error) error {
	return agreeOn(ctx, e.c, op, err)
}
