package deepgo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// Engine trains one data-parallel rank of a Model. Its methods must be
// called from one goroutine.
type Engine struct {
	cfg      *config.Config
	model    model.Model
	mods     []model.Module
	params   [][]*model.Param
	index    map[string]int
	hashes   map[int64]string
	c        comm.Comm
	world    *local.World // owned world of one, when no comm was given
	be       backend.Backend
	ownBE    bool
	opt      optim.Optimizer
	ownOpt   bool
	z        *zero.Optimizer
	scaler   optim.LossScaler
	sched    optim.Schedule
	batch    config.Batch
	clip     float64
	checkSeq bool

	seq      []int
	gradOut  model.Activation
	forwards int

	microSteps   int
	globalSteps  int
	skippedSteps int
	gradNorm     float64
	lastLoss     float64
	stepApplied  bool
	timers       Timers
	notes        []string

	saver    *checkpoint.AsyncSaver // background saves (SaveAsync), closed by Close
	saverDir string
}

// Timers are the engine's cumulative wall-clock split.
type Timers struct {
	Forward   time.Duration // module forwards and the loss
	Backward  time.Duration // module backwards (ZeRO hooks excluded)
	Comm      time.Duration // issuing and waiting on collectives
	Reduce    time.Duration // bucket casts, scaling, accumulation
	Optimizer time.Duration // the fused optimizer step
	Step      time.Duration // the whole boundary Step
}

