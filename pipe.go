package deepgo

// The pipeline engine's construction: the pipe × data grid and its groups,
// the partition of the model's modules into (virtual) stages, the stage's
// ZeRO optimizer over the modules it holds, and the tied weights' groups.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/commslog"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/monitor/flops"
	"github.com/deepgo-ml/deepgo/monitor/gpu"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/pipeline"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// PipeEngine trains one rank of a pipeline-parallel run: stage Stage() of
// a pipeline of Stages() stages, in a data-parallel group of the ranks
// holding the same stage (DeepSpeed's PipelineEngine on the pipe × data
// grid, pipe outermost; with WithTensorParallel the pipe × data × model
// grid, each stage's layers sharded over its TP group, see pipe_tp.go;
// with WithSequenceParallel the pipe × data × seq grid, each stage's
// ranks on their sequence shards, see pipe_sp.go).
// It executes the instruction streams of package pipeline (1F1B, GPipe or
// interleaved), keeps the stage's parameters in a
// ZeRO stage 0-1 optimizer over its data-parallel group, sums the
// gradients of weights tied across stages (the GPT's embedding and head),
// agrees on fp16/bf16 overflow across all stages and clips by the global
// norm over all of them. It computes on the CPU backend or, as the
// data-parallel engine, on a device (WithDevice, WithBackend, or a comm
// bound to one), with or without tensor parallelism. Its methods must be
// called from one goroutine.
type PipeEngine struct {
	cfg    *config.Config
	net    model.Pipelined
	be     backend.Backend
	ownBE  bool            // be was made here: Close closes it
	hostBE backend.Backend // offload_optimizer.device "cpu" or "nvme" on a device: the host backend the optimizer steps on
	world  comm.Comm       // pipe × data (× model under TP)
	// wrapped is world when deviceCommFor wrapped the trainer's comm for
	// the device: Close releases its buffers (the comm is the trainer's)
	wrapped   comm.Comm
	groups    modelGroups // the model's TP group, wrapped for the device: Close gives it back
	lrAtClose float64     // LR when Close ran (the optimizer is gone)
	pipe      comm.Comm   // this data (and model or seq) coordinate's stages, group rank = stage
	data      comm.Comm   // this stage's data-parallel group (under Ulysses its sequence-data group, dp × sp)
	tp        comm.Comm   // WithTensorParallel's group (pipe_tp.go), nil without TP
	sp        comm.Comm   // WithSequenceParallel's Ulysses group (pipe_sp.go), nil without SP
	grid      *comm.Grid
	eval      *evalRun // the evaluation in progress (Evaluate), nil outside one

	stage, stages, virtual int
	sched                  pipeline.Schedule
	steps                  [][]pipeline.Instruction // sched.Steps(), made once
	schedType              string
	partition              pipeline.Partition

	chunks [][]int // engine module indexes of each chunk's modules
	mods   []model.Module
	params [][]*model.Param
	parts  [][]model.Part  // [chunk][buffer], made on first use
	bufs   [][]*pipeBuffer // [chunk][buffer]

	tied   []tiedParam
	frozen []frozenParam // the stage's frozen parameters, outside its ZeRO (pipe_frozen.go)

	opt    optim.Optimizer
	ownOpt bool
	z      *zero.Optimizer
	scaler optim.LossScaler
	lrs    optim.Schedule
	batch  config.BatchSizes
	clip   float64

	globalSteps  int
	skippedSteps int
	gradNorm     float64
	timers       Timers
	pt           pipeTimers          // DeepSpeed's PipelineEngine timers (pipe_timers.go)
	mon          *monitor.Monitor    // fed by TrainBatch (pipe_monitor.go)
	gpu          *gpu.Telemetry      // the GPU's NVML telemetry, on CUDA
	comms        *commslog.Logger    // comms_logger, when enabled (pipe_monitor.go)
	log          io.Writer           // reports: the monitor's lines, comms_logger, flops_profiler (pipeLog)
	mem          backend.MemoryStats // memory_breakdown's counters; nil when off
	win          batchWindow         // the batches since the last "steps:" line
	flops        *flopsRun           // flops_profiler's batch in progress (pipe_flops.go)
	flopsReport  *flops.Report       // its report, once printed
	idle         []float64           // per TrainBatch: the share of wall time this stage waited on its neighbours
	notes        []string
	closers      []comm.Comm
	staged       []func() // frees of host copies a checkpoint reads (hostCopy)
	bg           bgSaver  // background saves (SaveAsync), closed by Close
	closed       bool     // Close ran: every later call says so (openCheck)
	halfLoaded   error    // the error of a Load that failed part way; one that succeeds clears it (guard.go)
	// broken is the error of a TrainBatch that failed once it had begun
	// its instructions (the first included: the other stages are in the
	// batch by then): gradients half accumulated (the next batch would add
	// to them), some stages or data ranks stepped and others not.
	// TrainBatch, Save, Load, Parameters and TiedCopies refuse (openCheck,
	// Load), as the data-parallel engine's failed micro-step does; the
	// getters (GlobalSteps, LR, Timers, ...) still answer.
	broken error
}

