package deepgo

// The translation of a config into the engine's parts: the module table,
// precisions, loss scaler, optimizer, schedule and ZeRO configuration. The
// training loop (engine.go) sees only the parts.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/cuda"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/offload"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// checkRunComm refuses a world of one (no WithComm) inside a comm/local.Run
// of several ranks: each rank would train alone, on its own batch, every one
// writing the monitor files as rank 0. Tensor or sequence parallel groups
// make it a real layout, and a model sharded for TP without them is left to
// checkShards, whose error says more.
func checkRunComm(ctx context.Context, net model.Model, o options) error {
	n := local.RunSize(ctx)
	if o.comm != nil || o.tp != nil || o.sp != nil || n < 2 {
		return nil
	}
	for _, m := range net.Modules() {
		for _, p := range m.Params() {
			if p.Parallel.Split {
				return nil
			}
		}
	}
	return fmt.Errorf("deepgo.Initialize: no WithComm inside a comm/local.Run of %d ranks: each rank would train alone as a world of one (its own batch, every rank writing the monitor files as rank 0); pass deepgo.WithComm(c) with the comm Run handed this rank (or, for independent single-rank engines, the comm of a local.NewWorld(1))", n)
}

// newEngine builds the data-parallel engine: it resolves the batch triad
// for the data-parallel world, builds the optimizer, loss scaler and LR
// schedule, lays out and partitions the parameters for the configured ZeRO
// stage, and rebinds every Param to engine memory.
func newEngine(ctx context.Context, cfg *config.Config, net model.Model, o options) (*Engine, error) {
	e := &Engine{cfg: cfg, model: net, c: o.comm, tp: o.tp, be: o.backend, opt: o.opt, clip: cfg.GradientClipping}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	if err := checkTP(cfg, net, o); err != nil {
		return nil, err
	}
	if err := checkSP(cfg, net, o); err != nil {
		return nil, err
	}
	if e.c == nil {
		if err := checkRunComm(ctx, net, o); err != nil {
			return nil, err
		}
		w, err := local.NewWorld(1, local.Options{})
		if err != nil {
			return nil, fmt.Errorf("deepgo.Initialize: %w", err)
		}
		e.world, e.c = w, w.Comm(0)
	}
	n := e.c.Size()
	if e.be == nil && o.device != nil && !o.device.IsCPU() {
		var err error
		if e.be, e.ownBE, err = deviceBackend(*o.device, e.c); err != nil {
			return nil, err
		}
	}
	if e.be == nil {
		if bc, ok := e.c.(interface{ Backend() backend.Backend }); ok {
			// comm/local and comm/mpi ranks carry their CPU pool: computing
			// on it keeps the thread count in one place (their Options).
			e.be = bc.Backend()
		}
	}
	if e.be == nil {
		b, err := backend.NewCPU(max(1, runtime.GOMAXPROCS(0)/n))
		if err != nil {
			return nil, fmt.Errorf("deepgo.Initialize: %w", err)
		}
		e.be, e.ownBE = b, true
	}
	if err := e.deviceComm(); err != nil {
		return nil, err
	}
	var err error
	if e.tp, err = e.groups.tensorParallel(e.be, net, e.tp); err != nil {
		return nil, err
	}
	if _, err := e.groups.sequenceParallel(e.be, net, o.sp); err != nil {
		return nil, err
	}
	if err := agreeConfig(ctx, cfg, e.c, e.tp); err != nil {
		return nil, err
	}
	e.log = o.log
	if e.log == nil {
		e.log = io.Discard
		if e.reportRank() == 0 {
			e.log = os.Stderr // a log: the program's standard output stays its own
		}
	}
	if err := e.startCommsLogger(); err != nil {
		return nil, err
	}
	if err := e.startMonitor(o.monitor); err != nil {
		return nil, err
	}
	if err := e.startMemoryBreakdown(); err != nil {
		return nil, err
	}
	if dev := e.be.Device(); !dev.IsCPU() {
		e.arena.SetAlloc(e.be.Empty)
	}
	var warnLog io.Writer // the default log only: WithLog's owner logs Notes
	if o.log == nil {
		warnLog = e.log
	}
	early := e.notes // the monitor's and the GPU telemetry's, gathered above
	e.notes = append(configNotes(cfg, warnLog), offloadNotes(cfg, e.be.Device())...)
	e.notes = append(e.notes, early...)
	e.notes = append(e.notes, sequenceParallelNotes(cfg)...)
	var ckNotes []string
	e.ck, ckNotes = newCkpt(cfg, net, e.be, e.tp)
	e.notes = append(e.notes, ckNotes...)
	batch, err := cfg.Resolve(n, 1, 1, max(1, cfg.SequenceParallelSize))
	if err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	e.batch = batch
	if e.mon != nil { // the Train/Samples x values count samples: global_samples
		e.mon.SetTrainBatchSize(batch.TrainBatchSize)
	}

	specs, err := e.declare(net)
	if err == nil {
		err = e.checkShards()
	}
	if err == nil {
		err = e.checkFrozen()
	}
	if err != nil {
		return nil, err
	}
	dts, err := precision(cfg)
	if err != nil {
		return nil, err
	}
	stage := cfg.ZeroOptimization.Stage
	if e.scaler, err = newScaler(cfg, stage); err != nil {
		return nil, err
	}
	// the swap folders are per world rank (reportRank): the TP ranks of a
	// data-parallel rank share its rank in e.c, but not their optimizer
	// state or parameters
	if e.opt, e.ownOpt, e.hostBE, err = stepOptimizer(cfg, e.be, e.opt, o.store, e.reportRank(), max(1, runtime.GOMAXPROCS(0)/n), &e.notes); err != nil {
		return nil, err
	}
	if cfg.Scheduler != nil {
		var warns []string
		if e.sched, warns, err = newSchedule(cfg, e.opt); err != nil {
			return nil, fmt.Errorf("deepgo.Initialize: %w", err)
		}
		e.notes = append(e.notes, warns...)
	}
	donated, err := donations(append(slices.Clip(e.params), e.frozenList()))
	if err != nil {
		return nil, err
	}
	if err := e.initFrozen(ctx, dts.model); err != nil {
		return nil, err
	}
	initial := func(m, p int) *tensor.Tensor { return e.params[m][p].Data }
	zc := zeroConfig(cfg, dts)
	zc.HostOffload = e.hostBE
	zc.PinHost = e.hostBE != nil && cfg.ZeroOptimization.OffloadOptimizer.PinMemory
	zc.ParamStore = paramStore(cfg, e.be, e.reportRank())
	if e.z, err = zero.New(ctx, zc, e.c, e.be, e.opt, specs, initial); err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	if err := freeDonated(donated); err != nil {
		return nil, err
	}
	e.notes = append(e.notes, zeroPPNotes(cfg, e.z.OnDemand())...)
	e.checkSeq = stage >= 2 && n > 1
	for m := range e.params {
		e.bind(m)
	}
	if err := e.startRunInfo(ctx); err != nil {
		return nil, err
	}
	if e.reportRank() == 0 {
		reportProgress(e.log, cfg, 0, 0, e.LR(), e.opt, e.sched)
	}
	ok = true
	return e, nil
}

