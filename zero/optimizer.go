package zero

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	// CommDType is communication_data_type (default: ModelDType).
	CommDType tensor.DType
	// ReduceBucketSize is zero_optimization.reduce_bucket_size (elements).
	ReduceBucketSize int
	// OverlapComm is zero_optimization.overlap_comm: stage 2/3 bucket
	// reductions run while backward continues (up to two in flight).
	OverlapComm bool
	// PredivideFactor, PrescaleGradients and SumOp are
	// gradient_predivide_factor, prescale_gradients and
	// gradient_allreduce_op == "sum" (see ReduceScaling).
	PredivideFactor   float64
	PrescaleGradients bool
	SumOp             bool
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
}

// Timers accumulate where the Optimizer spent wall time.
type Timers struct {
	Comm      time.Duration // issuing and waiting for collectives
	Optimizer time.Duration // the fused optimizer step
	Reduce    time.Duration // bucket casts, scaling and accumulation
}

// Memory is the per-rank byte count by category.
type Memory struct {
	// Params are the resident model parameters by dtype: the full flat
	// buffer for stages 0-2, the owned shard for stage 3.
	Params map[tensor.DType]int64
	// Master is the fp32 master copy (0 when the model is fp32, whose
	// optimizer updates the parameters in place).
	Master int64
	// Grads are gradient buffers kept across micro-steps: full for stages
	// 0-1, the owned shard for stages 2-3.
	Grads int64
	// OptimizerState is the optimizer's moments (allocated at the first step).
	OptimizerState int64
	// Buckets is the gradient-bucket and communication staging memory
	// allocated now (in use or cached), BucketsPeak its peak.
	Buckets, BucketsPeak int64
	// Gathered is the stage-3 gathered-parameter memory now, GatheredPeak
	// its peak.
	Gathered, GatheredPeak int64
	// Peak is the peak of the sum of every category.
	Peak int64
}

// ParamBytes is the sum of Params.
func (m Memory) ParamBytes() int64 {
	var n int64
	for _, v := range m.Params {
		n += v
	}
	return n
}

// ModelStates is parameters + gradients + master weights + optimizer
// state: what the ZeRO paper's formulas count.
func (m Memory) ModelStates() int64 {
	return m.ParamBytes() + m.Grads + m.Master + m.OptimizerState
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

	timers Timers
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
	if cfg.Align <= 0 {
		cfg.Align = 2
	}
	if cfg.GroupName == "" {
		cfg.GroupName = "zero"
	}
	z := &Optimizer{cfg: cfg, c: c, be: be, base: base, mods: mods, world: c.Size(), rank: c.Rank(), acct: newAccountant()}
	pre, post := ReduceScaling(z.world, cfg.PredivideFactor, cfg.PrescaleGradients, cfg.SumOp)
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
	if err := z.alloc(); err != nil {
		z.Close()
		return nil, err
	}
	if err := z.init(ctx, initial); err != nil {
		z.Close()
		return nil, err
	}
	return z, nil
}

func (z *Optimizer) own(u int) (lo, n int) {
	U := z.lay.Units[u].Numel
	if z.cfg.Stage == 0 {
		return 0, U
	}
	return z.rank * U / z.world, U / z.world
}

