//go:build cuda

package cuda

/*
#include "deepgo_cuda.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// OptimKernels runs optim's fused steps on a Backend's device and stream
// (optim.WithKernels): the CPU kernels' element math, checks and result
// bits, Lamb's trust ratios included, and the bf16-master Adam step
// (StepArgs.BF16Master, moments float32 or bfloat16). Params, grads,
// copies and state must all live on the backend's device. Step returns
// once the work is queued, except for Lamb, whose trust ratios it copies
// back (a wait); UnscaleCheck waits for its answer. Safe for concurrent
// use (the Backend's mutex).
type OptimKernels struct {
	b *Backend
}

var _ optim.BF16MasterKernels = (*OptimKernels)(nil)

// StepsBF16Master implements optim.BF16MasterKernels: StepArgs.BF16Master
// steps run dg_cuda_adam_bf16_step, csrc/optim_bf16.c's twin (same bits).
func (k *OptimKernels) StepsBF16Master() bool { return true }

// NewOptimKernels runs the steps on b.
func NewOptimKernels(b *Backend) (*OptimKernels, error) {
	if b == nil {
		return nil, &Error{Op: "NewOptimKernels", Msg: "backend is nil"}
	}
	return &OptimKernels{b: b}, nil
}

var cKinds = map[optim.Kind]C.dg_optim_kind{optim.KindAdam: C.DG_OPTIM_ADAM, optim.KindSGD: C.DG_OPTIM_SGD,
	optim.KindLamb: C.DG_OPTIM_LAMB, optim.KindLion: C.DG_OPTIM_LION}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// optList is list for an optional list (nil stays nil) of n-element tensors.
func optList(op, name string, ts []*tensor.Tensor, ns []int64, dev tensor.Device, dt tensor.DType) ([]unsafe.Pointer, error) {
	if ts == nil {
		return nil, nil
	}
	if err := sameLens(op, "params", name, len(ns), len(ts)); err != nil {
		return nil, err
	}
	p, n, err := list(op, name, ts, dev, dt)
	if err == nil {
		err = sameCounts(op, name, ns, n)
	}
	return p, err
}

// Step implements optim.Kernels.
func (k *OptimKernels) Step(a *optim.StepArgs) error {
	g := &a.Group
	op := fmt.Sprintf("cuda.OptimKernels.Step(group %q)", g.Name)
	kind, ok := cKinds[a.Kind]
	if !ok {
		return argErr(op, "Kind", "%v: unknown optimizer kind", a.Kind)
	}
	dev := k.b.Device()
	pt, gt, ct := firstDType(g.Params), firstDType(g.Grads), firstDType(g.Copies)
	st := tensor.Float32 // the moments: float32, or (BF16Master) float32 or bfloat16
	if a.BF16Master {
		st = firstDType(a.ExpAvg)
	}
	pp, ns, err := list(op, "params", g.Params, dev, pt)
	if err != nil {
		return err
	}
	if err := sameLens(op, "params", "grads", len(ns), len(g.Grads)); err != nil {
		return err
	}
	gp, err := optList(op, "grads", g.Grads, ns, dev, gt)
	if err != nil {
		return err
	}
	lists := [][]unsafe.Pointer{pp, gp}
	for _, x := range []struct {
		name string
		ts   []*tensor.Tensor
		dt   tensor.DType
	}{{"copies", g.Copies, ct}, {"exp_avg", a.ExpAvg, st}, {"exp_avg_sq", a.ExpAvgSq, st}} {
		p, err := optList(op, x.name, x.ts, ns, dev, x.dt)
		if err != nil {
			return err
		}
		lists = append(lists, p)
	}
	if a.Trust != nil {
		if err := sameLens(op, "params", "Trust", len(ns), len(a.Trust)); err != nil {
			return err
		}
	}
	h := a.Hyper
	hp := C.dg_optim_hparams{
		kind: kind, step: C.int64_t(a.Step), lr: C.double(h.LR), beta1: C.double(h.Beta1), beta2: C.double(h.Beta2),
		eps: C.double(h.Eps), weight_decay: C.double(h.WeightDecay), adam_w_mode: cbool(h.AdamWMode),
		bias_correction: cbool(h.BiasCorrection), momentum: C.double(h.Momentum), dampening: C.double(h.Dampening),
		nesterov: cbool(h.Nesterov), max_coeff: C.double(h.MaxCoeff), min_coeff: C.double(h.MinCoeff),
		grad_scale: C.double(a.GradScale),
	}
	// The lists struct is Go memory pointing at Go slices: cgo allows that
	// only while those slices are pinned.
	var pin runtime.Pinner
	defer pin.Unpin()
	arr := func(s []unsafe.Pointer) unsafe.Pointer {
		if len(s) == 0 {
			return nil
		}
		pin.Pin(&s[0])
		return unsafe.Pointer(&s[0])
	}
	cl := C.dg_optim_lists{count: C.int(len(ns)), param_dtype: cdt(pt), grad_dtype: cdt(gt), copy_dtype: cdt(ct)}
	if len(ns) > 0 {
		pin.Pin(&ns[0])
		cl.ns = i64List(ns)
	}
	cl.params = (*unsafe.Pointer)(arr(lists[0]))
	cl.grads = (*unsafe.Pointer)(arr(lists[1]))
	cl.copies = (*unsafe.Pointer)(arr(lists[2]))
	cl.exp_avg = (**C.float)(arr(lists[3]))
	cl.exp_avg_sq = (**C.float)(arr(lists[4]))

	k.b.mu.Lock()
	defer k.b.mu.Unlock()
	if k.b.ctx == nil {
		return &Error{Op: op, Msg: "backend is closed"}
	}
	var trust unsafe.Pointer
	if len(a.Trust) > 0 && kind == C.DG_OPTIM_LAMB {
		if trust, err = k.b.results(len(a.Trust)); err != nil {
			return err
		}
	}
	if a.BF16Master {
		return k.b.err("dg_cuda_adam_bf16_step", C.dg_cuda_adam_bf16_step(k.b.ctx, &hp, &cl, cdt(st)))
	}
	if err := k.b.err("dg_cuda_optim_step", C.dg_cuda_optim_step(k.b.ctx, &hp, &cl, (*C.double)(trust))); err != nil {
		return err
	}
	if trust != nil {
		return k.b.fetch(op, unsafe.Pointer(&a.Trust[0]), trust, 8*len(a.Trust))
	}
	return nil
}

// UnscaleCheck implements optim.Kernels.
func (k *OptimKernels) UnscaleCheck(xs []*tensor.Tensor, scale float64) (bool, error) {
	const op = "cuda.OptimKernels.UnscaleCheck"
	if !(scale > 0) {
		return false, argErr(op, "scale", "%v: must be > 0", scale)
	}
	t, p, n, err := floatList(op, "xs", xs, k.b.Device())
	if err != nil {
		return false, err
	}
	k.b.mu.Lock()
	defer k.b.mu.Unlock()
	if k.b.ctx == nil {
		return false, &Error{Op: op, Msg: "backend is closed"}
	}
	res, err := k.b.results(1)
	if err != nil {
		return false, err
	}
	s := C.dg_cuda_unscale_check(k.b.ctx, cdt(t), ptrList(p), i64List(n), C.int(len(n)), C.float(float32(1/scale)), (*C.int)(res))
	if err := k.b.err("dg_cuda_unscale_check", s); err != nil {
		return false, err
	}
	var found int32
	if err := k.b.fetch(op, unsafe.Pointer(&found), res, 4); err != nil {
		return false, err
	}
	return found != 0, nil
}