var _ Trainer = (*PipeEngine)(nil)

// tiedParam is a weight held by several stages: the engine's (module,
// param) index on this stage, the group of the stages holding it, and
// whether this stage is the owner (the lowest one), whose copy counts in
// the gradient norm.
type tiedParam struct {
	name   string
	m, p   int
	group  comm.Comm
	stages []int // the stages holding it, in group rank order
	owner  bool
}

// PipelineStages is the number of pipeline stages cfg asks for:
// pipeline_model_parallel_size, or a numeric pipeline.stages (DeepSpeed's
// PipelineModule num_stages) when that key is left at 1. Both above 1 and
// different is an error naming both.
func PipelineStages(cfg *config.Config) (int, error) {
	pp := max(1, cfg.PipelineModelParallelSize)
	st, ok := cfg.Pipeline.Stages.(float64)
	if !ok || st <= 1 {
		return pp, nil
	}
	if st != math.Trunc(st) {
		return 0, fmt.Errorf("deepgo: pipeline.stages %v: allowed \"auto\" or a whole number of stages", st)
	}
	if pp > 1 && int(st) != pp {
		return 0, fmt.Errorf("deepgo: pipeline.stages %d and pipeline_model_parallel_size %d: give one, or the same number in both", int(st), pp)
	}
	return int(st), nil
}