// DeviceComm is a device backend that provides the collectives over its
// own memory for a group (the simulated device orders them after its
// stream; CUDA would use NCCL): the engine wraps the one-rank world it
// makes when no comm is given.
type DeviceComm interface {
	WrapComm(c comm.Comm) (comm.Comm, error)
}

// deviceComm checks that the engine's comm can move its backend's memory
// (deviceCommFor) and takes the comm to use.
func (e *Engine) deviceComm() error { return useDeviceComm(e.be, &e.c, &e.wrapped) }

// useDeviceComm replaces *c by deviceCommFor's comm for be and, when that
// is a wrapper made here, records it in *wrapped for releaseWrapper at
// Close (both engines).
func useDeviceComm(be backend.Backend, c, wrapped *comm.Comm) error {
	w, err := deviceCommFor(be, *c)
	if err != nil {
		return err
	}
	if w != *c {
		*wrapped = w
	}
	*c = w
	return nil
}

// releaseWrapper frees what a comm wrapper deviceCommFor made keeps (its
// staging buffers, comm/staged's Release); the comm it wraps is the
// trainer's, so the wrapper is not closed.
func releaseWrapper(w comm.Comm) error {
	if r, ok := w.(interface{ Release() error }); ok {
		return r.Release()
	}
	return nil
}