// Initialize builds an Engine for model from cfg (a loaded
// config.Config), like deepspeed.initialize: it resolves the batch triad
// for the data-parallel world, builds the optimizer, loss scaler and LR
// schedule, lays out and partitions the parameters for the configured
// ZeRO stage, and rebinds every Param to engine memory.
//
// Not supported yet (an error naming the key): offload_optimizer and
// offload_param devices other than none, ZeRO++ (zero_quantized_*,
// zero_hpz_partition_size > 1), MiCS, and tensor, pipeline or sequence
// parallel sizes above 1.
func Initialize(ctx context.Context, cfg *config.Config, net model.Model, opts ...Option) (*Engine, error) {
	if cfg == nil {
		return nil, errors.New("deepgo.Initialize: cfg is nil")
	}
	if net == nil {
		return nil, errors.New("deepgo.Initialize: model is nil")
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	e := &Engine{cfg: cfg, model: net, c: o.comm, be: o.backend, opt: o.opt, clip: cfg.GradientClipping}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	if err := unsupported(cfg); err != nil {
		return nil, err
	}
	if e.c == nil {
		w, err := local.NewWorld(1, local.Options{})
		if err != nil {
			return nil, fmt.Errorf("deepgo.Initialize: %w", err)
		}
		e.world, e.c = w, w.Comm(0)
	}
	n := e.c.Size()
	if e.be == nil {
		b, err := backend.NewCPU(max(1, runtime.GOMAXPROCS(0)/n))
		if err != nil {
			return nil, fmt.Errorf("deepgo.Initialize: %w", err)
		}
		e.be, e.ownBE = b, true
	}
	if dev := e.be.Device(); !dev.IsCPU() {
		// The ZeRO buffers, gradient zeroing and the module bindings work on
		// host memory today; the CUDA kernels and NCCL exist, the engine's
		// device path does not yet.
		return nil, fmt.Errorf("deepgo.Initialize: backend %s on %v: not supported: the engine runs on the CPU backend only so far", e.be.Name(), dev)
	}
	e.notes = offloadNotes(cfg, e.be.Device())
	batch, err := cfg.Resolve(n, 1, 1, 1)
	if err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	e.batch = batch

	// Modules and parameters.
	e.mods = net.Modules()
	if len(e.mods) == 0 {
		return nil, errors.New("deepgo.Initialize: model.Modules() is empty")
	}
	e.index = map[string]int{}
	e.hashes = map[int64]string{}
	specs := make([]zero.ModuleSpec, len(e.mods))
	e.params = make([][]*model.Param, len(e.mods))
	for i, m := range e.mods {
		name := m.Name()
		if j, dup := e.index[name]; dup {
			return nil, fmt.Errorf("deepgo.Initialize: module name %q is used by modules %d and %d: names must be unique", name, j, i)
		}
		e.index[name] = i
		e.hashes[nameHash(name)] = name
		ps := m.Params()
		e.params[i] = ps
		specs[i] = zero.ModuleSpec{Name: name, Params: make([]zero.ParamSpec, len(ps))}
		if r, ok := m.(model.Resident); ok && r.Resident() {
			specs[i].Persistent = true
		}
		for j, p := range ps {
			if p == nil {
				return nil, fmt.Errorf("deepgo.Initialize: module %q param %d is nil", name, j)
			}
			specs[i].Params[j] = zero.ParamSpec{Name: p.Name, Shape: p.Shape}
		}
	}

	// Precision.
	modelDT := tensor.Float32
	switch {
	case cfg.FP16.Enabled && cfg.BF16.Enabled:
		return nil, errors.New("deepgo.Initialize: fp16.enabled and bf16.enabled: at most one may be true")
	case cfg.FP16.Enabled:
		modelDT = tensor.Float16
	case cfg.BF16.Enabled:
		modelDT = tensor.BFloat16
	}
	accumDT, err := optDType(cfg.DataTypes.GradAccumDtype, modelDT, "data_types.grad_accum_dtype")
	if err != nil {
		return nil, err
	}
	commDT, err := optDType(cfg.CommunicationDataType, modelDT, "communication_data_type")
	if err != nil {
		return nil, err
	}
	stage := cfg.ZeroOptimization.Stage
	if e.scaler, err = newScaler(cfg, stage); err != nil {
		return nil, err
	}

	// Optimizer and schedule.
	if e.opt == nil {
		if cfg.Optimizer == nil {
			return nil, errors.New("deepgo.Initialize: optimizer: the config has no \"optimizer\" section; add one or pass WithOptimizer")
		}
		var oo []optim.Option
		if o.store != nil {
			oo = append(oo, optim.WithStateStore(o.store))
		}
		if e.opt, err = optim.New(cfg.Optimizer.Type, cfg.Optimizer.Params, e.be, oo...); err != nil {
			return nil, fmt.Errorf("deepgo.Initialize: %w", err)
		}
		e.ownOpt = true
	}
	if cfg.Scheduler != nil {
		if e.sched, err = optim.NewSchedule(cfg.Scheduler.Type, cfg.Scheduler.Params, []float64{e.opt.Defaults().LR}); err != nil {
			return nil, fmt.Errorf("deepgo.Initialize: %w", err)
		}
	}

	zc := cfg.ZeroOptimization
	overlap := stage == 3
	if zc.OverlapComm != nil {
		overlap = *zc.OverlapComm
	}
	zcfg := zero.Config{
		Stage:             stage,
		ModelDType:        modelDT,
		AccumDType:        accumDT,
		CommDType:         commDT,
		ReduceBucketSize:  zc.ReduceBucketSize,
		OverlapComm:       overlap,
		PredivideFactor:   cfg.GradientPredivideFactor,
		PrescaleGradients: cfg.PrescaleGradients,
		SumOp:             cfg.GradientAllreduceOp == "sum",
		CheckOverflow:     cfg.FP16.Enabled || cfg.BF16.Enabled && cfg.BF16.CheckGradOverflow,
		Coordinator: zero.CoordinatorConfig{
			PrefetchBucketSize: int64(zc.Stage3PrefetchBucketSize),
			MaxLiveParameters:  int64(zc.Stage3MaxLiveParameters),
			MaxReuseDistance:   int64(zc.Stage3MaxReuseDistance),
		},
		PersistenceThreshold: int64(zc.Stage3ParamPersistenceThreshold),
	}
	initial := func(m, p int) *tensor.Tensor { return e.params[m][p].Data }
	if e.z, err = zero.New(ctx, zcfg, e.c, e.be, e.opt, specs, initial); err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	e.checkSeq = stage >= 2 && n > 1
	for m := range e.params {
		e.bind(m)
	}
	ok = true
	return e, nil
}

func unsupported(cfg *config.Config) error {
	z := cfg.ZeroOptimization
	ns := func(key string) error {
		return fmt.Errorf("deepgo.Initialize: %s: not supported yet", key)
	}
	switch {
	case z.OffloadOptimizer != nil && z.OffloadOptimizer.Device == "nvme":
		return ns("zero_optimization.offload_optimizer.device=nvme (NVMe swapping slots in behind optim.StateStore; use WithStateStore)")
	case z.OffloadParam != nil && z.OffloadParam.Device == "nvme":
		return ns("zero_optimization.offload_param.device=nvme")
	case z.ZeroQuantizedWeights || z.ZeroQuantizedGradients || z.ZeroQuantizedNontrainableWeights:
		return ns("zero_optimization.zero_quantized_* (ZeRO++)")
	case z.ZeroHPZPartitionSize > 1:
		return ns("zero_optimization.zero_hpz_partition_size > 1 (ZeRO++ hpZ)")
	case z.MicsShardSize > 0:
		return ns("zero_optimization.mics_shard_size (MiCS)")
	case cfg.TensorModelParallelSize > 1:
		return ns("tensor_model_parallel_size > 1")
	case cfg.PipelineModelParallelSize > 1:
		return ns("pipeline_model_parallel_size > 1 (the pipeline engine will implement TrainBatch)")
	case cfg.SequenceParallelSize > 1:
		return ns("sequence_parallel_size > 1")
	case cfg.AMP.Enabled():
		return ns("amp.enabled (apex)")
	}
	return nil
}

// offloadNotes says what the offload keys mean on this engine's device.
// On the CPU backend device "cpu" is what already happens: the fp32 master
// weights, moments and parameter partitions live in host memory and the
// optimizer step runs on the CPU, as ZeRO-Offload arranges on a GPU. So such
// configs train unchanged, with a note rather than an error.
func offloadNotes(cfg *config.Config, dev tensor.Device) []string {
	z := cfg.ZeroOptimization
	var notes []string
	if z.OffloadOptimizer != nil && z.OffloadOptimizer.Device == "cpu" && dev.IsCPU() {
		notes = append(notes, "zero_optimization.offload_optimizer.device=cpu: on the CPU backend the optimizer state already lives in host memory and the step runs on the CPU; nothing moves")
	}
	if z.OffloadParam != nil && z.OffloadParam.Device == "cpu" && dev.IsCPU() {
		notes = append(notes, "zero_optimization.offload_param.device=cpu: on the CPU backend parameter partitions already live in host memory; nothing moves")
	}
	return notes
}

// Notes lists what the engine did differently from what the config's words
// alone suggest (for example offload keys that are no-ops on the CPU
// backend), for the trainer to log.
func (e *Engine) Notes() []string { return append([]string(nil), e.notes...) }

func optDType(s *string, def tensor.DType, key string) (tensor.DType, error) {
	if s == nil {
		return def, nil
	}
	dt, err := tensor.ParseDType(*s)
	if err != nil || !dt.IsFloat() || dt == tensor.Float64 {
		return 0, fmt.Errorf("deepgo.Initialize: %s %q: allowed fp32, fp16, bf16", key, *s)
	}
	return dt, nil
}

func newScaler(cfg *config.Config, stage int) (optim.LossScaler, error) {
	if !cfg.FP16.Enabled {
		return optim.NewStaticScaler(1)
	}
	f := cfg.FP16
	if f.LossScale > 0 {
		s, err := optim.NewStaticScaler(f.LossScale)
		if err != nil {
			return nil, fmt.Errorf("deepgo.Initialize: fp16.loss_scale: %w", err)
		}
		return s, nil
	}
	dc := optim.DynamicScalerConfig{
		InitScale:             math.Ldexp(1, f.InitialScalePower),
		ScaleFactor:           2,
		ScaleWindow:           f.LossScaleWindow,
		MinScale:              f.MinLossScale,
		DelayedShift:          f.Hysteresis,
		ConsecutiveHysteresis: f.ConsecutiveHysteresis,
		RaiseErrorAtMin:       stage > 0,
		Mode:                  optim.ScalerModeZeRO,
	}
	if stage == 0 {
		dc.Mode = optim.ScalerModeFP16Optimizer
	}
	s, err := optim.NewDynamicScaler(dc)
	if err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: fp16: %w", err)
	}
	return s, nil
}