func (z *Optimizer) alloc() error {
	nu := len(z.lay.Units)
	z.param = make([]*tensor.Tensor, nu)
	z.shard = make([]*tensor.Tensor, nu)
	z.full = make([]*tensor.Tensor, nu)
	z.gwork = make([]comm.Work, nu)
	z.master = make([]*tensor.Tensor, nu)
	z.copies = make([]*tensor.Tensor, nu)
	z.acc = make([]*tensor.Tensor, nu)
	z.gbuf = make([]*tensor.Tensor, nu)
	z.left = make([]int, nu)
	z.touched = make([]bool, nu)
	half := z.cfg.ModelDType != tensor.Float32
	var err error
	for u, unit := range z.lay.Units {
		lo, n := z.own(u)
		var ownParam *tensor.Tensor
		if z.cfg.Stage == 3 {
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
		if half {
			if z.master[u], err = z.acct.alloc(z.be, CatMaster, tensor.Float32, n); err != nil {
				return err
			}
			z.copies[u] = ownParam
		} else {
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
				name := z.mods[s.Module].Name + "." + z.mods[s.Module].Params[s.Param].Name
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
			if z.cfg.ModelDType != tensor.Float32 {
				if err := z.be.Cast([]*tensor.Tensor{z.master[u]}, []*tensor.Tensor{own}); err != nil {
					return err
				}
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
	return z.coord.Stats()
}

// Trace returns the stage-3 recorded module order (nil otherwise).
func (z *Optimizer) Trace() []int {
	if z.coord == nil {
		return nil
	}
	return z.coord.Trace()
}

// BeginMicroStep resets per-micro-step bookkeeping; call before forward.
func (z *Optimizer) BeginMicroStep(seq []int) {
	for u, unit := range z.lay.Units {
		z.left[u] = 0
		z.touched[u] = false
		for _, m := range unit.Modules {
			for _, s := range seq {
				if s == m {
					z.left[u]++
				}
			}
		}
	}
	if z.coord != nil {
		z.coord.ResetStep()
	}
}

func (z *Optimizer) fetch(ctx context.Context, m int) error {
	if z.coord == nil || z.unitOf[m] < 0 {
		return nil
	}
	a := z.coord.Fetch(m)
	if err := z.execute(ctx, a); err != nil {
		return err
	}
	u := z.unitOf[m]
	if w := z.gwork[u]; w != nil {
		t0 := time.Now()
		err := w.Wait(ctx)
		z.timers.Comm += time.Since(t0)
		z.gwork[u] = nil
		if err != nil {
			return fmt.Errorf("zero: stage 3: gathering module %q: %w", z.mods[m].Name, err)
		}
	}
	return z.bind(m, z.data[m], z.full)
}

func (z *Optimizer) execute(ctx context.Context, a Actions) error {
	for _, m := range a.Gather {
		u := z.unitOf[m]
		buf, err := z.gathered.get(z.cfg.ModelDType, z.lay.Units[u].Numel)
		if err != nil {
			return err
		}
		z.full[u] = buf
		t0 := time.Now()
		z.gwork[u] = z.c.AllGatherAsync(ctx, buf, z.shard[u])
		z.timers.Comm += time.Since(t0)
	}
	for _, m := range a.Release {
		u := z.unitOf[m]
		if w := z.gwork[u]; w != nil {
			if err := w.Wait(ctx); err != nil {
				return err
			}
			z.gwork[u] = nil
		}
		z.gathered.put(z.full[u])
		z.full[u] = nil
		for p := range z.data[m] {
			z.data[m][p] = nil
		}
	}
	return nil
}

// PreForward runs before module m's forward (stage 3: gathers it).
func (z *Optimizer) PreForward(ctx context.Context, m int) error { return z.fetch(ctx, m) }

// PostForward runs after module m's forward (stage 3: may release it).
func (z *Optimizer) PostForward(ctx context.Context, m int) error { return z.release(ctx, m) }

func (z *Optimizer) release(ctx context.Context, m int) error {
	if z.coord == nil || z.unitOf[m] < 0 {
		return nil
	}
	return z.execute(ctx, z.coord.Release(m))
}

// PreBackward runs before module m's backward: stage 3 gathers it, and
// gradient buffers of its units are made ready.
func (z *Optimizer) PreBackward(ctx context.Context, m int) error {
	if err := z.fetch(ctx, m); err != nil {
		return err
	}
	if z.direct {
		return nil
	}
	for _, u := range z.lay.UnitsOf(m) {
		if z.gbuf[u] == nil {
			if err := z.throttle(ctx); err != nil {
				return err
			}
			buf, err := z.buckets.get(z.cfg.ModelDType, z.lay.Units[u].Numel)
			if err != nil {
				return err
			}
			z.gbuf[u] = buf
			z.touched[u] = true
		}
	}
	return z.bind(m, z.grad[m], z.gbuf)
}

// throttle keeps at most two reductions in flight (DeepSpeed's two
// alternating IPG buffers).
func (z *Optimizer) throttle(ctx context.Context) error {
	for len(z.pending) >= 2 {
		if err := z.complete(ctx); err != nil {
			return err
		}
	}
	return nil
}

// PostBackward runs when module m's gradients are ready: every unit whose
// modules are all done is reduced (stages 2-3) or accumulated (stages 0-1
// with a separate accumulation dtype).
func (z *Optimizer) PostBackward(ctx context.Context, m int) error {
	if !z.direct {
		for _, u := range z.lay.UnitsOf(m) {
			z.left[u]--
			if z.left[u] == 0 {
				if err := z.unitReady(ctx, u); err != nil {
					return err
				}
			}
		}
		for p := range z.grad[m] {
			z.grad[m][p] = nil
		}
	}
	return z.release(ctx, m)
}

// unitReady hands a finished micro-step gradient buffer on.
func (z *Optimizer) unitReady(ctx context.Context, u int) error {
	buf := z.gbuf[u]
	if buf == nil {
		return nil
	}
	z.gbuf[u] = nil
	if z.cfg.Stage <= 1 {
		t0 := time.Now()
		defer func() { z.timers.Reduce += time.Since(t0) }()
		err := z.accumulate(z.acc[u], buf, 1)
		z.buckets.put(buf)
		return err
	}
	t0 := time.Now()
	cbuf := buf
	if z.cfg.CommDType != z.cfg.ModelDType {
		var err error
		if cbuf, err = z.buckets.get(z.cfg.CommDType, buf.Numel()); err != nil {
			return err
		}
		if err := z.be.Cast([]*tensor.Tensor{cbuf}, []*tensor.Tensor{buf}); err != nil {
			return err
		}
	}
	if z.pre != 1 {
		if err := z.be.Scale([]*tensor.Tensor{cbuf}, z.pre); err != nil {
			return err
		}
	}
	z.timers.Reduce += time.Since(t0)
	lo, n := z.own(u)
	dst, err := cbuf.Slice(lo, n)
	if err != nil {
		return err
	}
	t1 := time.Now()
	w := z.c.ReduceScatterAsync(ctx, dst, cbuf, comm.Sum)
	z.timers.Comm += time.Since(t1)
	z.pending = append(z.pending, pendingReduce{unit: u, work: w, buf: buf, c: cbuf})
	if !z.cfg.OverlapComm {
		return z.complete(ctx)
	}
	return nil
}

// complete waits for the oldest reduction and folds its chunk into the
// gradient shard.
func (z *Optimizer) complete(ctx context.Context) error {
	p := z.pending[0]
	z.pending = z.pending[1:]
	t0 := time.Now()
	err := p.work.Wait(ctx)
	z.timers.Comm += time.Since(t0)
	if err != nil {
		return fmt.Errorf("zero: reducing gradient bucket %d: %w", p.unit, err)
	}
	t1 := time.Now()
	defer func() { z.timers.Reduce += time.Since(t1) }()
	lo, n := z.own(p.unit)
	chunk, err := p.c.Slice(lo, n)
	if err != nil {
		return err
	}
	err = z.accumulate(z.acc[p.unit], chunk, z.post)
	if p.c != p.buf {
		z.buckets.put(p.c)
	}
	z.buckets.put(p.buf)
	return err
}

// accumulate does dst += alpha*src, casting src to dst's dtype first.
func (z *Optimizer) accumulate(dst, src *tensor.Tensor, alpha float32) error {
	if src.DType() == dst.DType() {
		return z.be.Axpy(alpha, []*tensor.Tensor{src}, []*tensor.Tensor{dst})
	}
	tmp, err := z.buckets.get(dst.DType(), src.Numel())
	if err != nil {
		return err
	}
	defer z.buckets.put(tmp)
	if err := z.be.Cast([]*tensor.Tensor{tmp}, []*tensor.Tensor{src}); err != nil {
		return err
	}
	return z.be.Axpy(alpha, []*tensor.Tensor{tmp}, []*tensor.Tensor{dst})
}

// EndBackward flushes units not yet reduced (modules that did not run) and
// waits for every reduction in flight.
func (z *Optimizer) EndBackward(ctx context.Context) error {
	for u := range z.lay.Units {
		if z.touched[u] && z.gbuf[u] != nil {
			if err := z.unitReady(ctx, u); err != nil {
				return err
			}
		}
	}
	for len(z.pending) > 0 {
		if err := z.complete(ctx); err != nil {
			return err
		}
	}
	return nil
}

// reduceBoundary reduces the accumulated full gradients of stages 0-1.
func (z *Optimizer) reduceBoundary(ctx context.Context) error {
	if z.cfg.Stage > 1 || z.world == 1 {
		return nil
	}
	for u := range z.lay.Units {
		acc := z.acc[u]
		c := acc
		if z.cfg.CommDType != z.cfg.AccumDType {
			var err error
			if c, err = z.buckets.get(z.cfg.CommDType, acc.Numel()); err != nil {
				return err
			}
			if err := z.be.Cast([]*tensor.Tensor{c}, []*tensor.Tensor{acc}); err != nil {
				return err
			}
		}
		if z.pre != 1 {
			if err := z.be.Scale([]*tensor.Tensor{c}, z.pre); err != nil {
				return err
			}
		}
		lo, n := z.own(u)
		cOwn, err := c.Slice(lo, n)
		if err != nil {
			return err
		}
		t0 := time.Now()
		if z.cfg.Stage == 0 {
			err = z.c.AllReduce(ctx, c, comm.Sum)
		} else {
			err = z.c.ReduceScatter(ctx, cOwn, c, comm.Sum)
		}
		z.timers.Comm += time.Since(t0)
		if err != nil {
			return fmt.Errorf("zero: reducing gradient bucket %d: %w", u, err)
		}
		aOwn, err := acc.Slice(lo, n)
		if err != nil {
			return err
		}
		if c != acc {
			err = z.be.Cast([]*tensor.Tensor{aOwn}, []*tensor.Tensor{cOwn})
			z.buckets.put(c)
			if err != nil {
				return err
			}
		}
		if z.post != 1 {
			if err := z.be.Scale([]*tensor.Tensor{aOwn}, z.post); err != nil {
				return err
			}
		}
	}
	return nil
}

// grads lists this rank's reduced gradient ranges.
func (z *Optimizer) grads() ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(z.lay.Units))
	for u := range z.lay.Units {
		if z.cfg.Stage >= 2 {
			out[u] = z.acc[u]
			continue
		}
		lo, n := z.own(u)
		g, err := z.acc[u].Slice(lo, n)
		if err != nil {
			return nil, err
		}
		out[u] = g
	}
	return out, nil
}

// Overflow reduces the accumulated gradients where that happens at the
// boundary (stages 0-1), then reports whether any rank's gradients hold
// inf or nan (false when Config.CheckOverflow is off).
func (z *Optimizer) Overflow(ctx context.Context) (bool, error) {
	if err := z.reduceBoundary(ctx); err != nil {
		return false, err
	}
	if !z.cfg.CheckOverflow {
		return false, nil
	}
	g, err := z.grads()
	if err != nil {
		return false, err
	}
	bad, err := z.be.NonFinite(g)
	if err != nil {
		return false, err
	}
	if z.world == 1 || z.cfg.Stage == 0 { // stage 0: all-reduced grads are identical on every rank
		return bad, nil
	}
	flag, err := z.be.Empty(tensor.Int32, 1)
	if err != nil {
		return false, err
	}
	defer flag.Free()
	v, _ := flag.Int32s()
	if bad {
		v[0] = 1
	}
	t0 := time.Now()
	err = z.c.AllReduce(ctx, flag, comm.Max)
	z.timers.Comm += time.Since(t0)
	if err != nil {
		return false, fmt.Errorf("zero: agreeing on overflow: %w", err)
	}
	return v[0] != 0, nil
}

// GlobalNorm is the L2 norm of the (still loss-scaled) reduced gradients
// over all ranks, summed in float64 in rank order.
func (z *Optimizer) GlobalNorm(ctx context.Context) (float64, error) {
	g, err := z.grads()
	if err != nil {
		return 0, err
	}
	ss, err := z.be.SumSquares(g, nil)
	if err != nil {
		return 0, err
	}
	if z.world == 1 || z.cfg.Stage == 0 {
		return math.Sqrt(ss), nil
	}
	src, err := z.be.Empty(tensor.Float64, 1)
	if err != nil {
		return 0, err
	}
	defer src.Free()
	all, err := z.be.Empty(tensor.Float64, z.world)
	if err != nil {
		return 0, err
	}
	defer all.Free()
	s, _ := src.Float64s()
	s[0] = ss
	t0 := time.Now()
	err = z.c.AllGather(ctx, all, src)
	z.timers.Comm += time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("zero: global gradient norm: %w", err)
	}
	a, _ := all.Float64s()
	var sum float64
	for _, x := range a {
		sum += x
	}
	return math.Sqrt(sum), nil
}

// Step applies the base optimizer to this rank's shard with learning
// rate lr, dividing the gradients by gradScale (optim.CombinedScale of the
// loss scale and the clip), then all-gathers the updated parameters
// (stages 1-2) or re-gathers persistent ones (stage 3), and zeroes the
// gradients.
func (z *Optimizer) Step(ctx context.Context, lr, gradScale float64) error {
	g, err := z.grads()
	if err != nil {
		return err
	}
	grp := optim.ParamGroup{Name: z.cfg.GroupName, Params: z.master, Grads: g}
	if z.cfg.ModelDType != tensor.Float32 {
		grp.Copies = z.copies
	}
	t0 := time.Now()
	err = z.base.Step(grp, lr, gradScale)
	z.timers.Optimizer += time.Since(t0)
	if err != nil {
		return fmt.Errorf("zero: optimizer step: %w", err)
	}
	if err := z.ZeroGrad(); err != nil {
		return err
	}
	switch z.cfg.Stage {
	case 1, 2:
		for u := range z.lay.Units {
			lo, n := z.own(u)
			own, err := z.param[u].Slice(lo, n)
			if err != nil {
				return err
			}
			t0 := time.Now()
			err = z.c.AllGather(ctx, z.param[u], own)
			z.timers.Comm += time.Since(t0)
			if err != nil {
				return fmt.Errorf("zero: gathering updated parameters of bucket %d: %w", u, err)
			}
		}
	case 3:
		if err := z.execute(ctx, z.coord.ReleaseAll()); err != nil {
			return err
		}
		return z.gatherPersistent(ctx)
	}
	return nil
}

// gatherPersistent (re)gathers the stage-3 persistent modules.
func (z *Optimizer) gatherPersistent(ctx context.Context) error {
	for m, u := range z.unitOf {
		if u < 0 || !z.coord.persistent[m] {
			continue
		}
		if z.full[u] == nil {
			buf, err := z.gathered.get(z.cfg.ModelDType, z.lay.Units[u].Numel)
			if err != nil {
				return err
			}
			z.full[u] = buf
		}
		t0 := time.Now()
		err := z.c.AllGather(ctx, z.full[u], z.shard[u])
		z.timers.Comm += time.Since(t0)
		if err != nil {
			return fmt.Errorf("zero: stage 3: gathering persistent module %q: %w", z.mods[m].Name, err)
		}
		if err := z.bind(m, z.data[m], z.full); err != nil {
			return err
		}
	}
	return nil
}

// ZeroGrad clears the accumulated gradients (after a step or a skipped one).
func (z *Optimizer) ZeroGrad() error {
	return zeroFill(z.acc...)
}

// Memory reports this rank's bytes by category.
func (z *Optimizer) Memory() Memory {
	a := z.acct
	a.mu.Lock()
	defer a.mu.Unlock()
	m := Memory{Params: map[tensor.DType]int64{}, Master: a.cur[CatMaster], Grads: a.cur[CatGrads],
		Buckets: a.cur[CatBuckets], BucketsPeak: a.peak[CatBuckets],
		Gathered: a.cur[CatGathered], GatheredPeak: a.peak[CatGathered]}
	for k, v := range a.params {
		if v != 0 {
			m.Params[k] = v
		}
	}
	for _, ts := range z.base.State(z.cfg.GroupName) {
		for _, t := range ts {
			m.OptimizerState += int64(t.Bytes())
		}
	}
	m.Peak = a.totalMax + m.OptimizerState
	return m
}

// Close frees every buffer. The base optimizer is not closed.
func (z *Optimizer) Close() error {
	var errs []error
	for _, w := range z.gwork {
		if w != nil {
			errs = append(errs, w.Wait(context.Background()))
		}
	}
	for _, p := range z.pending {
		errs = append(errs, p.work.Wait(context.Background()))
	}
	z.pending = nil
	for u := range z.lay.Units {
		z.acct.free(CatParams, z.param[u])
		z.acct.free(CatParams, z.shard[u])
		z.acct.free(CatGathered, z.full[u])
		if z.cfg.ModelDType != tensor.Float32 {
			z.acct.free(CatMaster, z.master[u])
		}
		z.acct.free(CatGrads, z.acc[u])
		z.acct.free(CatBuckets, z.gbuf[u])
	}
	z.buckets.close()
	z.gathered.close()
	return errors.Join(errs...)
}

// GatherMaster returns the full fp32 master weights (the parameters
// themselves for fp32 models) of every parameter, as out[m][p]: a
// collective, every rank must call it (zero_to_fp32's consolidation).
func (z *Optimizer) GatherMaster(ctx context.Context) ([][][]float32, error) {
	out := make([][][]float32, len(z.mods))
	for m := range z.mods {
		out[m] = make([][]float32, len(z.mods[m].Params))
	}
	for u, unit := range z.lay.Units {
		full := z.master[u]
		if z.cfg.Stage > 0 {
			tmp, err := z.be.Empty(tensor.Float32, unit.Numel)
			if err != nil {
				return nil, err
			}
			defer tmp.Free()
			if err := z.c.AllGather(ctx, tmp, z.master[u]); err != nil {
				return nil, fmt.Errorf("zero: gathering master weights: %w", err)
			}
			full = tmp
		}
		v, err := full.Float32s()
		if err != nil {
			return nil, err
		}
		for _, s := range unit.Slots {
			out[s.Module][s.Param] = append([]float32(nil), v[s.Offset:s.Offset+s.Numel]...)
		}
	}
	return out, nil
}

// Checkpoint access. The methods below read and restore the state a
// checkpoint holds; they are called between optimizer steps only.

// Own returns this rank's owned range of unit u, elements [lo, lo+n) of
// the padded unit: the whole unit for stage 0, chunk Rank of World for
// stages 1-3.
func (z *Optimizer) Own(u int) (lo, n int) { return z.own(u) }

// Master is this rank's fp32 master chunk of unit u (Own(u) elements; for
// float32 models the parameters' owned range itself). Callers must not
// write it; RestoreMaster does.
func (z *Optimizer) Master(u int) *tensor.Tensor { return z.master[u] }

// Config is the resolved configuration the Optimizer runs with (Align and
// GroupName filled in).
func (z *Optimizer) Config() Config { return z.cfg }

// Base is the optimizer that steps this rank's shard.
func (z *Optimizer) Base() optim.Optimizer { return z.base }

// OptimizerState returns the base optimizer's state of this rank's shard,
// by state name one float32 tensor per unit aligned with Master (nil
// before the first step), and the group's step count.
func (z *Optimizer) OptimizerState() (map[string][]*tensor.Tensor, int64) {
	return z.base.State(z.cfg.GroupName), z.base.Steps(z.cfg.GroupName)
}

// ReplicatedParams lists the working-precision parameters that are
// identical on every rank, as (module, param) pairs with their tensors:
// every parameter for stages 0-2, the gathered (persistent) ones for
// stage 3 between steps.
func (z *Optimizer) ReplicatedParams() (idx [][2]int, ts []*tensor.Tensor) {
	for m := range z.mods {
		for p := range z.mods[m].Params {
			if t := z.data[m][p]; t != nil {
				idx = append(idx, [2]int{m, p})
				ts = append(ts, t)
			}
		}
	}
	return idx, ts
}

// RestoreMaster overwrites this rank's fp32 master chunks with masters
// (per unit one float32 tensor of Own(u) elements, in memory the backend
// reads), re-casts them to the working-precision parameters, discards
// accumulated gradients, and re-gathers the replicated parameters
// (stages 1-2: every unit; stage 3: the persistent modules). It is a
// collective. The arguments are checked before anything is written; a
// failure of the re-gather itself leaves the parameters partly restored.
func (z *Optimizer) RestoreMaster(ctx context.Context, masters []*tensor.Tensor) error {
	if len(masters) != len(z.lay.Units) {
		return fmt.Errorf("zero: restore: %d master chunks for %d units", len(masters), len(z.lay.Units))
	}
	for u, t := range masters {
		if _, n := z.own(u); t == nil || t.DType() != tensor.Float32 || t.Numel() != n || !t.Contiguous() {
			return fmt.Errorf("zero: restore: unit %d: master chunk %v, want %d contiguous float32 elements", u, t, n)
		}
	}
	if len(z.pending) > 0 {
		return errors.New("zero: restore: gradient reductions are in flight (restore between steps only)")
	}
	for u := range z.lay.Units {
		if err := z.be.Pack(z.master[u], []int{0}, []*tensor.Tensor{masters[u]}); err != nil {
			return fmt.Errorf("zero: restore: unit %d: %w", u, err)
		}
		if z.cfg.ModelDType != tensor.Float32 {
			if err := z.be.Cast([]*tensor.Tensor{z.copies[u]}, []*tensor.Tensor{z.master[u]}); err != nil {
				return fmt.Errorf("zero: restore: unit %d: %w", u, err)
			}
		}
	}
	if err := z.ZeroGrad(); err != nil {
		return err
	}
	switch z.cfg.Stage {
	case 1, 2:
		for u := range z.lay.Units {
			lo, n := z.own(u)
			own, err := z.param[u].Slice(lo, n)
			if err != nil {
				return err
			}
			if err := z.c.AllGather(ctx, z.param[u], own); err != nil {
				return fmt.Errorf("zero: restore: gathering bucket %d: %w", u, err)
			}
		}
	case 3:
		if err := z.execute(ctx, z.coord.ReleaseAll()); err != nil {
			return err
		}
		return z.gatherPersistent(ctx)
	}
	return nil
}

// RestoreOptimizerState replaces the base optimizer's state of this
// rank's shard with state (by state name one float32 host tensor per
// unit of Own(u) elements; nil resets it to zero) and its step count with
// steps (see optim.LoadState).
func (z *Optimizer) RestoreOptimizerState(state map[string][]*tensor.Tensor, steps int64) error {
	if err := optim.LoadState(z.base, z.cfg.GroupName, z.master, state, steps); err != nil {
		return fmt.Errorf("zero: restore: %w", err)
	}
	return nil
}
