package deepgo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/commslog"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/monitor/flops"
	"github.com/deepgo-ml/deepgo/monitor/gpu"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// Engine trains one data-parallel rank of a Model. Initialize builds it
// from the config: it resolves the batch triad (config.Config.Resolve) for
// its groups (WithComm's; a world of one without it), builds the optimizer,
// loss scaler and LR schedule, lays out and partitions the parameters for
// the ZeRO stage (offload included), rebinds every model.Param to engine
// memory, and opens the config's monitors (Monitor). Its methods must be
// called from one goroutine.
type Engine struct {
	cfg       *config.Config
	model     model.Model
	mods      []model.Module
	params    [][]*model.Param // the trainable ones, by module: ZeRO's indices
	frozen    []frozenParam    // the frozen ones, kept outside ZeRO (frozen.go)
	index     map[string]int
	hashes    map[int64]string
	c         comm.Comm
	wrapped   comm.Comm    // c, when deviceComm wrapped the trainer's comm for the device: Close releases it
	groups    modelGroups  // the model's TP and SP groups, wrapped for the device: Close gives them back
	lrAtClose float64      // LR when Close ran (the optimizer is gone)
	tp        comm.Comm    // tensor-parallel group (WithTensorParallel), nil without
	world     *local.World // owned world of one, when no comm was given
	be        backend.Backend
	ownBE     bool
	hostBE    backend.Backend // offload_optimizer.device "cpu" on a device: the host backend the optimizer steps on
	opt       optim.Optimizer
	ownOpt    bool
	z         *zero.Optimizer
	scaler    optim.LossScaler
	sched     optim.Schedule
	batch     config.BatchSizes
	clip      float64
	checkSeq  bool

	seq      []int
	gradOut  model.Activation
	forwards int
	arena    tensor.Arena // one micro-step's activations and loss gradient
	ck       *ckptRun     // activation checkpointing (ckpt.go), nil when the model declares no segments

	microSteps   int
	globalSteps  int
	skippedSteps int
	gradNorm     float64
	lastLoss     float64             // the last Forward's loss on this rank
	lastTokens   int64               // and its micro-batch's tokens
	acc          stepAcc             // the micro-steps of the optimizer step in progress, for the monitor
	microTimers  Timers              // the timers at the last micro-step's end (wall_clock_breakdown's micro lines)
	mem          backend.MemoryStats // memory_breakdown's counters; nil when off
	stepLoss     float64             // the last optimizer step's mean loss over its micro-batches and the ranks
	stepApplied  bool
	timers       Timers
	notes        []string

	phase      int   // phaseIdle, phaseForward or phaseBackward (guard.go)
	broken     error // the failure that left a micro-step half done (fail)
	halfLoaded error // the error of a Load that failed part way; one that succeeds clears it (guard.go)
	closed     bool
	claimed    []*model.Param // Params this engine trains (guard.go's liveParams)

	bg     bgSaver  // background saves (SaveAsync), closed by Close
	staged []func() // frees of host copies a checkpoint reads (hostCopy)

	log         io.Writer        // DeepSpeed's reports: comms_logger lines, flops_profiler (WithLog)
	comms       *commslog.Logger // comms_logger, when enabled
	flops       *flopsRun        // flops_profiler's step in progress
	flopsReport *flops.Report    // its report, once printed
	mon         *monitor.Monitor // fed by every optimizer step (monitoring.go)
	gpu         *gpu.Telemetry   // the GPU's NVML telemetry, on CUDA
}

// Timers are the engine's cumulative wall-clock split.
type Timers struct {
	Forward   time.Duration `json:"forward_ns"`   // module forwards and the loss
	Backward  time.Duration `json:"backward_ns"`  // module backwards (ZeRO hooks excluded)
	Comm      time.Duration `json:"comm_ns"`      // issuing and waiting on collectives
	Reduce    time.Duration `json:"reduce_ns"`    // bucket casts, scaling, accumulation
	Optimizer time.Duration `json:"optimizer_ns"` // the fused optimizer step
	Step      time.Duration `json:"step_ns"`      // the whole boundary Step
}

// bind points module m's Params at the engine's current buffers.
func (e *Engine) bind(m int) {
	for j, p := range e.params[m] {
		p.Data = e.z.Data(m, j)
		p.Grad = e.z.Grad(m, j)
	}
	e.bindFrozen(m)
}