// newPipeEngine builds the pipeline engine; o.comm is the world of
// pipeline_model_parallel_size × data-parallel ranks.
func newPipeEngine(ctx context.Context, cfg *config.Config, net model.Model, o options) (pe *PipeEngine, err error) {
	pp, err := PipelineStages(cfg)
	if err != nil {
		return nil, err
	}
	pm, ok := net.(model.Pipelined)
	if !ok {
		return nil, fmt.Errorf("deepgo.Initialize: pipeline_model_parallel_size %d: not supported for this model (%T): a pipeline needs a model.Pipelined (nn.GPT is one)", pp, net)
	}
	if err := unsupported(cfg); err != nil {
		return nil, err
	}
	if err := checkMegatronSP(cfg, net); err != nil {
		return nil, err
	}
	if err := checkPipeSP(cfg, net, o, pp); err != nil {
		return nil, err
	}
	if z := cfg.ZeroOptimization.Stage; z > 1 {
		return nil, fmt.Errorf("deepgo.Initialize: zero_optimization.stage %d with %d pipeline stages: allowed 0 or 1 (ZeRO-2 and ZeRO-3 partition gradients or parameters, which the pipeline's per-micro-batch backward passes and tied-weight reduction cannot work with; DeepSpeed's PipelineEngine refuses them too)", z, pp)
	}
	if n := cfg.Pipeline.ActivationCheckpointInterval; n > 0 {
		ck, ok := net.(model.ActivationCheckpointer)
		if !ok {
			return nil, fmt.Errorf("deepgo.Initialize: pipeline.activation_checkpoint_interval %d: not supported for this model (%T): it does not implement model.ActivationCheckpointer", n, net)
		}
		if err := ck.CheckpointEvery(n); err != nil {
			return nil, fmt.Errorf("deepgo.Initialize: pipeline.activation_checkpoint_interval %d: %w", n, err)
		}
	}
	if o.comm == nil || o.comm.Size()%pp != 0 {
		size := 1
		if o.comm != nil {
			size = o.comm.Size()
		}
		return nil, fmt.Errorf("deepgo.Initialize: pipeline_model_parallel_size %d needs a world of pp × data-parallel ranks (WithComm), got %d ranks", pp, size)
	}
	e := &PipeEngine{cfg: cfg, net: pm, world: o.comm, tp: o.tp, sp: o.sp, be: o.backend, opt: o.opt, clip: cfg.GradientClipping, log: pipeLog(o),
		stages: pp, virtual: max(1, cfg.PipelineSchedule.VirtualStages), schedType: cfg.PipelineSchedule.Type}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if o.backend == nil && o.device != nil && !o.device.IsCPU() {
		// WithDevice: the device's backend, as the data-parallel engine
		// finds or makes it (WithBackend wins)
		if e.be, e.ownBE, err = deviceBackend(*o.device, o.comm); err != nil {
			return nil, err
		}
	}
	if e.be == nil {
		if bc, ok := o.comm.(interface{ Backend() backend.Backend }); ok {
			e.be = bc.Backend()
		}
	}
	if e.be == nil {
		// a comm without a CPU pool (comm/gloo, a user's own): one of ours,
		// sized to this rank's share of the machine, as Initialize's ZeRO
		// engine does
		b, err := backend.NewCPU(max(1, runtime.GOMAXPROCS(0)/o.comm.Size()))
		if err != nil {
			return nil, fmt.Errorf("deepgo.Initialize: pipeline: %w", err)
		}
		e.be, e.ownBE = b, true
	}
	if dev := e.be.Device(); !dev.IsCPU() {
		// the transfers between stages, the reductions and agreements move
		// the device's memory, in its stream order
		if err := useDeviceComm(e.be, &e.world, &e.wrapped); err != nil {
			return nil, err
		}
		// and so do the TP layers' collectives, before split makes the
		// parts, which take the model's group
		if e.tp, err = e.groups.tensorParallel(e.be, net, e.tp); err != nil {
			return nil, err
		}
		if e.sp, err = e.groups.sequenceParallel(e.be, net, e.sp); err != nil {
			return nil, err
		}
	}
	if err := agreeConfig(ctx, cfg, e.world); err != nil {
		return nil, err
	}
	// without WithLog the world's rank 0 logs the config's warnings, as the
	// data-parallel engine does
	var warnLog io.Writer
	if o.log == nil && o.comm != nil && o.comm.Rank() == 0 {
		warnLog = os.Stderr
	}
	e.notes = append(configNotes(cfg, warnLog), pipeNotes(cfg, e.be.Device())...)
	if e.grid, err = pipeGrid(ctx, cfg, pp, o); err != nil {
		return nil, err
	}
	// comms_logger records every operation on the world and the groups
	// split from it (the logger wraps those too): transfers between stages,
	// the data-parallel reductions, the agreements; and the engine's own
	// calls on the TP group (the model's layers use the group they hold,
	// which are not logged)
	if e.comms, err = newCommsLogger(cfg, e.log); err != nil {
		return nil, err
	}
	if e.comms != nil {
		e.world = e.comms.Wrap(e.world)
		if e.tp != nil {
			e.tp = e.comms.Wrap(e.tp)
		}
	}
	if e.mem, err = startMemoryReports(cfg.MemoryBreakdown, e.be, e.log, e.world.Rank()); err != nil {
		return nil, err
	}
	if e.pipe, err = e.grid.Group(ctx, e.world, comm.AxisPipe); err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: pipeline: %w", err)
	}
	e.closers = append(e.closers, e.pipe)
	if e.data, err = e.grid.Group(ctx, e.world, e.dataAxes()...); err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: pipeline: %w", err)
	}
	e.closers = append(e.closers, e.data)
	e.stage = e.grid.CoordOf(o.comm.Rank(), comm.AxisPipe)
	if e.batch, err = cfg.Resolve(o.comm.Size(), e.tpSize(), pp, e.spSize()); err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	if e.sched, err = pipeline.NewTraining(e.schedType, e.virtual, e.batch.GradAccum, pp, e.stage); err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: pipeline_schedule %q, virtual_stages %d, %d micro-batches, %d stages: %w", e.schedType, e.virtual, e.batch.GradAccum, pp, err)
	}
	e.steps = e.sched.Steps()
	if err := e.split(pm); err != nil {
		return nil, err
	}
	if err := e.checkPipeShards(); err != nil {
		return nil, err
	}
	if err := e.setupOptimizer(ctx, o); err != nil {
		return nil, err
	}
	if err := e.startMonitor(o); err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	var shapes [][]int
	for _, r := range e.modelParams() {
		shapes = append(shapes, r.Shape)
	}
	info := monitor.RunInfo{World: e.world.Size(), Device: e.be.Device().String(), Params: numParams(shapes...), Steps: int64(e.globalSteps)}
	if err := startRunInfo(ctx, e.mon, e.cfg, info, e.world); err != nil {
		return nil, err
	}
	if e.world.Rank() == 0 {
		reportProgress(e.log, e.cfg, 0, 0, e.LR(), e.opt, e.lrs)
	}
	return e, nil
}

