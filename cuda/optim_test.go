//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every optimizer kind and dtype combination against optim.CPUKernels on
// random finite data (zeros and subnormals among it), two steps from random
// state, lists {n, 1, 17, 0, n/2} for each size. Params, moments, copies and
// Lamb's trust ratios must match bit for bit: the CUDA Lamb norms add in the
// CPU's exact order (cuda/optim.cu). A NaN matches any NaN, as in the other
// tests, though finite data should make none.

type optCase struct {
	name string
	kind optim.Kind
	h    optim.Hyper
}

var optCases = []optCase{
	{"adamw", optim.KindAdam, optim.Hyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, AdamWMode: true, BiasCorrection: true}},
	{"adam-l2", optim.KindAdam, optim.Hyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, BiasCorrection: true}},
	{"adamw-nobc", optim.KindAdam, optim.Hyper{LR: 3e-4, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.1, AdamWMode: true}},
	{"sgd", optim.KindSGD, optim.Hyper{LR: 0.1, WeightDecay: 1e-4}},
	{"sgd-mom", optim.KindSGD, optim.Hyper{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 1e-4}},
	{"sgd-nesterov", optim.KindSGD, optim.Hyper{LR: 0.05, Momentum: 0.9, Nesterov: true}},
	{"lamb", optim.KindLamb, optim.Hyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-6, WeightDecay: 0.01, BiasCorrection: true, MaxCoeff: 10, MinCoeff: 0.01}},
	{"lamb-clamp", optim.KindLamb, optim.Hyper{LR: 2e-3, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, MaxCoeff: 0.5, MinCoeff: 0.1}},
	{"lion", optim.KindLion, optim.Hyper{LR: 1e-4, Beta1: 0.9, Beta2: 0.99, WeightDecay: 0.1}},
}

// the dtype combinations the core supports: params, grads, copy (copy only with float32 params)
type optTypes struct {
	p, g, c tensor.DType
	copy    bool
}

func optCombos() []optTypes {
	var out []optTypes
	for _, g := range floats {
		out = append(out, optTypes{p: tensor.Float32, g: g})
		out = append(out, optTypes{p: tensor.Float32, g: g, c: tensor.Float16, copy: true})
		out = append(out, optTypes{p: tensor.Float32, g: g, c: tensor.BFloat16, copy: true})
		out = append(out, optTypes{p: tensor.Float16, g: g})
		out = append(out, optTypes{p: tensor.BFloat16, g: g})
	}
	return out
}

const (
	signed = iota
	nonneg
	zeros
)

// optRand makes a host tensor of n finite values of dtype dt, rounded from
// float32 by the CPU backend's cast.
func optRand(t *testing.T, r *rand.Rand, cpu *backend.CPU, dt tensor.DType, n, mode int) *tensor.Tensor {
	t.Helper()
	f, err := tensor.Empty(tensor.Float32, n)
	require.NoError(t, err)
	raw, _ := f.RawBytes()
	for i := range n {
		x := float32(r.NormFloat64() * math.Ldexp(1, r.IntN(8)-4))
		switch {
		case mode == zeros || i%61 == 5:
			x = 0
		case i%67 == 7:
			x = math.Float32frombits(uint32(r.IntN(1<<23)) | uint32(r.IntN(2))<<31)
		}
		if mode == nonneg {
			x = float32(math.Abs(float64(x)))
		}
		putU32(raw, i, math.Float32bits(x))
	}
	if dt == tensor.Float32 {
		t.Cleanup(func() { f.Free() })
		return f
	}
	h, err := tensor.Empty(dt, n)
	require.NoError(t, err)
	t.Cleanup(func() { h.Free() })
	require.NoError(t, cpu.Cast([]*tensor.Tensor{h}, []*tensor.Tensor{f}))
	f.Free()
	return h
}

// optLists returns matching host and device lists {n, 1, 17, 0, n/2}.
func optLists(t *testing.T, r *rand.Rand, cpu *backend.CPU, dt tensor.DType, n, mode int) (hs, ds []*tensor.Tensor) {
	for _, m := range []int{n, 1, 17, 0, n / 2} {
		h := optRand(t, r, cpu, dt, m, mode)
		hs = append(hs, h)
		ds = append(ds, toDevice(t, h))
	}
	return hs, ds
}

func TestOptimStep(t *testing.T) {
	cpu, gpu := setup(t)
	ck := optim.NewCPUKernels(cpu)
	gk, err := NewOptimKernels(gpu)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range sizes {
		for _, oc := range optCases {
			for _, ty := range optCombos() {
				name := fmt.Sprintf("%s/%v-%v", oc.name, ty.p, ty.g)
				if ty.copy {
					name += "-" + ty.c.String()
				}
				t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) { optCompare(t, r, cpu, ck, gk, oc, ty, n) })
			}
		}
	}
}

