package csrc

/*
#cgo nocallback dg_optim_step
#cgo nocallback dg_unscale_check
#cgo noescape dg_unscale_check
#cgo nocallback dg_adamw_naive_ref
#cgo noescape dg_adamw_naive_ref
#include "deepgo.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// OptimKind is a dg_optim_kind value.
type OptimKind int

// Optimizer kinds, equal to deepgo.h's dg_optim_kind values.
const (
	OptimAdam OptimKind = C.DG_OPTIM_ADAM
	OptimSGD  OptimKind = C.DG_OPTIM_SGD
	OptimLamb OptimKind = C.DG_OPTIM_LAMB
	OptimLion OptimKind = C.DG_OPTIM_LION
)

// OptimHParams mirrors dg_optim_hparams: one step's hyperparameters.
type OptimHParams struct {
	Kind           OptimKind
	Step           int64 // 1-based index of this update
	LR             float64
	Beta1, Beta2   float64
	Eps            float64
	WeightDecay    float64
	AdamWMode      bool
	BiasCorrection bool
	Momentum       float64
	Dampening      float64
	Nesterov       bool
	MaxCoeff       float64
	MinCoeff       float64
	GradScale      float64 // grads are multiplied by 1/GradScale
	// BF16Master runs dg_adam_bf16_step instead of dg_optim_step: Adam on
	// bfloat16 params and grads with DeepSpeedCPUAdam's arithmetic, the
	// moments in OptimLists.StateDType.
	BF16Master bool
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func (h *OptimHParams) c() C.dg_optim_hparams {
	return C.dg_optim_hparams{
		kind: C.dg_optim_kind(h.Kind), step: C.int64_t(h.Step), lr: C.double(h.LR),
		beta1: C.double(h.Beta1), beta2: C.double(h.Beta2), eps: C.double(h.Eps),
		weight_decay: C.double(h.WeightDecay), adam_w_mode: cbool(h.AdamWMode),
		bias_correction: cbool(h.BiasCorrection), momentum: C.double(h.Momentum),
		dampening: C.double(h.Dampening), nesterov: cbool(h.Nesterov),
		max_coeff: C.double(h.MaxCoeff), min_coeff: C.double(h.MinCoeff), grad_scale: C.double(h.GradScale),
	}
}

// OptimLists mirrors dg_optim_lists: entry i of every non-nil list has NS[i]
// elements. ExpAvg may be nil for SGD without momentum, ExpAvgSq for SGD and
// Lion, Copies when no 16-bit copy is wanted.
type OptimLists struct {
	NS         []int64
	ParamDType DType
	Params     []unsafe.Pointer
	GradDType  DType
	Grads      []unsafe.Pointer
	ExpAvg     []unsafe.Pointer // float32, or StateDType with BF16Master
	ExpAvgSq   []unsafe.Pointer // float32, or StateDType with BF16Master
	StateDType DType            // BF16Master only: Float32 or BFloat16 moments
	CopyDType  DType
	Copies     []unsafe.Pointer
}

func optLen(op string, l []unsafe.Pointer, n int) error {
	if l == nil {
		return nil
	}
	return sameLen(op, len(l), n)
}

// OptimStep runs dg_optim_step. For Lamb, trust (nil, or one entry per
// tensor) receives each tensor's trust ratio.
func (x *Ctx) OptimStep(hp *OptimHParams, l *OptimLists, trust []float64) error {
	const op = "dg_optim_step"
	n := len(l.NS)
	if err := sameLen(op, len(l.Params), n); err != nil {
		return err
	}
	if err := sameLen(op, len(l.Grads), n); err != nil {
		return err
	}
	for _, s := range [][]unsafe.Pointer{l.ExpAvg, l.ExpAvgSq, l.Copies} {
		if err := optLen(op, s, n); err != nil {
			return err
		}
	}
	if trust != nil {
		if err := sameLen(op, len(trust), n); err != nil {
			return err
		}
	}
	// The lists struct is Go memory pointing at Go slices: cgo allows that
	// only when those slices are pinned for the call.
	var pin runtime.Pinner
	defer pin.Unpin()
	arr := func(s []unsafe.Pointer) unsafe.Pointer {
		if len(s) == 0 {
			return nil
		}
		pin.Pin(&s[0])
		return unsafe.Pointer(&s[0])
	}
	cl := C.dg_optim_lists{
		count:       C.int(n),
		param_dtype: C.dg_dtype(l.ParamDType),
		grad_dtype:  C.dg_dtype(l.GradDType),
		copy_dtype:  C.dg_dtype(l.CopyDType),
	}
	if n > 0 {
		pin.Pin(&l.NS[0])
		cl.ns = i64s(l.NS)
	}
	cl.params = (*unsafe.Pointer)(arr(l.Params))
	cl.grads = (*unsafe.Pointer)(arr(l.Grads))
	cl.exp_avg = (**C.float)(arr(l.ExpAvg))
	cl.exp_avg_sq = (**C.float)(arr(l.ExpAvgSq))
	cl.copies = (*unsafe.Pointer)(arr(l.Copies))
	var tp *C.double
	if len(trust) > 0 {
		tp = (*C.double)(unsafe.Pointer(&trust[0]))
	}
	ch := hp.c()
	if hp.BF16Master {
		return check("dg_adam_bf16_step", C.dg_adam_bf16_step(x.c, &ch, &cl, C.dg_dtype(l.StateDType)))
	}
	return check(op, C.dg_optim_step(x.c, &ch, &cl, tp))
}

// UnscaleCheck multiplies each xs[i] in place by invScale and reports
// whether any result is Inf or NaN (dg_unscale_check).
func (x *Ctx) UnscaleCheck(t DType, xs []unsafe.Pointer, ns []int64, invScale float32) (bool, error) {
	if err := sameLen("dg_unscale_check", len(xs), len(ns)); err != nil {
		return false, err
	}
	var found C.int
	err := check("dg_unscale_check", C.dg_unscale_check(x.c, C.dg_dtype(t), ptrs(xs), i64s(ns), C.int(len(ns)),
		C.float(invScale), &found))
	return found != 0, err
}

// AdamWNaiveRef runs dg_adamw_naive_ref: the plain scalar AdamW loop on one
// float32 array, kept as the benchmark's baseline.
func AdamWNaiveRef(hp *OptimHParams, p, g, m, v unsafe.Pointer, n int64) error {
	ch := hp.c()
	return check("dg_adamw_naive_ref", C.dg_adamw_naive_ref(&ch, (*C.float)(p), (*C.float)(g), (*C.float)(m),
		(*C.float)(v), C.int64_t(n)))
}