// pipeNotes says what the pipeline engine does with keys whose words
// suggest more: the offload keys on the CPU, the activation_checkpointing
// keys only the data-parallel engine applies, and the partition method
// "best".
func pipeNotes(cfg *config.Config, dev tensor.Device) []string {
	notes := append(offloadNotes(cfg, dev), sequenceParallelNotes(cfg)...)
	ac := cfg.ActivationCheckpointing
	for _, k := range []struct {
		key string
		on  bool
	}{{"partition_activations", ac.PartitionActivations}, {"cpu_checkpointing", ac.CPUCheckpointing},
		{"contiguous_memory_optimization", ac.ContiguousMemoryOptimization},
		{"synchronize_checkpoint_boundary", ac.SynchronizeCheckpointBoundary}, {"profile", ac.Profile}} {
		if k.on {
			notes = append(notes, "activation_checkpointing."+k.key+": no effect with pipeline stages yet: a pipeline recomputes through the model's own checkpointing (pipeline.activation_checkpoint_interval), keeping each stage's boundaries whole on its device")
		}
	}
	if m := cfg.Pipeline.Partition; m == "" || strings.EqualFold(m, "best") {
		notes = append(notes, fmt.Sprintf("pipeline.partition %q: partitioning by parameters, PipelineModule's default partition_method", m))
	}
	return notes
}

// partitionMethod is pipeline.partition as PipelineModule's
// partition_method: "best" (the section's default) is PipelineModule's own
// default, "parameters".
func partitionMethod(cfg *config.Config) string {
	m := cfg.Pipeline.Partition
	if m == "" || strings.EqualFold(m, "best") {
		return "parameters"
	}
	return m
}

// split partitions the model's modules over stages × virtual parts and
// takes this stage's chunks: chunk c is virtual stage c×stages + stage.
func (e *PipeEngine) split(net model.Pipelined) error {
	all := net.Modules()
	layers := make([]pipeline.Layer, len(all))
	for i, m := range all {
		var n int64
		for _, p := range m.Params() {
			k := int64(1)
			for _, d := range p.Shape {
				k *= int64(d)
			}
			n += k
		}
		layers[i] = pipeline.Layer{Kind: pipeline.LayerModule, Type: fmt.Sprintf("%T", m), TrainableParams: n}
	}
	nparts := e.stages * e.virtual
	method := partitionMethod(e.cfg)
	var err error
	if e.partition, err = pipeline.PartitionLayers(method, layers, nparts); err != nil {
		return fmt.Errorf("deepgo.Initialize: pipeline.partition %q: %w", method, err)
	}
	if err := checkStagesTrainable(all, e.partition.StageBounds, nparts); err != nil {
		return err
	}
	e.chunks = make([][]int, e.virtual)
	e.parts = make([][]model.Part, e.virtual)
	e.bufs = make([][]*pipeBuffer, e.virtual)
	nbuf := e.sched.NumPipeBuffers()
	for c := range e.virtual {
		v := c*e.stages + e.stage
		lo, hi := e.partition.StageBounds(v)
		if lo == hi {
			return fmt.Errorf("deepgo.Initialize: pipeline.partition %q: virtual stage %d (stage %d, chunk %d) gets no module: %d modules over %d stages × %d virtual stages (boundaries %v); use fewer stages or a model with more layers",
				method, v, e.stage, c, len(all), e.stages, e.virtual, e.partition.Parts)
		}
		part, err := net.NewPart(lo, hi)
		if err != nil {
			return fmt.Errorf("deepgo.Initialize: pipeline: stage %d chunk %d: %w", e.stage, c, err)
		}
		e.parts[c] = make([]model.Part, nbuf)
		e.parts[c][0] = part
		for range nbuf {
			e.bufs[c] = append(e.bufs[c], e.newBuffer())
		}
		for _, m := range part.Modules() {
			e.chunks[c] = append(e.chunks[c], len(e.mods))
			e.mods = append(e.mods, m)
			e.params = append(e.params, e.splitFrozen(len(e.mods)-1, m.Params()))
		}
	}
	return nil
}