// Notes lists what the engine did differently from what the config's words
// alone suggest (for example offload keys that are no-ops on the CPU
// backend), for the trainer to log.
func (e *Engine) Notes() []string { return append([]string(nil), e.notes...) }

// Rank is this engine's data-parallel rank; World the data-parallel size.
func (e *Engine) Rank() int { return e.c.Rank() }

// World is the data-parallel size.
func (e *Engine) World() int { return e.c.Size() }

// BatchSizes is the resolved batch triad.
func (e *Engine) BatchSizes() config.BatchSizes { return e.batch }

// GradientAccumulationSteps is gradient_accumulation_steps.
func (e *Engine) GradientAccumulationSteps() int { return e.batch.GradAccum }

// IsGradientAccumulationBoundary reports whether the next Step is an
// optimizer step: (micro_steps + 1) % gradient_accumulation_steps == 0.
func (e *Engine) IsGradientAccumulationBoundary() bool {
	return (e.microSteps+1)%e.batch.GradAccum == 0
}

// Forward runs mb's input through the model's modules and returns the
// loss of this micro-batch on this rank.
func (e *Engine) Forward(ctx context.Context, mb model.MicroBatch) (float64, error) {
	if err := e.usable(ctx, "Forward"); err != nil {
		return 0, err
	}
	if e.phase == phaseBackward {
		return 0, fmt.Errorf("deepgo: Forward: the last micro-step's Backward was not followed by Step: call Step after every Backward (its gradients would otherwise count twice in the next optimizer step)")
	}
	ctx = e.devCtx(ctx)
	if s, ok := mb.Input.(model.Sized); ok && s.BatchSize() != e.batch.MicroBatch {
		return 0, fmt.Errorf("deepgo: Forward: the micro-batch holds %d samples, train_micro_batch_size_per_gpu is %d: every rank's micro-batch must have that size", s.BatchSize(), e.batch.MicroBatch)
	}
	mods, seq, err := e.sequence("Forward")
	if err != nil {
		return 0, err
	}
	if e.checkSeq {
		if err := e.checkSequence(ctx, seq); err != nil {
			return 0, err
		}
	}
	if e.microSteps%e.batch.GradAccum == 0 {
		e.acc.t0 = time.Now() // an optimizer step starts (again, after an evaluation's Forward)
	}
	e.lastTokens = batchTokens([]model.MicroBatch{mb})
	// A Forward not followed by Backward left dead buffers: a new one
	// replaces it.
	e.seq, e.gradOut = nil, nil
	e.phase = phaseIdle
	e.arena.Reset()
	e.arena.Open()
	e.seeMemory("Engine before forward")
	loss, err := e.forward(ctx, mb, seq, mods)
	if err != nil {
		return 0, e.fail(err)
	}
	e.phase = phaseForward
	e.seeMemory("Engine after forward")
	return loss, nil
}

// sequence is this forward's modules (the model's Modules) and their
// engine indexes; op names the call in the error.
func (e *Engine) sequence(op string) ([]model.Module, []int, error) {
	mods := e.model.Modules()
	seq := make([]int, len(mods))
	for i, m := range mods {
		idx, ok := e.index[m.Name()]
		if !ok {
			return nil, nil, fmt.Errorf("deepgo: %s: module %q (position %d) was not in the model at Initialize", op, m.Name(), i)
		}
		seq[i] = idx
	}
	return mods, seq, nil
}

// forward runs Forward's passes once its arguments are checked.
func (e *Engine) forward(ctx context.Context, mb model.MicroBatch, seq []int, mods []model.Module) (float64, error) {
	mctx, err := e.planForward(ctx, mods)
	if err != nil {
		return 0, err
	}
	e.z.BeginMicroStep(seq)
	if err := e.z.SetAccumulationBoundary(e.IsGradientAccumulationBoundary()); err != nil {
		return 0, err
	}
	if e.profiling() {
		e.beginFlops(mb)
		defer func() { e.flops.open = false }()
	}
	act, err := e.forwardModules(ctx, mctx, seq, mb.Input)
	if err != nil {
		return 0, err
	}
	e.ck.endForward()
	scale := e.scaler.Scale() / float64(e.batch.GradAccum)
	t0 := time.Now()
	loss, g, err := e.model.Loss(mctx, act, mb.Target, scale)
	e.timers.Forward += time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("deepgo: loss: %w", err)
	}
	e.seq, e.gradOut = seq, g
	e.lastLoss = loss
	return loss, nil
}

