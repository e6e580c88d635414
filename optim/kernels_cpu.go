package optim

import (
	"fmt"
	"unsafe"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
)

// CPUKernels runs the fused steps on the C core's SIMD loops and thread
// pool. Safe for concurrent use.
type CPUKernels struct {
	b   CPUPool
	ctx *csrc.Ctx
}

// CPUPool is what the C core's optimizer kernels need of a backend: its C
// context (threads, ISA), the device its tensors live on, and its executor
// (backend.CPU and its views on a simulated device have them).
type CPUPool interface {
	Ctx() *csrc.Ctx
	Device() tensor.Device
	Exec(op string, wait bool, f func() error) error
}

var _ Kernels = (*CPUKernels)(nil)

// NewCPUKernels runs on b's context (its threads and ISA choice). On a
// view of b (backend.CPU.On, a simulated device) the tensors must be on
// the view's device and the C calls run through its Executor, in order
// with its other kernels.
func NewCPUKernels(b CPUPool) *CPUKernels { return &CPUKernels{b: b, ctx: b.Ctx()} }

// device is where the tensors must be: the host, or a view's device.
func (c *CPUKernels) device() tensor.Device {
	if c.b == nil {
		return tensor.CPU
	}
	return c.b.Device()
}

// exec runs a C call as the backend runs its own (at once on the host).
func (c *CPUKernels) exec(op string, wait bool, f func() error) error {
	if c.b == nil {
		return f()
	}
	return c.b.Exec(op, wait, f)
}

// hostList checks that every tensor is a live, contiguous tensor on dev and
// returns the pointers. Optimizer state must match params in size too.
func hostList(name string, ts []*tensor.Tensor, ns []int64, dev tensor.Device) ([]unsafe.Pointer, error) {
	if ts == nil {
		return nil, nil
	}
	if len(ts) != len(ns) {
		return nil, fmt.Errorf("%s has %d entries, params has %d", name, len(ts), len(ns))
	}
	ps := make([]unsafe.Pointer, len(ts))
	for i, t := range ts {
		switch {
		case t == nil:
			return nil, fmt.Errorf("%s[%d] is nil", name, i)
		case t.Device() != dev && dev.IsCPU():
			return nil, fmt.Errorf("%s[%d] %v is not on the host", name, i, t)
		case t.Device() != dev:
			return nil, fmt.Errorf("%s[%d] %v is not on %v", name, i, t, dev)
		case !t.Contiguous():
			return nil, fmt.Errorf("%s[%d] %v is not contiguous", name, i, t)
		case t.Storage().Freed():
			return nil, fmt.Errorf("%s[%d] %v: storage already freed", name, i, t)
		case int64(t.Numel()) != ns[i]:
			return nil, fmt.Errorf("%s[%d] %v has %d elements, params[%d] has %d", name, i, t, t.Numel(), i, ns[i])
		}
		ps[i] = t.Ptr()
	}
	return ps, nil
}

func firstDT(ts []*tensor.Tensor, def tensor.DType) csrc.DType {
	if len(ts) > 0 {
		return csrc.DType(ts[0].DType())
	}
	return csrc.DType(def)
}

var cKinds = map[Kind]csrc.OptimKind{KindAdam: csrc.OptimAdam, KindSGD: csrc.OptimSGD, KindLamb: csrc.OptimLamb, KindLion: csrc.OptimLion}

// Step implements Kernels.
func (c *CPUKernels) Step(a *StepArgs) error {
	g := &a.Group
	op := fmt.Sprintf("optim.Step(group %q)", g.Name)
	ns := make([]int64, len(g.Params))
	for i, p := range g.Params {
		ns[i] = int64(p.Numel())
	}
	l := &csrc.OptimLists{
		NS:         ns,
		ParamDType: firstDT(g.Params, tensor.Float32),
		GradDType:  firstDT(g.Grads, tensor.Float32),
		CopyDType:  firstDT(g.Copies, tensor.BFloat16),
	}
	var err error
	for _, x := range []struct {
		name string
		ts   []*tensor.Tensor
		dst  *[]unsafe.Pointer
	}{{"params", g.Params, &l.Params}, {"grads", g.Grads, &l.Grads}, {"copies", g.Copies, &l.Copies},
		{"exp_avg", a.ExpAvg, &l.ExpAvg}, {"exp_avg_sq", a.ExpAvgSq, &l.ExpAvgSq}} {
		if *x.dst, err = hostList(x.name, x.ts, ns, c.device()); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	if a.BF16Master && len(a.ExpAvg) > 0 {
		l.StateDType = csrc.DType(a.ExpAvg[0].DType())
		for i := range a.ExpAvg {
			if a.ExpAvg[i].DType() != a.ExpAvg[0].DType() || a.ExpAvgSq[i].DType() != a.ExpAvg[0].DType() {
				return fmt.Errorf("%s: optimizer state %d: exp_avg %v, exp_avg_sq %v, want %v", op, i, a.ExpAvg[i].DType(), a.ExpAvgSq[i].DType(), a.ExpAvg[0].DType())
			}
		}
	}
	if l.Params == nil { // a group of no tensors still has non-nil lists
		l.Params, l.Grads = []unsafe.Pointer{}, []unsafe.Pointer{}
	}
	h := a.Hyper
	hp := &csrc.OptimHParams{
		Kind: cKinds[a.Kind], Step: a.Step, LR: h.LR, Beta1: h.Beta1, Beta2: h.Beta2, Eps: h.Eps,
		WeightDecay: h.WeightDecay, AdamWMode: h.AdamWMode, BiasCorrection: h.BiasCorrection,
		Momentum: h.Momentum, Dampening: h.Dampening, Nesterov: h.Nesterov,
		MaxCoeff: h.MaxCoeff, MinCoeff: h.MinCoeff, GradScale: a.GradScale, BF16Master: a.BF16Master,
	}
	trust := a.Trust // a Lamb step reports its trust ratios: wait for them
	if err := c.exec(op, trust != nil, func() error { return c.ctx.OptimStep(hp, l, trust) }); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// StepsBF16Master implements BF16MasterKernels.
func (c *CPUKernels) StepsBF16Master() bool { return true }

// UnscaleCheck implements Kernels.
func (c *CPUKernels) UnscaleCheck(xs []*tensor.Tensor, scale float64) (bool, error) {
	const op = "optim.UnscaleCheck"
	if !(scale > 0) {
		return false, fmt.Errorf("%s: scale %v: must be > 0", op, scale)
	}
	ns := make([]int64, len(xs))
	for i, x := range xs {
		if x == nil {
			return false, fmt.Errorf("%s: xs[%d] is nil", op, i)
		}
		ns[i] = int64(x.Numel())
	}
	if err := sameDType(op, "xs", xs, tensor.Float32, tensor.Float16, tensor.BFloat16); err != nil {
		return false, err
	}
	ps, err := hostList("xs", xs, ns, c.device())
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	var found bool
	err = c.exec(op, true, func() (err error) {
		found, err = c.ctx.UnscaleCheck(firstDT(xs, tensor.Float32), ps, ns, float32(1/scale))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	return found, nil
}