// deviceCommFor returns c, or c wrapped by be, as a comm that can move
// be's memory: on the CPU any comm can; on a device the comm must be bound
// to a backend on that device (Backend()), be a device communicator on it
// (Device(): NCCL), or the backend wraps it (DeviceComm). Both engines
// use it.
func deviceCommFor(be backend.Backend, c comm.Comm) (comm.Comm, error) {
	dev := be.Device()
	if dev.IsCPU() {
		return c, nil
	}
	if bc, ok := c.(interface{ Backend() backend.Backend }); ok && bc.Backend() != nil && bc.Backend().Device() == dev {
		// bound to this device: the engine's backend is that comm's (see
		// deviceBackend), or wraps it (a trainer's decorated backend)
		return c, nil
	}
	if dc, ok := c.(interface{ Device() tensor.Device }); ok && dc.Device() == dev {
		return c, nil // a device communicator (NCCL) on this device
	}
	dc, ok := be.(DeviceComm)
	if !ok {
		return nil, fmt.Errorf("deepgo.Initialize: backend %s on %v: not supported with this comm (%T): it moves host memory, and the backend cannot wrap it; pass WithComm with a comm bound to %v (its Backend() on %v; for GPUs an NCCL comm)", be.Name(), dev, c, dev, dev)
	}
	w, err := dc.WrapComm(c)
	if err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	return w, nil
}

// deviceBackend is the backend WithDevice(dev) computes on: the comm's
// own when the comm is bound to dev (a sim world's rank), since a second
// backend there would run the engine's kernels on another stream than the
// one the comm orders its collectives after; else a new one (own), with
// the thread count of the comm's CPU pool (comm/local's Options.Threads),
// or this rank's share of the machine's threads.
func deviceBackend(dev tensor.Device, c comm.Comm) (be backend.Backend, own bool, err error) {
	threads := max(1, runtime.GOMAXPROCS(0)/c.Size())
	if bc, ok := c.(interface{ Backend() backend.Backend }); ok && bc.Backend() != nil {
		if bc.Backend().Device() == dev {
			return bc.Backend(), false, nil
		}
		// a comm/local or comm/mpi rank's CPU pool: its thread count is
		// the one place the trainer set it (and the CPU kernels' blocking
		// follows it, so the device computes the CPU's bits)
		if t, ok := bc.Backend().(interface{ Threads() int }); ok && t.Threads() > 0 {
			threads = t.Threads()
		}
	}
	be, err = newDeviceBackend(dev, threads)
	if err != nil {
		return nil, false, fmt.Errorf("deepgo.Initialize: device %v: %w", dev, err)
	}
	return be, true, nil
}

// newDeviceBackend makes the backend of a device: the simulated device's
// (threads CPU workers per stream) or a GPU's.
func newDeviceBackend(dev tensor.Device, threads int) (backend.Backend, error) {
	switch dev.Kind {
	case tensor.KindSim:
		return sim.NewBackend(dev.Index, sim.Options{Threads: threads})
	case tensor.KindCUDA:
		return cuda.NewBackend(dev.Index)
	}
	return nil, fmt.Errorf("device kind %v: no backend", dev)
}