func optCompare(t *testing.T, r *rand.Rand, cpu *backend.CPU, ck, gk optim.Kernels, oc optCase, ty optTypes, n int) {
	hp, dp := optLists(t, r, cpu, ty.p, n, signed)
	hg, dg := optLists(t, r, cpu, ty.g, n, signed)
	var hc, dc, hm, dm, hv, dv []*tensor.Tensor
	if ty.copy {
		hc, dc = optLists(t, r, cpu, ty.c, n, zeros)
	}
	if oc.kind != optim.KindSGD || oc.h.Momentum != 0 {
		hm, dm = optLists(t, r, cpu, tensor.Float32, n, signed)
	}
	if oc.kind == optim.KindAdam || oc.kind == optim.KindLamb {
		hv, dv = optLists(t, r, cpu, tensor.Float32, n, nonneg)
	}
	for step := int64(1); step <= 2; step++ { // step 1 and a later one (SGD's first step differs)
		args := func(p, g, c, m, v []*tensor.Tensor) *optim.StepArgs {
			a := &optim.StepArgs{Kind: oc.kind, Step: step, Hyper: oc.h, GradScale: 1000,
				Group: optim.ParamGroup{Name: "g", Params: p, Grads: g, Copies: c}, ExpAvg: m, ExpAvgSq: v}
			if oc.kind == optim.KindLamb {
				a.Trust = make([]float64, len(p))
			}
			return a
		}
		ha, da := args(hp, hg, hc, hm, hv), args(dp, dg, dc, dm, dv)
		require.NoError(t, ck.Step(ha))
		require.NoError(t, gk.Step(da))
		for i := range ha.Trust {
			assert.Equal(t, math.Float64bits(ha.Trust[i]), math.Float64bits(da.Trust[i]), "step %d: trust[%d]: cpu %v gpu %v", step, i, ha.Trust[i], da.Trust[i])
		}
	}
	for _, l := range []struct {
		name string
		h, d []*tensor.Tensor
	}{{"params", hp, dp}, {"copies", hc, dc}, {"exp_avg", hm, dm}, {"exp_avg_sq", hv, dv}} {
		for i := range l.h {
			same(t, fmt.Sprintf("%s[%d]", l.name, i), l.h[i], l.d[i], true)
		}
	}
}

func TestOptimUnscaleCheck(t *testing.T) {
	cpu, gpu := setup(t)
	ck := optim.NewCPUKernels(cpu)
	gk, err := NewOptimKernels(gpu)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range sizes {
		for _, dt := range floats {
			// with Inf/NaN edge values; finite; finite but overflowing (x1000 in 16 bits)
			for _, c := range []struct {
				finite bool
				scale  float64
			}{{false, 1024}, {true, 1024}, {true, 1e-3}} {
				hs, ds := lists(t, r, dt, n, c.finite)
				fc, err := ck.UnscaleCheck(hs, c.scale)
				require.NoError(t, err)
				fg, err := gk.UnscaleCheck(ds, c.scale)
				require.NoError(t, err)
				assert.Equal(t, fc, fg, "%v n=%d finite=%v scale=%v: found cpu vs gpu", dt, n, c.finite, c.scale)
				for i := range hs {
					same(t, fmt.Sprintf("unscale %v[%d]", dt, i), hs[i], ds[i], true)
				}
			}
		}
	}
}

func TestOptimKernelsErrors(t *testing.T) {
	_, gpu := setup(t)
	gk, err := NewOptimKernels(gpu)
	require.NoError(t, err)
	host, err := tensor.Empty(tensor.Float32, 4)
	require.NoError(t, err)
	defer host.Free()
	a := &optim.StepArgs{Kind: optim.KindSGD, Step: 1, Hyper: optim.Hyper{LR: 0.1}, GradScale: 1,
		Group: optim.ParamGroup{Params: []*tensor.Tensor{host}, Grads: []*tensor.Tensor{host}}}
	require.Error(t, gk.Step(a), "Step on host tensors: no error")
	d, err := gpu.Empty(tensor.Float32, 4)
	require.NoError(t, err)
	defer d.Free()
	a.Group = optim.ParamGroup{Params: []*tensor.Tensor{d}, Grads: []*tensor.Tensor{d}}
	a.Hyper.LR = -1 // the C check refuses it; nothing is written
	require.Error(t, gk.Step(a), "Step with lr -1: no error")

}