func nameHash(s string) int64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int64(h.Sum64() >> 1)
}

// bind points module m's Params at the engine's current buffers.
func (e *Engine) bind(m int) {
	for j, p := range e.params[m] {
		p.Data = e.z.Data(m, j)
		p.Grad = e.z.Grad(m, j)
	}
}

// Rank is this engine's data-parallel rank; World the data-parallel size.
func (e *Engine) Rank() int { return e.c.Rank() }

// World is the data-parallel size.
func (e *Engine) World() int { return e.c.Size() }

// Batch is the resolved batch triad.
func (e *Engine) Batch() config.Batch { return e.batch }

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
	mods := e.model.Modules()
	seq := make([]int, len(mods))
	for i, m := range mods {
		idx, ok := e.index[m.Name()]
		if !ok {
			return 0, fmt.Errorf("deepgo: Forward: module %q (position %d) was not in the model at Initialize", m.Name(), i)
		}
		seq[i] = idx
	}
	if e.checkSeq {
		if err := e.checkSequence(ctx, seq); err != nil {
			return 0, err
		}
	}
	e.z.BeginMicroStep(seq)
	act := mb.Input
	for _, m := range seq {
		if err := e.z.PreForward(ctx, m); err != nil {
			return 0, err
		}
		e.bind(m)
		t0 := time.Now()
		out, err := e.mods[m].Forward(ctx, act)
		e.timers.Forward += time.Since(t0)
		if err != nil {
			return 0, fmt.Errorf("deepgo: forward of module %q: %w", e.mods[m].Name(), err)
		}
		act = out
		if err := e.z.PostForward(ctx, m); err != nil {
			return 0, err
		}
		e.bind(m)
	}
	scale := e.scaler.Scale() / float64(e.batch.GradAccum)
	t0 := time.Now()
	loss, g, err := e.model.Loss(ctx, act, mb.Target, scale)
	e.timers.Forward += time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("deepgo: loss: %w", err)
	}
	e.seq, e.gradOut = seq, g
	e.lastLoss = loss
	return loss, nil
}