// declare takes the model's modules and parameters into the engine's
// tables and returns them as ZeRO's module specs.
func (e *Engine) declare(net model.Model) ([]zero.ModuleSpec, error) {
	e.mods = net.Modules()
	if len(e.mods) == 0 {
		return nil, errors.New("deepgo.Initialize: model.Modules() is empty")
	}
	e.index = map[string]int{}
	e.hashes = map[int64]string{}
	owner := map[string]string{} // parameter name -> module
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
		specs[i] = zero.ModuleSpec{Name: name}
		if r, ok := m.(model.Resident); ok && r.Resident() {
			specs[i].Persistent = true
		}
		for j, p := range ps {
			if p == nil {
				return nil, fmt.Errorf("deepgo.Initialize: module %q param %d is nil", name, j)
			}
			if p.Name == "" {
				return nil, fmt.Errorf("deepgo.Initialize: module %q param %d has no name", name, j)
			}
			if other, dup := owner[p.Name]; dup {
				return nil, fmt.Errorf("deepgo.Initialize: parameter name %q is used twice (modules %q and %q): model.Param.Name is the model-wide name, as PyTorch's named_parameters gives it (e.g. %q)", p.Name, other, name, name+"."+p.Name)
			}
			owner[p.Name] = name
			if err := e.claim(p); err != nil {
				return nil, err
			}
			if p.Data != nil && p.Data.Dim() > 1 && !slices.Equal(p.Data.Shape(), p.Shape) {
				return nil, fmt.Errorf("deepgo.Initialize: parameter %q: Data is %v but Shape says %v: give Data the declared shape (or a flat view of as many elements)", p.Name, p.Data.Shape(), p.Shape)
			}
			if p.Frozen { // kept by the engine, outside ZeRO (frozen.go)
				e.frozen = append(e.frozen, frozenParam{m: i, p: p})
				continue
			}
			e.params[i] = append(e.params[i], p)
			specs[i].Params = append(specs[i].Params, zero.ParamSpec{Name: p.Name, Shape: p.Shape})
		}
	}
	return specs, nil
}

// dtypes are the engine's three precisions.
type dtypes struct {
	model, accum, comm tensor.DType
}

// precision reads fp16/bf16, data_types.grad_accum_dtype and
// communication_data_type.
func precision(cfg *config.Config) (dtypes, error) {
	d := dtypes{model: tensor.Float32}
	switch {
	case cfg.FP16.Enabled && cfg.BF16.Enabled:
		return d, errors.New("deepgo.Initialize: fp16.enabled and bf16.enabled: at most one may be true")
	case cfg.FP16.Enabled:
		d.model = tensor.Float16
	case cfg.BF16.Enabled:
		d.model = tensor.BFloat16
	}
	var err error
	if d.accum, err = optDType(cfg.DataTypes.GradAccumDtype, d.model, "data_types.grad_accum_dtype"); err != nil {
		return d, err
	}
	if d.comm, err = optDType(cfg.CommunicationDataType, d.model, "communication_data_type"); err != nil {
		return d, err
	}
	return d, nil
}