// setupOptimizer builds the stage's ZeRO optimizer, loss scaler and LR
// schedule, after making the stages' copies of each tied weight start
// equal (the owner's values, as DeepSpeed's PipelineModule synchronizes
// them).
func (e *PipeEngine) setupOptimizer(ctx context.Context, o options) error {
	specs := make([]zero.ModuleSpec, len(e.mods))
	for i, m := range e.mods {
		specs[i] = zero.ModuleSpec{Name: m.Name(), Params: make([]zero.ParamSpec, len(e.params[i]))}
		for j, p := range e.params[i] {
			if p == nil || p.Name == "" || p.Data == nil {
				return fmt.Errorf("deepgo.Initialize: pipeline stage %d: module %q param %d: want a named parameter with an initial value", e.stage, m.Name(), j)
			}
			specs[i].Params[j] = zero.ParamSpec{Name: p.Name, Shape: p.Shape}
		}
	}
	if err := e.checkFrozenInitial(); err != nil {
		return err
	}
	// every donated initial value of the model, this stage's and the
	// others' (this rank's engine is the one its copy of the model was
	// handed to; the other stages' parameters are never copied here)
	var all [][]*model.Param
	for _, m := range e.net.Modules() {
		all = append(all, m.Params())
	}
	donated, err := donations(all)
	if err != nil {
		return err
	}
	initial, free, err := e.tieWeights(ctx)
	defer free()
	if err != nil {
		return err
	}
	dts, err := precision(e.cfg)
	if err != nil {
		return err
	}
	if e.scaler, err = newScaler(e.cfg, e.cfg.ZeroOptimization.Stage); err != nil {
		return err
	}
	if e.opt, e.ownOpt, e.hostBE, err = stepOptimizer(e.cfg, e.be, e.opt, o.store, e.world.Rank(), max(1, runtime.GOMAXPROCS(0)/e.world.Size()), &e.notes); err != nil {
		return err
	}
	if e.cfg.Scheduler != nil {
		var warns []string
		if e.lrs, warns, err = newSchedule(e.cfg, e.opt); err != nil {
			return fmt.Errorf("deepgo.Initialize: %w", err)
		}
		e.notes = append(e.notes, warns...)
	}
	if err := e.initFrozen(ctx, dts.model); err != nil {
		return err
	}
	zc := zeroConfig(e.cfg, dts)
	zc.HostOffload = e.hostBE // offload_optimizer on a device: the step on the host, as the data-parallel engine's
	zc.PinHost = e.hostBE != nil && e.cfg.ZeroOptimization.OffloadOptimizer.PinMemory
	if e.z, err = zero.New(ctx, zc, e.data, e.be, e.opt, specs, initial); err != nil {
		return fmt.Errorf("deepgo.Initialize: pipeline stage %d: %w", e.stage, err)
	}
	// donated initial values are copied now: the engine frees them, as the
	// data-parallel engine does
	if err := freeDonated(donated); err != nil {
		return err
	}
	for m := range e.params {
		e.bind(m)
	}
	return nil
}

// tieWeights finds the weights several stages hold (the same parameter
// name on more than one stage), makes a group of those stages for each,
// and returns the initial values with the owner's copy broadcast into the
// others'.
func (e *PipeEngine) tieWeights(ctx context.Context) (func(m, p int) *tensor.Tensor, func(), error) {
	where := map[string][2]int{}
	var mine []string
	for m, ps := range e.params {
		for j, p := range ps {
			where[p.Name] = [2]int{m, j}
			mine = append(mine, p.Name)
		}
	}
	holders, names, err := sharedNames(ctx, e.pipe, mine)
	if err != nil {
		return nil, func() {}, fmt.Errorf("deepgo.Initialize: pipeline: listing the stages' parameters: %w", err)
	}
	copies := map[[2]int]*tensor.Tensor{}
	free := func() {
		for _, t := range copies {
			t.Free()
		}
	}
	for _, name := range names {
		g, err := comm.NewSubgroup(ctx, e.pipe, holders[name])
		if err != nil {
			return nil, free, fmt.Errorf("deepgo.Initialize: pipeline: group of tied weight %s: %w", name, err)
		}
		if g == nil {
			continue
		}
		e.closers = append(e.closers, g)
		mp := where[name]
		e.tied = append(e.tied, tiedParam{name: name, m: mp[0], p: mp[1], group: g, stages: holders[name], owner: holders[name][0] == e.stage})
		src := e.params[mp[0]][mp[1]].Data
		cp, err := e.be.Empty(src.DType(), src.Shape()...)
		if err != nil {
			return nil, free, err
		}
		copies[mp] = cp
		if err := e.be.Copy(cp, src); err != nil {
			return nil, free, err
		}
		if err := g.Broadcast(ctx, cp, 0); err != nil {
			return nil, free, fmt.Errorf("deepgo.Initialize: pipeline: synchronizing tied weight %s over stages %v: %w", name, holders[name], err)
		}
	}
	initial := func(m, p int) *tensor.Tensor {
		if t, ok := copies[[2]int{m, p}]; ok {
			return t
		}
		return e.params[m][p].Data
	}
	return initial, free, nil
}