// Backward runs the modules' Backward in reverse order from the gradient
// of the last Forward's loss; gradients are reduced as buckets complete
// (stages 2-3) or accumulated for the boundary (stages 0-1).
func (e *Engine) Backward(ctx context.Context) error {
	if e.seq == nil {
		return errors.New("deepgo: Backward without a Forward")
	}
	g := e.gradOut
	for i := len(e.seq) - 1; i >= 0; i-- {
		m := e.seq[i]
		if err := e.z.PreBackward(ctx, m); err != nil {
			return err
		}
		e.bind(m)
		t0 := time.Now()
		gin, err := e.mods[m].Backward(ctx, g)
		e.timers.Backward += time.Since(t0)
		if err != nil {
			return fmt.Errorf("deepgo: backward of module %q: %w", e.mods[m].Name(), err)
		}
		g = gin
		if err := e.z.PostBackward(ctx, m); err != nil {
			return err
		}
		e.bind(m)
	}
	e.seq, e.gradOut = nil, nil
	return e.z.EndBackward(ctx)
}

// Step ends a micro-step. At a gradient-accumulation boundary it checks
// for overflow (agreed across ranks), updates the loss scale, and either
// skips the step (counted in SkippedSteps, the LR schedule not advanced)
// or clips by the global norm, steps the optimizer on this rank's shard,
// gathers the updated parameters and advances the LR schedule.
func (e *Engine) Step(ctx context.Context) error {
	if !e.IsGradientAccumulationBoundary() {
		e.microSteps++
		return nil
	}
	t0 := time.Now()
	defer func() { e.timers.Step += time.Since(t0) }()
	e.stepApplied = false
	scale := e.scaler.Scale()
	overflow, err := e.z.Overflow(ctx)
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
		norm, err := e.z.GlobalNorm(ctx)
		if err != nil {
			return err
		}
		c := optim.CombinedScale(norm, scale, e.clip)
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
	return nil
}