// newOptimizer builds the config's "optimizer" section on be, keeping its
// state in store when one is given, else where offload_optimizer says
// (nvmeStore, under the folder of rank), else in be's memory.
func newOptimizer(cfg *config.Config, be backend.Backend, store optim.StateStore, rank int) (optim.Optimizer, error) {
	if cfg.Optimizer == nil {
		return nil, errors.New("deepgo.Initialize: optimizer: the config has no \"optimizer\" section; add one or pass WithOptimizer")
	}
	var oo []optim.Option
	var own optim.StateStore
	if store == nil {
		var err error
		if own, err = nvmeStore(cfg, be, rank); err != nil {
			return nil, err
		}
		store = own
	}
	if store != nil {
		oo = append(oo, optim.WithStateStore(store))
	}
	oo = append(oo, bf16MasterOptions(cfg)...)
	opt, err := optim.New(cfg.Optimizer.Type, cfg.Optimizer.Params, be, oo...)
	if err != nil {
		if own != nil {
			err = errors.Join(err, own.Close())
		}
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	return opt, nil
}

// stepOptimizer is both engines' optimizer: opt when WithOptimizer passed
// one (with a note to notes when offload_optimizer asks for a host step,
// which it cannot get), else the config's, made here (own). It steps on be
// or, with offload_optimizer device cpu or nvme on a device (hostStep), on
// a host CPU backend of threads threads, returned as host: the engine
// hands it to zero.Config.HostOffload and closes it.
func stepOptimizer(cfg *config.Config, be backend.Backend, opt optim.Optimizer, store optim.StateStore, rank, threads int, notes *[]string) (_ optim.Optimizer, own bool, host backend.Backend, err error) {
	if opt != nil {
		if err := checkBF16MasterOptimizer(cfg, opt); err != nil {
			return nil, false, nil, err
		}
		if hostStep(cfg, be.Device()) {
			*notes = append(*notes, "zero_optimization.offload_optimizer.device="+cfg.ZeroOptimization.OffloadOptimizer.Device+": not applied: the optimizer passed with WithOptimizer steps where it was built")
		}
		return opt, false, nil, nil
	}
	stepBE := be
	if hostStep(cfg, be.Device()) {
		if host, err = backend.NewCPU(threads); err != nil {
			return nil, false, nil, fmt.Errorf("deepgo.Initialize: zero_optimization.offload_optimizer.device=%s: host backend: %w", cfg.ZeroOptimization.OffloadOptimizer.Device, err)
		}
		stepBE = host
	}
	if opt, err = newOptimizer(cfg, stepBE, store, rank); err != nil {
		if host != nil {
			err = errors.Join(err, host.Close())
		}
		return nil, false, nil, err
	}
	return opt, true, host, nil
}

// nvmeStore is the optimizer-state store offload_optimizer.device "nvme"
// asks for (nil otherwise): the state of each parameter group swapped
// through rank's folder under nvme_path by the aio engine. Its buffers are
// host memory, so be must be a CPU backend: on a device the engine steps on
// a host backend (hostStep).
func nvmeStore(cfg *config.Config, be backend.Backend, rank int) (optim.StateStore, error) {
	oo := offloadOptimizer(cfg)
	if oo == nil || oo.Device != "nvme" {
		return nil, nil
	}
	if !be.Device().IsCPU() {
		return nil, fmt.Errorf("deepgo.Initialize: zero_optimization.offload_optimizer.device=nvme with the optimizer on %v: not supported (the swapper pages state through host memory; the step must run on the host)", be.Device())
	}
	opts, err := offload.NVMeOptionsFromConfig(cfg, rank)
	if err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	s, err := offload.NewNVMeStore(opts)
	if err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: zero_optimization.offload_optimizer: %w", err)
	}
	return s, nil
}

// SwapFolders are the NVMe swap folders an engine of world rank rank
// makes under cfg's nvme_paths (the rules nvmeStore and paramStore
// apply): the optimizer state's with offload_optimizer device nvme at
// ZeRO stages 1-3, stage 3's parameters' with offload_param device nvme.
// Close removes them; a process that exits without closing its engines
// (deepgo train on an interrupt) removes them itself.
func SwapFolders(cfg *config.Config, rank int) []string {
	var dirs []string
	if oo := offloadOptimizer(cfg); oo != nil && oo.Device == "nvme" && oo.NvmePath != nil {
		dirs = append(dirs, offload.SwapDir(*oo.NvmePath, rank))
	}
	if op := cfg.ZeroOptimization.OffloadParam; op != nil && op.Device == "nvme" && cfg.ZeroOptimization.Stage == 3 && op.NvmePath != nil {
		dirs = append(dirs, offload.ParamSwapDir(*op.NvmePath, rank))
	}
	return dirs
}

// paramStore is where offload_param keeps stage 3's parameter partitions
// (nil: in the backend's memory, as without it): device "nvme" in swap
// files under rank's folder of nvme_path, device "cpu" on a device backend
// in host memory. At other stages the config loader warns that the key is
// ignored, and on the CPU backend device "cpu" is what already happens.
func paramStore(cfg *config.Config, be backend.Backend, rank int) zero.NewParamStore {
	dev := be.Device()
	z := cfg.ZeroOptimization
	op := z.OffloadParam
	switch {
	case op == nil || z.Stage != 3:
		return nil
	case op.Device == "cpu" && !dev.IsCPU() && op.PinMemory:
		return zero.PinnedHostParams(be)
	case op.Device == "cpu" && !dev.IsCPU():
		return zero.HostParams
	case op.Device == "nvme":
		return func(dt tensor.DType, names []string, sizes []int) (zero.ParamStore, error) {
			o, err := offload.ParamSwapOptionsFromConfig(cfg, rank)
			if err != nil {
				return nil, err
			}
			s, err := offload.NewParamSwapper(o, dt, names, sizes)
			if err != nil {
				return nil, err
			}
			return s, nil // a nil *ParamSwapper must not become a non-nil ParamStore
		}
	}
	return nil
}

