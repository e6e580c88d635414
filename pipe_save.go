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
// Under tensor parallelism (3-D runs) each TP rank saves its shards of the
// split parameters as fp32/mp_rank_XX/<param> (and optim/<state>/mp_rank_XX/
// <param>, fp32/mp_rank_XX/<param>@<module>), the manifest placing them
// as tp_checkpoint.go's do (checkpoint.ParamRef.Split), and TP rank 0
// alone the replicated ones, named as without TP; Load reassembles a
// split parameter from the shards of whatever degree saved it and cuts
// its own, so a checkpoint loads at another TP degree too.
//
// Small state is the data-parallel engine's (deepgo.engine, client_state),
// with the topology {"pipe": pp, "data": dp, "model": tp} (and "seq": sp
// under Ulysses). Under Ulysses the ZeRO group a stage's pieces are cut
// over is its sequence-data group (dp × sp ranks), and nothing else
// changes: the sequence shards are not in a checkpoint, so it loads
// without SP, at another SP degree, or into the data-parallel Engine.
import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/tensor"
)

// topology is the checkpoint's record of the layout: the pipeline, data
// and TP degrees, and under Ulysses the SP degree (the data degree is then
// the ZeRO group's size over sp).
func (e *PipeEngine) topology() map[string]int {
	t := map[string]int{"data": e.data.Size() / e.spSize(), "pipe": e.stages, "model": e.tpSize()}
	if sp := e.spSize(); sp > 1 {
		t["seq"] = sp
	}
	return t
}

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
// order, as the manifest's parameter map: each in fp32/<name> at offset 0,
// of its full shape; under tensor parallelism a split one as the TP
// shards fp32/mp_rank_XX/<name>, a replicated one as without TP; a frozen
// one under frozen/ instead of fp32/ (pipe_frozen.go).
func (e *PipeEngine) modelParams() []checkpoint.ParamRef {
	var out []checkpoint.ParamRef
	seen := map[string]bool{}
	n := e.tpSize()
	for _, m := range e.net.Modules() {
		for _, p := range m.Params() {
			if seen[p.Name] {
				continue
			}
			seen[p.Name] = true
			prefix := masterPrefix
			if p.Frozen { // pipe_frozen.go
				prefix = frozenPrefix
			}
			if p.Parallel.Split && n > 1 {
				out = append(out, tpSplitRef(p, n, func(t int) string { return tpTensorName(prefix+p.Name, t) }, 0))
				continue
			}
			out = append(out, checkpoint.ParamRef{Name: p.Name, Shape: slices.Clone(p.Shape), Source: prefix + p.Name})
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
	state, steps, err := z.ReadOptimizerState()
	if err != nil {
		return o, nil, fmt.Errorf("deepgo: pipeline engine: %s: optimizer state: %w", op, err)
	}
	names := slices.Sorted(maps.Keys(state))
	st := &checkpoint.State{
		Step:      int64(e.globalSteps),
		ZeroStage: zc.Stage,
		Topology:  e.topology(),
		Config:    cfgJSON,
		Params:    e.modelParams(),
	}
	keys := e.ckptKeys()
	tpRank, tpN := e.tpRank(), e.tpSize()
	// pieces adds, for every parameter of unit u, the part of this rank's
	// chunk that falls in it, from full (the rank's owned range of u).
	// Under TP each TP rank saves its shards of the split parameters under
	// its own names and TP rank 0 alone the replicated ones.
	pieces := func(full *tensor.Tensor, u int, prefix, file string) error {
		unit := lay.Units[u]
		n := unit.Numel / dp
		lo, _ := z.Own(u)
		for _, s := range unit.Slots {
			a, b := max(r*n, s.Offset), min(r*n+n, s.Offset+s.Numel)
			split := e.params[s.Module][s.Param].Parallel.Split && tpN > 1
			if a >= b || !split && tpRank != 0 {
				continue
			}
			v, err := full.Slice(a-lo, b-a)
			if err != nil {
				return err
			}
			if v, err = e.hostCopy(v); err != nil {
				return fmt.Errorf("%s: %w", prefix+keys[s.Module][s.Param], err)
			}
			name := prefix + keys[s.Module][s.Param]
			if split {
				name = tpTensorName(name, tpRank)
			}
			st.Tensors = append(st.Tensors, checkpoint.Entry{Name: name, File: file, Data: v,
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
	if ec.FrozenExcluded, err = e.saveFrozen(st, so.ExcludeFrozen); err != nil {
		return o, nil, fmt.Errorf("deepgo: pipeline engine: %s: %w", op, err)
	}
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
// parameter name (see the layout above; under tensor parallelism each TP
// rank's shards of the split parameters), each tied weight's copies
// separately, the loss scaler, LR schedule and counters, the resolved
// config and opts.ClientState (this rank's). It is a collective over every
// rank of the pipeline, atomic and durable (checkpoint.Save), and updates
// dir/latest and keeps checkpoint.keep_n_most_recent checkpoints. A
// background save in flight (SaveAsync) is waited for first.
func (e *PipeEngine) Save(ctx context.Context, dir string, opts SaveOptions) error {
	if err := e.openCheck("Save"); err != nil {
		return err
	}
	ctx = e.devCtx(ctx)
	o, st, err := e.pipeCheckpointState("Save", dir, opts)
	defer e.releaseStaged()
	if err := agreeOn(ctx, e.world, "Save", err); err != nil { // no rank enters the save alone
		return err
	}
	if err := e.WaitSave(); err != nil {
		return err
	}
	if _, err := checkpoint.Save(ctx, o, st); err != nil {
		return fmt.Errorf("deepgo: pipeline engine: Save: %w", err)
	}
	return nil
}

// hostCopy returns t in host memory: t itself on the CPU backend, else a
// copy that lives until releaseStaged (checkpoints read engine memory on
// the host), as Engine.hostCopy.
func (e *PipeEngine) hostCopy(t *tensor.Tensor) (*tensor.Tensor, error) {
	return stageOnHost(e.be, &e.staged, t)
}

// releaseStaged frees the host copies hostCopy made.
func (e *PipeEngine) releaseStaged() { releaseHostCopies(&e.staged) }