// planForward is the module context of a forward over mods: the
// engine's backend and arena, and with activation checkpointing the
// micro-step's segments planned (what an earlier forward kept dropped) and
// the checkpointing mark when there is a segment.
func (e *Engine) planForward(ctx context.Context, mods []model.Module) (context.Context, error) {
	mctx := e.moduleCtx(ctx)
	if e.ck == nil {
		return mctx, nil
	}
	e.ck.reset()
	if err := e.ck.plan(e.model, mods); err != nil {
		return nil, err
	}
	if len(e.ck.spans) > 0 {
		mctx = model.WithCheckpointing(mctx)
	}
	return mctx, nil
}

// forwardModules runs the modules of seq forward from in, each between
// the ZeRO hooks, checkpointed segments through forwardSegment, and
// returns the last module's output.
func (e *Engine) forwardModules(ctx, mctx context.Context, seq []int, in model.Activation) (model.Activation, error) {
	act := in
	for i := 0; i < len(seq); {
		var err error
		if s, ok := e.ck.startsAt(i); ok {
			act, err = e.forwardSegment(ctx, mctx, seq, s, act)
			i = e.ck.spans[s].hi
		} else {
			act, err = e.forwardModule(ctx, mctx, seq[i], act)
			i++
		}
		if err != nil {
			return nil, err
		}
	}
	return act, nil
}

// Backward runs the modules' Backward in reverse order from the gradient
// of the last Forward's loss; gradients are reduced as buckets complete
// (stages 2-3) or accumulated for the boundary (stages 0-1). When it
// returns, everything the micro-step allocated from the context's arena is
// freed.
func (e *Engine) Backward(ctx context.Context) error {
	if err := e.usable(ctx, "Backward"); err != nil {
		return err
	}
	ctx = e.devCtx(ctx)
	if e.seq == nil {
		if e.phase == phaseBackward {
			return errors.New("deepgo: Backward: this micro-step's Backward already ran: call Step, then Forward the next micro-batch")
		}
		return errors.New("deepgo: Backward without a Forward")
	}
	e.seeMemory("Engine before backward")
	if err := e.fail(e.backward(ctx)); err != nil {
		return err
	}
	e.phase = phaseBackward
	e.seeMemory("Engine after backward")
	return nil
}

// backward runs Backward's passes once its state is checked.
func (e *Engine) backward(ctx context.Context) error {
	defer e.arena.Close()
	g := e.gradOut
	mctx := e.moduleCtx(ctx)
	if e.ck != nil {
		defer e.ck.reset()
		if len(e.ck.spans) > 0 {
			mctx = model.WithCheckpointing(mctx)
		}
	}
	for i := len(e.seq) - 1; i >= 0; {
		var err error
		if s, ok := e.ck.endsAt(i); ok {
			g, err = e.backwardSegment(ctx, mctx, e.seq, s, g)
			i = e.ck.spans[s].lo - 1
		} else {
			g, err = e.backwardModule(ctx, mctx, e.seq[i], g)
			i--
		}
		if err != nil {
			return err
		}
	}
	e.seq, e.gradOut = nil, nil
	return e.z.EndBackward(ctx)
}

// forwardModule runs module m's forward between the ZeRO hooks.
func (e *Engine) forwardModule(ctx, mctx context.Context, m int, act model.Activation) (model.Activation, error) {
	if err := e.z.PreForward(ctx, m); err != nil {
		return nil, err
	}
	e.bind(m)
	t0 := time.Now()
	out, err := e.mods[m].Forward(mctx, act)
	err = e.timerSync(ctx, err)
	d := time.Since(t0)
	e.timers.Forward += d
	if e.flops != nil && e.flops.open {
		e.flops.lat[e.mods[m].Name()] += d
	}
	if err != nil {
		return nil, fmt.Errorf("deepgo: forward of module %q: %w", e.mods[m].Name(), err)
	}
	if err := e.z.PostForward(ctx, m); err != nil {
		return nil, err
	}
	e.bind(m)
	return out, nil
}

// backwardModule runs module m's backward between the ZeRO hooks.
func (e *Engine) backwardModule(ctx, mctx context.Context, m int, g model.Activation) (model.Activation, error) {
	if err := e.z.PreBackward(ctx, m); err != nil {
		return nil, err
	}
	e.bind(m)
	t0 := time.Now()
	gin, err := e.mods[m].Backward(mctx, g)
	err = e.timerSync(ctx, err)
	e.timers.Backward += time.Since(t0)
	if err != nil {
		return nil, fmt.Errorf("deepgo: backward of module %q: %w", e.mods[m].Name(), err)
	}
	if err := e.z.PostBackward(ctx, m); err != nil {
		return nil, err
	}
	e.bind(m)
	return gin, nil
}