// zeroConfig translates the zero_optimization section and the gradient
// keys into the ZeRO optimizer's configuration.
func zeroConfig(cfg *config.Config, d dtypes) zero.Config {
	zc := cfg.ZeroOptimization
	overlap := zc.Stage == 3
	if zc.OverlapComm != nil {
		overlap = *zc.OverlapComm
	}
	return zero.Config{
		Stage:             zc.Stage,
		ModelDType:        d.model,
		AccumDType:        d.accum,
		MasterDType:       masterDType(cfg),
		CommDType:         d.comm,
		ReduceBucketSize:  zc.ReduceBucketSize,
		OverlapComm:       overlap,
		PredivideFactor:   cfg.GradientPredivideFactor,
		PrescaleGradients: cfg.PrescaleGradients,
		SumOp:             cfg.GradientAllreduceOp == "sum",
		NoReduceScatter:   !zc.ReduceScatter,
		CheckOverflow:     cfg.FP16.Enabled || cfg.BF16.Enabled && cfg.BF16.CheckGradOverflow,
		Coordinator: zero.CoordinatorConfig{
			PrefetchBucketSize: int64(zc.Stage3PrefetchBucketSize),
			MaxLiveParameters:  int64(zc.Stage3MaxLiveParameters),
			MaxReuseDistance:   int64(zc.Stage3MaxReuseDistance),
		},
		PersistenceThreshold: int64(zc.Stage3ParamPersistenceThreshold),
		SubGroupSize:         subGroupSize(cfg),
		HPZPartitionSize:     zc.ZeroHPZPartitionSize,
		// qwZ quantizes stage-3 gathers; at stages 0-2 the config loader
		// warns that it is ignored, as DeepSpeed passes it to stage 3 only
		QuantizedWeights: zc.ZeroQuantizedWeights && zc.Stage == 3,
	}
}

// subGroupSize is where sub_group_size applies (0 elsewhere): stage 3, as
// in DeepSpeed, and any stage with NVMe optimizer offload, whose host
// memory it bounds (DeepSpeed offers NVMe in stage 3 only). Stages 0-2
// otherwise step their shard in one call, as DeepSpeed's stage 1/2 do.
func subGroupSize(cfg *config.Config) int {
	zc := cfg.ZeroOptimization
	if oo := offloadOptimizer(cfg); zc.Stage == 3 || oo != nil && oo.Device == "nvme" {
		return zc.SubGroupSize
	}
	return 0
}