// sharedNames gathers every stage's names (mine is this stage's) over
// pipe and returns the stages holding each name, in stage order, and the
// names more than one stage holds, sorted (a collective over pipe).
func sharedNames(ctx context.Context, pipe comm.Comm, mine []string) (map[string][]int, []string, error) {
	mine = slices.Sorted(slices.Values(mine))
	all, err := comm.AllGatherBytes(ctx, pipe, []byte(strings.Join(mine, "\n")))
	if err != nil {
		return nil, nil, err
	}
	holders := map[string][]int{}
	for s, b := range all {
		for _, name := range strings.Split(string(b), "\n") {
			if name != "" {
				holders[name] = append(holders[name], s)
			}
		}
	}
	var names []string
	for name, st := range holders {
		if len(st) > 1 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return holders, names, nil
}

// Stage is this rank's pipeline stage.
func (e *PipeEngine) Stage() int { return e.stage }

// Stages is the pipeline depth.
func (e *PipeEngine) Stages() int { return e.stages }

// Partition is the split of the model's modules over the virtual stages
// (virtual stage c×Stages()+s is chunk c of stage s).
func (e *PipeEngine) Partition() pipeline.Partition { return e.partition }

// Close releases the stage's parts, optimizer and groups.
func (e *PipeEngine) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	errs := []error{e.bg.close(), e.closeMonitor()}
	for c := range e.parts {
		for b, p := range e.parts[c] {
			if p != nil {
				p.Free()
			}
			if t := e.bufs[c][b].grad; t != nil {
				errs = append(errs, t.Free())
			}
		}
	}
	for c := range e.bufs {
		for b := range e.bufs[c] {
			e.bufs[c][b].arena.Close()
		}
	}
	e.parts = nil
	e.lrAtClose = e.LR() // LR stays answerable without the optimizer
	errs = append(errs, closeOptimizer(&e.z, &e.opt, e.ownOpt), e.freeFrozen())
	if e.hostBE != nil {
		errs = append(errs, e.hostBE.Close())
		e.hostBE = nil
	}
	for _, c := range e.closers {
		errs = append(errs, c.Close())
	}
	e.closers = nil
	if e.wrapped != nil {
		errs = append(errs, releaseWrapper(e.wrapped))
		e.wrapped = nil
	}
	errs = append(errs, e.groups.release())
	if e.ownBE {
		errs = append(errs, e.be.Close())
		e.ownBE = false
	}
	return errors.Join(errs...)
}

// closeOptimizer closes an engine's ZeRO optimizer and, when the engine
// made it, the base optimizer, clearing both.
func closeOptimizer(z **zero.Optimizer, opt *optim.Optimizer, own bool) error {
	var errs []error
	if *z != nil {
		errs = append(errs, (*z).Close())
		*z = nil
	}
	if own && *opt != nil {
		errs = append(errs, (*opt).Close())
		*opt = nil
	}
	return errors.Join(errs...)
}

// openCheck is the check at the top of every call that computes or
// communicates: after Close the engine's buffers are gone, and after a
// Load that failed part way its state is a mix (guard.go; Load checks
// only for Close).
func (e *PipeEngine) openCheck(op string) error {
	if e.closed {
		return errClosed(op)
	}
	if e.broken != nil {
		return errBroken(op, "batch", e.broken)
	}
	if e.halfLoaded != nil {
		return errHalfLoaded(op, e.halfLoaded)
	}
	return nil
}

// errClosed is op's refusal after Close.
func errClosed(op string) error {
	return fmt.Errorf("deepgo: %s: the Trainer is closed", op)
}