// Step ends a micro-step. At a gradient-accumulation boundary it checks
// for overflow (agreed across ranks), updates the loss scale, and either
// skips the step (counted in SkippedSteps, the LR schedule not advanced)
// or clips by the global norm, steps the optimizer on this rank's shard,
// gathers the updated parameters and advances the LR schedule; then it
// averages the step's micro-batch losses over the ranks and reports the
// step to the config's monitors (csv_monitor, tensorboard,
// wall_clock_breakdown, the NaN/Inf check), as TrainBatch does. An error
// of the monitor alone (a file it could not write) is returned after the
// step is done, and training may go on.
func (e *Engine) Step(ctx context.Context) error {
	observeErr, err := e.step(ctx)
	if err != nil {
		return err
	}
	return observeErr
}

// step is Step; observeErr is the monitor's error, err the step's.
func (e *Engine) step(ctx context.Context) (observeErr, err error) {
	if err := e.usable(ctx, "Step"); err != nil {
		return nil, err
	}
	if e.phase != phaseBackward {
		what := "no Forward"
		if e.phase == phaseForward {
			what = "a Forward but no Backward"
		}
		return nil, fmt.Errorf("deepgo: Step: this micro-step had %s: each micro-step is Forward, Backward, Step (a Step alone would still count a step, move the LR schedule and apply weight decay)", what)
	}
	ctx = e.devCtx(ctx)
	e.seeMemory("Engine before step")
	e.acc.add(e.lastLoss, e.lastTokens)
	if !e.IsGradientAccumulationBoundary() {
		e.microSteps++
		e.phase = phaseIdle
		e.logMicroStep()
		e.seeMemory("Engine after step")
		return nil, nil
	}
	if err := e.fail(e.boundaryStep(ctx)); err != nil {
		return nil, err
	}
	e.phase = phaseIdle
	if e.reportRank() == 0 { // DeepSpeed's _take_model_step reports before the timer lines
		reportProgress(e.log, e.cfg, e.globalSteps, e.skippedSteps, e.LR(), e.opt, e.sched)
	}
	e.logMicroStep()
	acc := e.acc
	e.acc = stepAcc{}
	loss, err := e.allMean(ctx, acc.meanLoss())
	if err != nil {
		return nil, e.fail(err)
	}
	e.stepLoss = loss
	observeErr = e.observe(ctx, loss, time.Since(acc.t0), acc.tokens)
	e.seeMemory("Engine after step") // after the step's timer lines, as DeepSpeed's step ends
	return observeErr, nil
}

// boundaryStep is Step at a gradient-accumulation boundary.
func (e *Engine) boundaryStep(ctx context.Context) error {
	t0 := time.Now()
	defer func() { e.timers.Step += time.Since(t0) }()
	e.stepApplied = false
	scale := e.scaler.Scale()
	overflow, err := e.z.Overflow(ctx)
	if err == nil {
		overflow, err = e.tpOverflow(ctx, overflow)
	}
	if err != nil {
		return err
	}
	if err := e.scaler.Update(overflow); err != nil {
		return fmt.Errorf("deepgo: step %d: %w", e.globalSteps, err)
	}
	if overflow {
		if err := e.z.ZeroGrad(); err != nil {
			return err
		}
		e.skippedSteps++
	} else {
		norm, err := e.globalNorm(ctx)
		if err != nil {
			return err
		}
		c := optim.CombinedScale(norm, scale, e.clip)
		if err := applyScheduleBetas(e.z, e.opt, e.sched); err != nil {
			return err
		}
		if err := e.z.Step(ctx, e.LR(), c); err != nil {
			return err
		}
		e.gradNorm = norm / scale
		if e.sched != nil {
			e.sched.Step()
		}
		e.stepApplied = true
	}
	for m := range e.params {
		e.bind(m)
	}
	e.globalSteps++
	e.microSteps++
	if e.flops != nil {
		return e.endFlops()
	}
	return nil
}