func unsupported(cfg *config.Config) error {
	if err := Unsupported(cfg); err != nil {
		return fmt.Errorf("deepgo.Initialize: %w", err)
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
	oo := offloadOptimizer(cfg) // nil at stage 0: the loader's warning says so
	var notes []string
	if oo != nil && oo.Device == "cpu" && dev.IsCPU() {
		notes = append(notes, "zero_optimization.offload_optimizer.device=cpu: on the CPU backend the optimizer state already lives in host memory and the step runs on the CPU; nothing moves"+pinNote(dev, oo.PinMemory))
	}
	if hostStep(cfg, dev) && oo.Device == "cpu" {
		notes = append(notes, "zero_optimization.offload_optimizer.device=cpu: the fp32 master weights, gradients for the step and optimizer state live in host memory and the step runs on the CPU; updated weights are copied to "+dev.String()+pinNote(dev, oo.PinMemory))
	}
	if oo != nil && oo.Device == "nvme" {
		where := ""
		if hostStep(cfg, dev) {
			where = "; the fp32 master weights stay in host memory and the step runs on the CPU, as with device cpu"
		}
		notes = append(notes, fmt.Sprintf("zero_optimization.offload_optimizer.device=nvme: the optimizer state swaps through nvme_path with the aio engine, one sub-group of at most sub_group_size=%d elements at a time (at most buffer_count=%d of them in host memory: a buffer is allocated when the swap plan first fills it)%s", z.SubGroupSize, oo.BufferCount, where))
	}
	if z.OffloadParam != nil && z.OffloadParam.Device == "cpu" && dev.IsCPU() {
		notes = append(notes, "zero_optimization.offload_param.device=cpu: on the CPU backend parameter partitions already live in host memory; nothing moves"+pinNote(dev, z.OffloadParam.PinMemory))
	}
	if op := z.OffloadParam; op != nil && z.Stage == 3 && (op.Device == "nvme" || op.Device == "cpu" && !dev.IsCPU()) {
		notes = append(notes, paramOffloadNote(op, dev))
	}
	return notes
}

// paramOffloadNote says where offload_param keeps the parameter partitions.
func paramOffloadNote(op *config.Offload, dev tensor.Device) string {
	to := ""
	if !dev.IsCPU() {
		to = "; each is copied to " + dev.String() + " before its all-gather"
		if op.Device == "cpu" {
			to += pinNote(dev, op.PinMemory)
		}
	}
	if op.Device == "cpu" {
		return "zero_optimization.offload_param.device=cpu: this rank's parameter partitions live in host memory" + to
	}
	return fmt.Sprintf("zero_optimization.offload_param.device=nvme: this rank's parameter partitions live in a swap file under nvme_path, read before their all-gather (the next modules' read ahead) into buffer_count=%d buffers of at most buffer_size=%d elements; partitions stay in host memory instead while their running total is within max_in_cpu=%d elements%s", op.BufferCount, op.BufferSize, op.MaxInCPU, to)
}

// hostStep reports whether offload_optimizer moves the optimizer step to
// the host: device "cpu" or "nvme" on a device backend (on the CPU it is
// there). NVMe swaps the state through host buffers, so on a device it is
// CPU offload with the state in files (ZeRO-Infinity).
func hostStep(cfg *config.Config, dev tensor.Device) bool {
	oo := offloadOptimizer(cfg)
	return oo != nil && (oo.Device == "cpu" || oo.Device == "nvme") && !dev.IsCPU()
}

// offloadOptimizer is the offload_optimizer section the engines apply:
// none at ZeRO stage 0, where the config loader warns that it is ignored
// (DeepSpeed offloads the ZeRO optimizer's partitions, which stage 0 does
// not have).
func offloadOptimizer(cfg *config.Config) *config.Offload {
	if cfg.ZeroOptimization.Stage == 0 {
		return nil
	}
	return cfg.ZeroOptimization.OffloadOptimizer
}

// pinNote says what pin_memory does for the host buffers copies to and
// from dev cross with (CPU offload's gradient chunk and half weights,
// offload_param's partitions): they come from dev's backend.HostEmpty,
// page-locked on CUDA (Memory().Pinned counts them).
func pinNote(dev tensor.Device, pin bool) string {
	switch {
	case dev.IsCPU():
		return "; pin_memory changes nothing: no copies to a device"
	case !pin && dev.Kind == tensor.KindCUDA:
		return "; pin_memory false: the host buffers are pageable (the CUDA backend's Copy stages them)"
	case !pin:
		return "; pin_memory false: the host buffers are the C allocator's"
	case dev.Kind == tensor.KindCUDA:
		return "; pin_memory: the host buffers the copies use are page-locked (cudaHostAlloc) and copied by DMA in stream order"
	}
	return "; pin_memory: the host buffers the copies use come from the " + dev.String() + " backend's HostEmpty (aligned host memory: nothing to page-lock on a simulated device)"
}

// sequenceParallelNotes says what the sequence_parallel section does here:
// sharding needs sequence_parallel_size > 1 (see sp.go), and the attention
// window is the model's to apply.
func sequenceParallelNotes(cfg *config.Config) []string {
	sp := cfg.SequenceParallel
	var notes []string
	if sp.Enabled && cfg.SequenceParallelSize <= 1 {
		notes = append(notes, "sequence_parallel.enabled: sequence_parallel_size is 1, so no sequence is sharded; attention runs whole on every rank")
	}
	if sp.AttentionWindowSize > 0 {
		notes = append(notes, fmt.Sprintf("sequence_parallel.attention_window_size=%d: the engine passes it to nothing; the model must apply it (deepgo train's GPT does, as nn.GPTConfig.AttentionWindow)", sp.AttentionWindowSize))
	}
	return notes
}

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
