package zero

import (
	"context"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Config is what the Optimizer needs from zero_optimization and the
// precision sections, already resolved.
type Config struct {
	// Stage is zero_optimization.stage, 0-3.
	Stage int
	// ModelDType is the working precision of the parameters modules compute
	// with (float32, float16 or bfloat16).
	ModelDType tensor.DType
	// AccumDType is data_types.grad_accum_dtype (default: ModelDType).
	AccumDType tensor.DType
	// MasterDType is the dtype of the master weights: float32 (the zero
	// value), or bfloat16 for bf16.bf16_master_weights_and_grads
	// (bf16master.go), which needs a bfloat16 model and AccumDType, stage
	// 1-3, and a base optimizer built with optim.WithBF16Master.
	MasterDType tensor.DType
	// CommDType is communication_data_type (default: ModelDType).
	CommDType tensor.DType
	// ReduceBucketSize is zero_optimization.reduce_bucket_size (elements).
	ReduceBucketSize int
	// OverlapComm is zero_optimization.overlap_comm: stage 2/3 bucket
	// reductions run while backward continues (up to two in flight).
	OverlapComm bool
	// PredivideFactor, PrescaleGradients, SumOp and NoReduceScatter are
	// gradient_predivide_factor, prescale_gradients,
	// gradient_allreduce_op == "sum" and zero_optimization.reduce_scatter
	// false: where the gradient sum is divided by the world (see
	// ReduceScaling).
	PredivideFactor   float64
	PrescaleGradients bool
	SumOp             bool
	NoReduceScatter   bool
	// CheckOverflow enables the inf/nan check at the step (fp16 always,
	// bf16 per bf16.check_grad_overflow).
	CheckOverflow bool
	// Align is the element alignment of each rank's chunk (DeepSpeed's
	// nccl_start_alignment_factor, 2); 0 means 2.
	Align int
	// Coordinator holds the stage-3 prefetch knobs.
	Coordinator CoordinatorConfig
	// PersistenceThreshold is stage3_param_persistence_threshold: a module
	// whose parameters total at most this many elements stays gathered.
	PersistenceThreshold int64
	// GroupName names the optimizer parameter group (state key).
	GroupName string
	// SubGroupSize is zero_optimization.sub_group_size where it applies
	// (see subgroup.go): Step steps the shard in sub-groups of at most this
	// many elements, each a parameter group "GroupName/subN" of its own; 0,
	// or a size covering the shard, steps it whole as GroupName.
	SubGroupSize int
	// HostOffload, when set, is a host (CPU) backend the optimizer steps on
	// for a device backend: offload_optimizer.device "cpu" (offload.go).
	// The fp32 master chunk, a host copy of the gradient chunk and the
	// base optimizer's state (its StateStore must be host memory) live in
	// host memory; the base optimizer must run on this backend.
	HostOffload backend.Backend
	// PinHost (offload_optimizer.pin_memory) makes HostOffload's buffers
	// that cross to and from the device (the gradient chunk copied down,
	// the half weights copied up) the device backend's HostEmpty memory:
	// page-locked on CUDA.
	PinHost bool
	// QuantizedWeights is zero_optimization.zero_quantized_weights (ZeRO++
	// qwZ, stage 3 only): gathers move int8 weights and per-group scales
	// and dequantize into the gathered buffer (qwz.go).
	QuantizedWeights bool
	// ParamStore, when set (stage 3 only), makes the store the owned
	// parameter partitions live in instead of the backend's memory:
	// offload_param (paramstore.go).
	ParamStore NewParamStore
	// HPZPartitionSize is zero_optimization.zero_hpz_partition_size: above
	// 1 at stage 3, each rank also keeps a secondary 1/H partition of every
	// non-persistent unit, and gathers after the first one since the
	// parameters changed run over a group of H consecutive ranks (hpz.go).
	// It must divide the data-parallel size; stages 0-2 ignore it.
	HPZPartitionSize int
}

// Timers accumulate where the Optimizer spent wall time in training
// steps (the micro-steps' hooks and the boundary Step), as DeepSpeed's
// wall_clock_breakdown timers do: the collectives of New (the initial
// broadcast and stage-3 persistent gather, which wait for the slowest rank
// to arrive) and of RestoreMaster are not counted, so that the time a
// monitor takes from the difference of two readings around a step is a
// part of that step's wall time.
type Timers struct {
	Comm      time.Duration // issuing and waiting for collectives
	Optimizer time.Duration // the fused optimizer step
	Reduce    time.Duration // bucket casts, scaling and accumulation
}

// Memory is the per-rank byte count by category.
type Memory struct {
	// Params are the resident model parameters by dtype: the full flat
	// buffer for stages 0-2, the owned shard for stage 3 (with a
	// ParamStore, wherever the store keeps it).
	Params map[tensor.DType]int64
	// ParamStoreHost is the host memory a ParamStore (offload_param) holds
	// now (in HostBytes): partitions kept in host memory and swap buffers;
	// ParamStoreHostPeak its high-water mark; ParamsOnDisk the partition
	// bytes in swap files.
	ParamStoreHost, ParamStoreHostPeak, ParamsOnDisk int64
	// Master is the fp32 master copy (0 when the model is fp32, whose
	// optimizer updates the parameters in place). With Config.HostOffload
	// it is in host memory, fp32 models included, and holds for half
	// models the host model-dtype copy the step writes too.
	Master int64
	// Grads are gradient buffers kept across micro-steps: full for stages
	// 0-1, the owned shard for stages 2-3; with Config.HostOffload also
	// the owned chunk's host copy the step reads.
	Grads int64
	// OptimizerState is the optimizer's moments (allocated at the first step).
	OptimizerState int64
	// OptimizerStateOnDisk is the part of OptimizerState kept in swap
	// files (NVMe offload), counted in neither HostBytes nor DeviceBytes;
	// SwapBuffers is the host memory the state is paged through now (in
	// HostBytes), SwapBuffersPeak its high-water mark.
	OptimizerStateOnDisk, SwapBuffers, SwapBuffersPeak int64
	// Buckets is the gradient-bucket and communication staging memory
	// allocated now (in use or cached), BucketsPeak its peak.
	Buckets, BucketsPeak int64
	// Gathered is the stage-3 gathered-parameter memory now, GatheredPeak
	// its peak.
	Gathered, GatheredPeak int64
	// Secondary is the stage-3 hpZ secondary partitions
	// (zero_hpz_partition_size > 1) held now.
	Secondary int64
	// Frozen is the frozen parameters (model.Param.Frozen), which the
	// engine keeps outside ZeRO in the working dtype, whole on every
	// data-parallel rank (a tensor-parallel rank holds its shard);
	// the engine fills it (and adds it to Peak, HostBytes or DeviceBytes).
	Frozen int64
	// Peak is the peak of the sum of the categories above.
	Peak int64
	// Arena is the engine's micro-step arena (the activations and loss
	// gradients modules allocate from it) live now, ArenaPeak its peak.
	// The engine fills both; they are not part of Peak.
	Arena, ArenaPeak int64
	// ModelActivations is the activation memory a model keeps in buffers
	// of its own rather than the engine's arena (nn.GPT's: its
	// ActivationBytes), live now; 0 for a model that does not report it.
	// The engine fills it; it is not part of Peak.
	ModelActivations int64
	// Device is where the backend computes; HostBytes and DeviceBytes
	// split what is live now (every category above, the optimizer state,
	// the arena and the model's activations) by where it lives: host memory, or Device. On the CPU
	// backend all of it is host memory.
	Device                 tensor.Device
	HostBytes, DeviceBytes int64
	// Pinned is the part of HostBytes allocated by the device backend's
	// HostEmpty for copies (pin_memory): page-locked on CUDA.
	Pinned int64
}

// ParamBytes is the sum of Params.
func (m Memory) ParamBytes() int64 {
	var n int64
	for _, v := range m.Params {
		n += v
	}
	return n
}

// ModelStates is parameters (frozen ones included) + gradients + master
// weights + optimizer state: what the ZeRO paper's formulas count, plus the hpZ secondary
// parameter partitions (Secondary), as ZeRO++ counts them.
func (m Memory) ModelStates() int64 {
	return m.ParamBytes() + m.Frozen + m.Secondary + m.Grads + m.Master + m.OptimizerState
}

type pendingReduce struct {
	unit int
	work comm.Work
	buf  *tensor.Tensor // the micro-step gradient buffer
	c    *tensor.Tensor // what was reduced (buf, or a staging cast of it)
}

// Optimizer is one rank's ZeRO optimizer: it owns the flat parameter,
// gradient and master buffers, reduces gradients, gathers stage-3
// parameters, and steps a base optim.Optimizer on this rank's shard.
// Methods must be called from one goroutine, in the order the engine's
// micro-step protocol defines (see the deepgo package).
type Optimizer struct {
	cfg   Config
	c     comm.Comm
	be    backend.Backend
	base  optim.Optimizer
	mods  []ModuleSpec
	lay   *Layout
	world int
	rank  int
	pre   float32
	post  float32

	acct     *accountant
	buckets  *pool
	gathered *pool

	param  []*tensor.Tensor // stages 0-2: full unit, model dtype
	shard  []*tensor.Tensor // stage 3: owned chunk, model dtype
	full   []*tensor.Tensor // stage 3: gathered unit, nil when released
	gwork  []comm.Work      // stage 3: pending gathers
	master []*tensor.Tensor // owned range, fp32 (may alias param/shard)
	copies []*tensor.Tensor // owned range of the model-dtype params (half models)
	acc    []*tensor.Tensor // stages 0-1: full unit; 2-3: owned chunk; accum dtype
	gbuf   []*tensor.Tensor // micro-step gradient buffers (direct == false)
	direct bool             // stages 0-1 with accum == model dtype: backward accumulates into acc

	left    []int  // modules of each unit still to finish backward this micro-step
	touched []bool // unit got a gradient buffer this micro-step
	pending []pendingReduce
	coord   *Coordinator
	unitOf  []int // stage 3: unit of module m, -1 if none

	data [][]*tensor.Tensor
	grad [][]*tensor.Tensor

	subs       []*subGroup                 // the optimizer step calls over the shard
	stateCache map[string][]*tensor.Tensor // OptimizerState's assembled copy (several sub-groups)
	widened    []*tensor.Tensor            // bf16 masters: float32 copies of state handed out (bf16master.go)
	masterW    []*tensor.Tensor            // bf16 masters: Master's float32 copies by unit, nil until asked

	hostGrad  []*tensor.Tensor  // HostOffload: the owned gradient chunk in host memory
	pinned    int64             // bytes of hostGrad and copies from HostEmpty (PinHost)
	upload    []*tensor.Tensor  // HostOffload: the device range of each unit's updated weights
	down      []backend.Copying // HostOffload: each unit's gradient download in flight
	downStats GradDownloads
	boundary  bool // this micro-step ends with a step (SetAccumulationBoundary)

	qwz    *qwz       // zero_quantized_weights: the quantized gathers' state (qwz.go)
	pstore ParamStore // stage 3 partitions outside the backend (offload_param); shard is then nil
	gsrc   []func()   // stage 3: gives a pending gather's source back once it is waited for
	held   []int      // units whose pending gather reads a store buffer, oldest first
	stored int64      // bytes of the partitions the store holds
	hpz    *hpz       // ZeRO++ hpZ secondary partitions, nil without (hpz.go)

	timers     Timers
	evalTimers Timers       // timers when BeginEval ran: EndEval puts them back
	hyper      *optim.Hyper // SetHyper: what each sub-group steps with (nil: the base's defaults)
	closed     bool         // Close ran
}

// New builds the Optimizer for mods over the group c, allocating and
// initialising every buffer: initial(m, p) returns the starting value of
// parameter p of module m (float32, float16 or bfloat16, any device the
// backend reads), and rank 0's values are broadcast to every rank, as
// DeepSpeed does at engine start. base steps the owned shard.
func New(ctx context.Context, cfg Config, c comm.Comm, be backend.Backend, base optim.Optimizer, mods []ModuleSpec, initial func(m, p int) *tensor.Tensor) (*Optimizer, error) {
	if cfg.Stage < 0 || cfg.Stage > 3 {
		return nil, fmt.Errorf("zero: zero_optimization.stage %d: allowed 0, 1, 2, 3", cfg.Stage)
	}
	for _, d := range []struct {
		key string
		dt  tensor.DType
	}{{"model dtype", cfg.ModelDType}, {"data_types.grad_accum_dtype", cfg.AccumDType}, {"communication_data_type", cfg.CommDType}} {
		if d.dt != tensor.Float32 && d.dt != tensor.Float16 && d.dt != tensor.BFloat16 {
			return nil, fmt.Errorf("zero: %s %v: allowed fp32, fp16, bf16", d.key, d.dt)
		}
	}
	if err := checkMasterDType(cfg); err != nil {
		return nil, err
	}
	if cfg.Align <= 0 {
		cfg.Align = 2
	}
	if cfg.GroupName == "" {
		cfg.GroupName = "zero"
	}
	qwzAlign(&cfg)
	z := &Optimizer{cfg: cfg, c: c, be: be, base: base, mods: mods, world: c.Size(), rank: c.Rank(), acct: newAccountant()}
	pre, post := ReduceScaling(cfg.Stage, z.world, cfg.PredivideFactor, cfg.PrescaleGradients, cfg.SumOp, !cfg.NoReduceScatter)
	z.pre, z.post = float32(pre), float32(post)
	var err error
	if cfg.Stage == 3 {
		z.lay, err = PlanModules(mods, z.world, cfg.Align)
	} else {
		z.lay, err = PlanBuckets(mods, z.world, cfg.Align, cfg.ReduceBucketSize)
	}
	if err != nil {
		return nil, err
	}
	largest := 0
	for _, u := range z.lay.Units {
		largest = max(largest, u.Numel)
	}
	z.buckets = newPool(be, z.acct, CatBuckets, 2*int64(largest)*4)
	// two largest modules stay cached: gathers reuse warm buffers (bounded like DeepSpeed's fixed fetch buffers)
	z.gathered = newPool(be, z.acct, CatGathered, 2*int64(largest)*int64(cfg.ModelDType.Size()))
	z.direct = cfg.Stage <= 1 && cfg.AccumDType == cfg.ModelDType
	z.makeSlots() // before anything that can fail: Close indexes them
	if err := z.openParamStore(); err != nil {
		z.Close()
		return nil, err
	}
	if err := z.openQwZ(); err != nil {
		z.Close()
		return nil, err
	}
	if err := z.alloc(); err != nil {
		z.Close()
		return nil, err
	}
	if err := z.planSteps(); err != nil {
		z.Close()
		return nil, err
	}
	if err := z.openHPZ(ctx); err != nil {
		z.Close()
		return nil, err
	}
	if err := z.init(ctx, initial); err != nil {
		z.Close()
		return nil, err
	}
	z.timers = Timers{} // Initialize's collectives are no step's (see Timers)
	return z, nil
}

func (z *Optimizer) own(u int) (lo, n int) {
	U := z.lay.Units[u].Numel
	if z.cfg.Stage == 0 {
		return 0, U
	}
	return z.rank * U / z.world, U / z.world
}

// makeSlots makes the per-unit slices, every entry nil: Close reads them,
// so New makes them before the first step that can fail, and Close frees
// what a failed New allocated and skips what it did not.
func (z *Optimizer) makeSlots() {
	nu := len(z.lay.Units)
	z.param = make([]*tensor.Tensor, nu)
	z.shard = make([]*tensor.Tensor, nu)
	z.full = make([]*tensor.Tensor, nu)
	z.gwork = make([]comm.Work, nu)
	z.gsrc = make([]func(), nu)
	z.master = make([]*tensor.Tensor, nu)
	z.copies = make([]*tensor.Tensor, nu)
	z.acc = make([]*tensor.Tensor, nu)
	z.gbuf = make([]*tensor.Tensor, nu)
	z.left = make([]int, nu)
	z.touched = make([]bool, nu)
	z.hostGrad = make([]*tensor.Tensor, nu)
	z.down = make([]backend.Copying, nu)
	z.upload = make([]*tensor.Tensor, nu)
}

// alloc allocates every unit's buffers into the slices makeSlots made.
func (z *Optimizer) alloc() error {
	half := z.cfg.ModelDType != tensor.Float32
	var err error
	for u, unit := range z.lay.Units {
		lo, n := z.own(u)
		var ownParam *tensor.Tensor
		if z.pstore != nil {
			z.stored += int64(n * z.cfg.ModelDType.Size()) // the store's memory: reported by Memory, not booked
		} else if z.cfg.Stage == 3 {
			if z.shard[u], err = z.acct.alloc(z.be, CatParams, z.cfg.ModelDType, n); err != nil {
				return err
			}
			ownParam = z.shard[u]
		} else {
			if z.param[u], err = z.acct.alloc(z.be, CatParams, z.cfg.ModelDType, unit.Numel); err != nil {
				return err
			}
			if ownParam, err = z.param[u].Slice(lo, n); err != nil {
				return err
			}
		}
		switch {
		case z.offloaded():
			if z.master[u], err = z.acct.alloc(z.cfg.HostOffload, CatMaster, z.cfg.MasterDType, n); err != nil {
				return err
			}
			if err := z.allocOffload(u, n, ownParam); err != nil {
				return err
			}
		case half || z.pstore != nil:
			if z.master[u], err = z.acct.alloc(z.be, CatMaster, z.cfg.MasterDType, n); err != nil {
				return err
			}
			z.copies[u] = ownParam // nil with a store: writeBack casts the master
		default:
			z.master[u] = ownParam
		}
		accN := n
		if z.cfg.Stage <= 1 {
			accN = unit.Numel
		}
		if z.acc[u], err = z.acct.alloc(z.be, CatGrads, z.cfg.AccumDType, accN); err != nil {
			return err
		}
	}
	z.data = make([][]*tensor.Tensor, len(z.mods))
	z.grad = make([][]*tensor.Tensor, len(z.mods))
	for m := range z.mods {
		z.data[m] = make([]*tensor.Tensor, len(z.mods[m].Params))
		z.grad[m] = make([]*tensor.Tensor, len(z.mods[m].Params))
		if z.cfg.Stage < 3 {
			if err := z.bind(m, z.data[m], z.param); err != nil {
				return err
			}
		}
		if z.direct {
			if err := z.bind(m, z.grad[m], z.acc); err != nil {
				return err
			}
		}
	}
	if z.cfg.Stage == 3 {
		z.unitOf = make([]int, len(z.mods))
		numel := make([]int64, len(z.mods))
		persist := make([]bool, len(z.mods))
		for m := range z.mods {
			z.unitOf[m] = -1
			if ws := z.lay.Where[m]; len(ws) > 0 {
				u := ws[0].Unit
				z.unitOf[m] = u
				numel[m] = int64(z.lay.Units[u].Used)
				persist[m] = z.mods[m].Persistent || numel[m] <= z.cfg.PersistenceThreshold
			}
		}
		z.coord = NewCoordinator(z.cfg.Coordinator, numel, persist)
	}
	return nil
}

// bind points views[p] of module m at its slot in bufs (nil buffers give
// nil views).
func (z *Optimizer) bind(m int, views []*tensor.Tensor, bufs []*tensor.Tensor) error {
	for p, w := range z.lay.Where[m] {
		buf := bufs[w.Unit]
		if buf == nil {
			views[p] = nil
			continue
		}
		s := z.lay.Units[w.Unit].Slots[w.Slot]
		v, err := buf.Slice(s.Offset, s.Numel)
		if err != nil {
			return err
		}
		if views[p], err = v.Reshape(z.mods[m].Params[p].Shape...); err != nil {
			return err
		}
	}
	return nil
}

// init fills the buffers from initial, broadcast from rank 0.
func (z *Optimizer) init(ctx context.Context, initial func(m, p int) *tensor.Tensor) error {
	for u, unit := range z.lay.Units {
		tmp, err := z.be.Empty(tensor.Float32, unit.Numel)
		if err != nil {
			return err
		}
		err = func() error {
			defer tmp.Free()
			for _, s := range unit.Slots {
				src := initial(s.Module, s.Param)
				name := z.mods[s.Module].Params[s.Param].Name
				if src == nil {
					return fmt.Errorf("zero: parameter %s has no initial value", name)
				}
				if src.Numel() != s.Numel {
					return fmt.Errorf("zero: parameter %s: initial value has %d elements, shape says %d", name, src.Numel(), s.Numel)
				}
				dst, err := tmp.Slice(s.Offset, s.Numel)
				if err != nil {
					return err
				}
				src, done, err := onDevice(z.be, src)
				if err != nil {
					return fmt.Errorf("zero: parameter %s: %w", name, err)
				}
				defer done()
				if src.DType() == tensor.Float32 {
					err = z.be.Pack(tmp, []int{s.Offset}, []*tensor.Tensor{src})
				} else {
					err = z.be.Cast([]*tensor.Tensor{dst}, []*tensor.Tensor{src})
				}
				if err != nil {
					return fmt.Errorf("zero: parameter %s: %w", name, err)
				}
			}
			if z.world > 1 {
				t0 := time.Now()
				if err := z.c.Broadcast(ctx, tmp, 0); err != nil {
					return fmt.Errorf("zero: broadcasting initial parameters: %w", err)
				}
				z.timers.Comm += time.Since(t0)
			}
			lo, n := z.own(u)
			own, err := tmp.Slice(lo, n)
			if err != nil {
				return err
			}
			switch {
			case z.offloaded():
				if err := z.castInto(z.master[u], own); err != nil {
					return err
				}
			case z.cfg.ModelDType != tensor.Float32 || z.pstore != nil:
				if err := z.be.Cast([]*tensor.Tensor{z.master[u]}, []*tensor.Tensor{own}); err != nil {
					return err
				}
			}
			if z.pstore != nil {
				return z.pstore.Write(ctx, u, func(dst *tensor.Tensor) error { return z.toHostDType(dst, own) })
			}
			if z.cfg.Stage == 3 {
				return z.be.Cast([]*tensor.Tensor{z.shard[u]}, []*tensor.Tensor{own})
			}
			return z.be.Cast([]*tensor.Tensor{z.param[u]}, []*tensor.Tensor{tmp})
		}()
		if err != nil {
			return err
		}
	}
	if z.cfg.Stage == 3 {
		return z.gatherPersistent(ctx)
	}
	return nil
}

// OnDemand is the number of stage-3 modules gathered before each use and
// released after (those with parameters that are neither model.Resident
// nor within stage3_param_persistence_threshold); 0 below stage 3.
func (z *Optimizer) OnDemand() int {
	if z.coord == nil {
		return 0
	}
	n := 0
	for m, u := range z.unitOf {
		if u >= 0 && !z.coord.persistent[m] {
			n++
		}
	}
	return n
}

// Layout is the unit plan.
func (z *Optimizer) Layout() *Layout { return z.lay }

// Data is the working-precision tensor of parameter p of module m, nil
// for stage 3 outside its module's gather.
func (z *Optimizer) Data(m, p int) *tensor.Tensor { return z.data[m][p] }

// Grad is where backward of module m accumulates parameter p's gradient;
// valid from PreBackward(m) to PostBackward(m) (always for stages 0-1
// without a separate accumulation dtype).
func (z *Optimizer) Grad(m, p int) *tensor.Tensor { return z.grad[m][p] }

// Timers returns the accumulated timings.
func (z *Optimizer) Timers() Timers { return z.timers }

// Stage3Stats returns the stage-3 coordinator counters (zero otherwise).
func (z *Optimizer) Stage3Stats() CoordinatorStats {
	if z.coord == nil {
		return CoordinatorStats{}
	}
	s := z.coord.Stats()
	if z.hpz != nil {
		s.SecondaryGathers, s.SecondaryNumel = z.hpz.n, z.hpz.numel
	}
	return s
}

// Trace returns the stage-3 recorded module order (nil otherwise).
func (z *Optimizer) Trace() []int {
	if z.coord == nil {
		return nil
	}
	return z.coord.Trace()
}