// TrainBatch runs one optimizer step over data, which holds
// gradient_accumulation_steps micro-batches of this rank: Forward,
// Backward and Step on each. It returns the mean loss over the
// micro-batches and the data-parallel ranks (every rank gets the same
// value). TrainBatch is the entry point a pipeline engine implements too.
func (e *Engine) TrainBatch(ctx context.Context, data []model.MicroBatch) (float64, error) {
	if err := e.usable(ctx, "TrainBatch"); err != nil {
		return 0, err
	}
	if e.phase == phaseBackward {
		return 0, fmt.Errorf("deepgo: TrainBatch: the last micro-step's Backward was not followed by Step: call Step first (its gradients would otherwise count in this step)")
	}
	ctx = e.devCtx(ctx)
	if len(data) != e.batch.GradAccum {
		return 0, fmt.Errorf("deepgo: TrainBatch: got %d micro-batches, want gradient_accumulation_steps = %d (one per micro-step of this rank)", len(data), e.batch.GradAccum)
	}
	if e.microSteps%e.batch.GradAccum != 0 {
		return 0, fmt.Errorf("deepgo: TrainBatch: called in the middle of an accumulation (micro step %d of %d)", e.microSteps%e.batch.GradAccum, e.batch.GradAccum)
	}
	var observeErr error
	for i, mb := range data {
		if _, err := e.Forward(ctx, mb); err != nil {
			if i > 0 { // earlier micro-batches' gradients are accumulated
				return 0, e.fail(err)
			}
			return 0, err
		}
		if err := e.Backward(ctx); err != nil {
			return 0, e.fail(err)
		}
		var err error
		if observeErr, err = e.step(ctx); err != nil {
			return 0, e.fail(err)
		}
	}
	return e.stepLoss, observeErr
}

// allMean averages v over the ranks, in rank order.
func (e *Engine) allMean(ctx context.Context, v float64) (float64, error) {
	n := e.c.Size()
	if n == 1 {
		return v, nil
	}
	vals, err := comm.AllGatherInt64s(ctx, e.c, []int64{int64(math.Float64bits(v))})
	if err != nil {
		return 0, fmt.Errorf("deepgo: averaging the loss: %w", err)
	}
	var s float64
	for _, b := range vals {
		s += math.Float64frombits(uint64(b))
	}
	return s / float64(n), nil
}

// LR is the learning rate the next optimizer step uses; under DeepSpeed's
// warmup schedules that is their minimum, usually 0, before the first step
// (see Trainer.LR).
func (e *Engine) LR() float64 {
	switch {
	case e.sched != nil:
		return e.sched.LR()[0]
	case e.opt == nil: // closed
		return e.lrAtClose
	}
	return e.opt.Defaults().LR
}

// LossScale is the current loss scale (1 without fp16).
func (e *Engine) LossScale() float64 { return e.scaler.Scale() }

// Scaler is the loss scaler (for checkpoints).
func (e *Engine) Scaler() optim.LossScaler { return e.scaler }

// GlobalSteps counts optimizer steps, skipped ones included.
func (e *Engine) GlobalSteps() int { return e.globalSteps }

// SkippedSteps counts steps skipped for inf/nan gradients.
func (e *Engine) SkippedSteps() int { return e.skippedSteps }

// MicroSteps counts Step calls.
func (e *Engine) MicroSteps() int { return e.microSteps }

// WasStepApplied reports whether the last boundary step updated the
// parameters (false after an overflow).
func (e *Engine) WasStepApplied() bool { return e.stepApplied }

// GradNorm is the unscaled global gradient norm of the last applied step.
func (e *Engine) GradNorm() float64 { return e.gradNorm }

// Memory reports this rank's bytes by category, the micro-step arena and
// the activations a model keeps itself (ModelActivations: nn.GPT's)
// included.
func (e *Engine) Memory() zero.Memory {
	if e.z == nil { // closed
		return zero.Memory{}
	}
	m := e.z.Memory()
	m.Arena, m.ArenaPeak = e.arena.Bytes(), e.arena.Peak()
	m.ModelActivations = modelActivations(e.model)
	countLive(&m, m.Arena+m.ModelActivations)
	e.frozenMemory(&m)
	if e.ck != nil {
		dev, host := e.ck.bytes()
		if m.Device.IsCPU() {
			host += dev
			dev = 0
		}
		m.HostBytes += host
		m.DeviceBytes += dev
	}
	return m
}

// Stage3Stats reports the stage-3 gather/prefetch/release counters.
func (e *Engine) Stage3Stats() zero.CoordinatorStats {
	if e.z == nil { // closed
		return zero.CoordinatorStats{}
	}
	return e.z.Stage3Stats()
}