// TrainBatch runs one optimizer step over data, which holds
// gradient_accumulation_steps micro-batches of this rank: Forward,
// Backward and Step on each. It returns the mean loss over the
// micro-batches and the data-parallel ranks (every rank gets the same
// value). TrainBatch is the entry point a pipeline engine implements too.
func (e *Engine) TrainBatch(ctx context.Context, data []model.MicroBatch) (float64, error) {
	if len(data) != e.batch.GradAccum {
		return 0, fmt.Errorf("deepgo: TrainBatch: %d micro-batches, gradient_accumulation_steps is %d", len(data), e.batch.GradAccum)
	}
	if e.microSteps%e.batch.GradAccum != 0 {
		return 0, fmt.Errorf("deepgo: TrainBatch: called in the middle of an accumulation (micro step %d of %d)", e.microSteps%e.batch.GradAccum, e.batch.GradAccum)
	}
	var sum float64
	for _, mb := range data {
		l, err := e.Forward(ctx, mb)
		if err != nil {
			return 0, err
		}
		sum += l
		if err := e.Backward(ctx); err != nil {
			return 0, err
		}
		if err := e.Step(ctx); err != nil {
			return 0, err
		}
	}
	return e.allMean(ctx, sum/float64(len(data)))
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

// checkSequence verifies that every rank runs the same module sequence,
// and names the first module where they differ.
func (e *Engine) checkSequence(ctx context.Context, seq []int) error {
	e.forwards++
	n := e.c.Size()
	lens, err := comm.AllGatherInt64s(ctx, e.c, []int64{int64(len(seq))})
	if err != nil {
		return fmt.Errorf("deepgo: checking module order: %w", err)
	}
	longest := 0
	for _, l := range lens {
		longest = max(longest, int(l))
	}
	mine := make([]int64, longest)
	for i, m := range seq {
		mine[i] = nameHash(e.mods[m].Name())
	}
	all, err := comm.AllGatherInt64s(ctx, e.c, mine)
	if err != nil {
		return fmt.Errorf("deepgo: checking module order: %w", err)
	}
	name := func(h int64) string {
		if h == 0 {
			return "<end of sequence>"
		}
		if s, ok := e.hashes[h]; ok {
			return fmt.Sprintf("%q", s)
		}
		return fmt.Sprintf("an unknown module (hash %#x)", h)
	}
	for i := range longest {
		for r := 1; r < n; r++ {
			a, b := all[i], all[r*longest+i]
			if a != b {
				return &OrderError{Forward: e.forwards, Position: i, Rank: r, Want: name(a), Got: name(b)}
			}
		}
	}
	return nil
}

// OrderError reports ranks that run different module sequences, the
// divergence that makes DeepSpeed's ZeRO-3 hang. Every rank returns the
// same error.
type OrderError struct {
	Forward  int    // 1-based count of forwards on this engine
	Position int    // index in the module sequence
	Rank     int    // the first rank that differs from rank 0
	Want     string // rank 0's module at Position
	Got      string // rank Rank's module at Position
}

// Error names both modules and the ranks.
func (e *OrderError) Error() string {
	return fmt.Sprintf("deepgo: ranks run different module sequences (forward %d): at position %d rank 0 runs module %s but rank %d runs module %s; every data-parallel rank must run the same modules in the same order under ZeRO stage 2/3",
		e.Forward, e.Position, e.Want, e.Rank, e.Got)
}

// LR is the learning rate the next optimizer step uses.
func (e *Engine) LR() float64 {
	if e.sched != nil {
		return e.sched.LR()[0]
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

// Memory reports this rank's bytes by category.
func (e *Engine) Memory() zero.Memory { return e.z.Memory() }

// Stage3Stats reports the stage-3 gather/prefetch/release counters.
func (e *Engine) Stage3Stats() zero.CoordinatorStats { return e.z.Stage3Stats() }

// ZeRO exposes the ZeRO optimizer (layout, trace, timers).
func (e *Engine) ZeRO() *zero.Optimizer { return e.z }

// Timers returns the cumulative time split.
func (e *Engine) Timers() Timers {
	t := e.timers
	zt := e.z.Timers()
	t.Comm, t.Reduce, t.Optimizer = zt.Comm, zt.Reduce, zt.Optimizer
	return t
}

// Close waits for a background save in flight (SaveAsync), then releases
// the engine's buffers, and the optimizer, backend and world it created.
func (e *Engine) Close() error {
	var errs []error
	if e.saver != nil {
		errs = append(errs, e.saver.Close())
		e.saver = nil
	}
	if e.z != nil {
		errs = append(errs, e.z.Close())
		e.z = nil
	}
	if e.ownOpt && e.opt != nil {
		errs = append(errs, e.opt.Close())
		e.opt = nil
	}
	if e.ownBE && e.be != nil {
		errs = append(errs, e.be.Close())
		e.be = nil
	}
	if e.world != nil {
		errs = append(errs, e.world.Close())
		e.world = nil
	}
	return errors.Join(errs...)
}

// Parameters returns the full fp32 master weights (the parameters for
// fp32 models) keyed "module.param". It is a collective: every rank must
// call it.
func (e *Engine) Parameters(ctx context.Context) (map[string][]float32, error) {
	all, err := e.z.GatherMaster(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]float32{}
	for m, ps := range e.params {
		for j, p := range ps {
			out[e.mods[m].Name()+"."+p.Name] = all[m][j]
		}
	}
	return out, nil
}
