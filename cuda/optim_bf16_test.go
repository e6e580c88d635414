//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// The bf16-master Adam step (StepArgs.BF16Master, dg_cuda_adam_bf16_step)
// against optim.CPUKernels (csrc/optim_bf16.c) on random data: AdamW and
// L2 Adam, weight decay on and off, with and without bias correction, loss
// scale 1 and 1024, moments float32 and bfloat16, three steps from random
// state over the lists {n, 1, 17, 0, n/2}. Params and both moments must
// match bit for bit, NaN payloads included: the grads carry NaNs (quiet and
// signalling, both signs) and Infs, which the shared element math carries
// into the params and moments the same way on both.

var bf16AdamCases = []optCase{
	{"adamw", optim.KindAdam, optim.Hyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, AdamWMode: true, BiasCorrection: true}},
	{"adamw-nowd", optim.KindAdam, optim.Hyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, AdamWMode: true, BiasCorrection: true}},
	{"adam-l2", optim.KindAdam, optim.Hyper{LR: 2e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-6, WeightDecay: 0.1, BiasCorrection: true}},
	{"adam-nowd", optim.KindAdam, optim.Hyper{LR: 2e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-6, BiasCorrection: true}},
	{"adamw-nobc", optim.KindAdam, optim.Hyper{LR: 3e-4, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.1, AdamWMode: true}},
}

func TestOptimStepBF16Master(t *testing.T) {
	cpu, gpu := setup(t)
	ck := optim.NewCPUKernels(cpu)
	gk, err := NewOptimKernels(gpu)
	require.NoError(t, err)
	require.True(t, gk.StepsBF16Master())
	r := rand.New(rand.NewPCG(21, 22))
	for _, n := range sizes {
		for _, oc := range bf16AdamCases {
			for _, st := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				for _, scale := range []float64{1, 1024} {
					t.Run(fmt.Sprintf("%s/%v/scale%v/%d", oc.name, st, scale, n), func(t *testing.T) {
						bf16Compare(t, r, cpu, ck, gk, oc, st, scale, n)
					})
				}
			}
		}
	}
}

// withNaNs is optLists for grads, with NaNs and Infs at a few places of
// its first tensor (bf16 bits: quiet with payload, signalling, -Inf, +Inf).
func withNaNs(t *testing.T, r *rand.Rand, cpu *backend.CPU, n int) (hs, ds []*tensor.Tensor) {
	for j, m := range []int{n, 1, 17, 0, n / 2} {
		h := optRand(t, r, cpu, tensor.BFloat16, m, signed)
		if j == 0 {
			raw, _ := h.RawBytes()
			for i, b := range []uint16{0x7fc1, 0xff81, 0xff80, 0x7f80} {
				if k := 3 + 5*i; k < m {
					raw[2*k], raw[2*k+1] = byte(b), byte(b>>8)
				}
			}
		}
		hs = append(hs, h)
		ds = append(ds, toDevice(t, h))
	}
	return hs, ds
}

func bf16Compare(t *testing.T, r *rand.Rand, cpu *backend.CPU, ck, gk optim.Kernels, oc optCase, st tensor.DType, scale float64, n int) {
	hp, dp := optLists(t, r, cpu, tensor.BFloat16, n, signed)
	hm, dm := optLists(t, r, cpu, st, n, signed)
	hv, dv := optLists(t, r, cpu, st, n, nonneg)
	for step := int64(1); step <= 3; step++ {
		hg, dg := withNaNs(t, r, cpu, n) // fresh grads every step
		args := func(p, g, m, v []*tensor.Tensor) *optim.StepArgs {
			return &optim.StepArgs{Kind: oc.kind, Step: step, Hyper: oc.h, GradScale: scale, BF16Master: true,
				Group: optim.ParamGroup{Name: "g", Params: p, Grads: g}, ExpAvg: m, ExpAvgSq: v}
		}
		require.NoError(t, ck.Step(args(hp, hg, hm, hv)))
		require.NoError(t, gk.Step(args(dp, dg, dm, dv)))
	}
	for _, l := range []struct {
		name string
		h, d []*tensor.Tensor
	}{{"params", hp, dp}, {"exp_avg", hm, dm}, {"exp_avg_sq", hv, dv}} {
		for i := range l.h {
			same(t, fmt.Sprintf("%s[%d]", l.name, i), l.h[i], l.d[i], false)
		}
	}
}

// TestOptimStepBF16MasterErrors: the CUDA step refuses what the C one
// does, with nothing written: float32 params, mixed moment dtypes.
func TestOptimStepBF16MasterErrors(t *testing.T) {
	_, gpu := setup(t)
	gk, err := NewOptimKernels(gpu)
	require.NoError(t, err)
	dev := func(dt tensor.DType) *tensor.Tensor {
		d, err := gpu.Empty(dt, 4)
		require.NoError(t, err)
		t.Cleanup(func() { d.Free() })
		return d
	}
	one := func(x *tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{x} }
	b, f := dev(tensor.BFloat16), dev(tensor.Float32)
	h := bf16AdamCases[0].h
	for _, c := range []struct {
		name       string
		p, g, m, v *tensor.Tensor
	}{{"float32 params", f, b, f, f}, {"float32 grads", b, f, f, f}, {"mixed moments", b, b, f, b}, {"float16 moments", b, b, dev(tensor.Float16), dev(tensor.Float16)}} {
		a := &optim.StepArgs{Kind: optim.KindAdam, Step: 1, Hyper: h, GradScale: 1, BF16Master: true,
			Group: optim.ParamGroup{Params: one(c.p), Grads: one(c.g)}, ExpAvg: one(c.m), ExpAvgSq: one(c.v)}
		require.Error(t, gk.Step(a), c.name)
	}
}