// ZeRO exposes the ZeRO optimizer (layout, trace, timers).
func (e *Engine) ZeRO() *zero.Optimizer { return e.z }

// Timers returns the cumulative time split.
func (e *Engine) Timers() Timers {
	t := e.timers
	if e.z == nil { // closed
		return t
	}
	zt := e.z.Timers()
	t.Comm, t.Reduce, t.Optimizer = zt.Comm, zt.Reduce, zt.Optimizer
	return t
}

// Close waits for a background save in flight (SaveAsync), then releases
// the engine's buffers, and the optimizer, backend and world it created.
func (e *Engine) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	e.release()
	errs := []error{e.closeMonitor()}
	e.arena.Close()
	if e.ck != nil {
		e.ck.reset()
		e.ck.close()
	}
	errs = append(errs, e.bg.close())
	e.lrAtClose = e.LR() // LR stays answerable without the optimizer
	errs = append(errs, closeOptimizer(&e.z, &e.opt, e.ownOpt), e.freeFrozen())
	if e.hostBE != nil {
		errs = append(errs, e.hostBE.Close())
		e.hostBE = nil
	}
	if e.ownBE && e.be != nil {
		errs = append(errs, e.be.Close())
		e.be = nil
	}
	if e.world != nil {
		errs = append(errs, e.world.Close())
		e.world = nil
	}
	if e.wrapped != nil {
		errs = append(errs, releaseWrapper(e.wrapped))
		e.wrapped = nil
	}
	errs = append(errs, e.groups.release())
	return errors.Join(errs...)
}

// Parameters returns the full fp32 master weights (the parameters for
// fp32 models) keyed by model.Param.Name, and the frozen parameters'
// values (model.Param.Frozen: the working dtype widened to float32). It is
// a collective: every rank must call it.
func (e *Engine) Parameters(ctx context.Context) (map[string][]float32, error) {
	if err := e.usable(ctx, "Parameters"); err != nil {
		return nil, err
	}
	ctx = e.devCtx(ctx)
	all, err := e.z.GatherMaster(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]float32{}
	for m, ps := range e.params {
		for j, p := range ps {
			out[p.Name] = all[m][j]
		}
	}
	if err := e.frozenFloat32s(out); err != nil {
		return nil, err
	}
	return out, nil
}

// timerSync waits for the backend's queued work before a module's time
// is taken, when the config asks for the time split (wall_clock_breakdown
// or flops_profiler): on an asynchronous device a module's call returns
// once its kernels are queued, and its time would land on whatever waits
// next (DeepSpeed synchronizes its timers the same way). err is the
// module's own error, which wins.
func (e *Engine) timerSync(ctx context.Context, err error) error {
	return syncForTimers(ctx, e.cfg, e.be, err)
}

// syncForTimers is both engines' timerSync: it waits for be's queued work
// when be is a device and cfg asks for the time split; err wins.
func syncForTimers(ctx context.Context, cfg *config.Config, be backend.Backend, err error) error {
	if err != nil || be.Device().IsCPU() || !(cfg.WallClockBreakdown || cfg.FlopsProfiler.Enabled) {
		return err
	}
	return be.Synchronize(ctx)
}

// devCtx is ctx carrying the engine's backend, for the collectives: a
// device communicator (NCCL) orders its operations after the work queued
// on the backend the context carries.
func (e *Engine) devCtx(ctx context.Context) context.Context {
	if b, ok := backend.FromContext(ctx); ok && b == e.be {
		return ctx
	}
	return backend.NewContext(ctx, e.be)
}

// moduleCtx is ctx carrying the engine's backend and micro-step arena, for
// module and loss calls (backend.FromContext, tensor.ArenaFromContext).
func (e *Engine) moduleCtx(ctx context.Context) context.Context {
	return tensor.WithArena(e.devCtx(ctx), &e.arena)
}

// countLive adds n bytes in the memory of m's device to HostBytes (the
// CPU backend) or DeviceBytes.
func countLive(m *zero.Memory, n int64) {
	if m.Device.IsCPU() {
		m.HostBytes += n
	} else {
		m.DeviceBytes += n
	}
}

// modelActivations is the activation memory net keeps outside the
// engine's arena, as it reports it (nn.GPT: ActivationBytes), else 0.
func modelActivations(net any) int64 {
	if a, ok := net.(interface{ ActivationBytes() int64 }); ok {
		return a.ActivationBytes()
	}
	return 0
}
