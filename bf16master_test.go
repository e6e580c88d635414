package deepgo_test

// Tests of bf16.bf16_master_weights_and_grads and bf16.bf16_optimizer_states
// through the data-parallel engine.

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// bf16MasterJSON is the bf16 section of run precision p: "bf16m" both keys
// (moments in bf16, stepped on the backend), "bf16m-off" bf16 masters with
// fp32 moments (offload_optimizer cpu), "bf16m-both-off" both keys with
// offload_optimizer cpu.
func bf16MasterJSON(p string) string {
	if p == "bf16m-off" {
		return `, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true}`
	}
	return `, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}`
}

// bf16MasterZero is the zero_optimization members of run precision p.
func bf16MasterZero(p string) string {
	if strings.HasSuffix(p, "-off") {
		return `, "offload_optimizer": {"device": "cpu"}`
	}
	return ""
}

// fma32 is a*b+c rounded once to float32 (fmaf), computed exactly.
func fma32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(256).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(256).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

func bf16(x float32) float32 { return tensor.BFloat16ToFloat32(tensor.Float32ToBFloat16(x)) }

// dsAdamW is DeepSpeedCPUAdam's AdamW step on bf16 masters written out in
// Go (the engine tests' config: lr 0.002, wd 0.01, betas 0.9/0.999, eps
// 1e-8, bias correction): float coefficients with beta^t as t float
// products, fused multiply-adds in the vector loop's order, the master
// and (bf16States) moments rounded to bf16 after the update.
func dsAdamW(t int, p, g, m, v []float32, bf16States bool) {
	const lr, wd, eps = float32(0.002), float32(0.01), float32(1e-8)
	b1, b2 := float32(0.9), float32(0.999)
	b1t, b2t := float32(1), float32(1)
	for range t {
		b1t *= b1
		b2t *= b2
	}
	bc1 := 1 - b1t
	bc2 := 1 / float32(math.Sqrt(float64(1-b2t)))
	step, decay := -1*lr/bc1, -1*lr*wd
	for i := range p {
		mm := fma32(g[i], 1-b1, m[i]*b1)
		gg := g[i] * g[i]
		vv := fma32(gg, 1-b2, v[i]*b2)
		d := fma32(float32(math.Sqrt(float64(vv))), bc2, eps)
		u := mm / d
		q := fma32(p[i], decay, p[i])
		p[i] = bf16(fma32(u, step, q))
		if bf16States {
			mm, vv = bf16(mm), bf16(vv)
		}
		m[i], v[i] = mm, vv
	}
}

// plainBF16Master is plainTrain with bf16 master weights: the forward and
// backward of the whole global batch in float32 on the bf16 masters
// widened, the gradients rounded to bf16, clipped as the engine does
// (optim.CombinedScale of their float64 norm, the scaled gradient rounded
// to bf16 as DeepSpeed's in-place mul_ on the bf16 partition), and dsAdamW.
func plainBF16Master(steps int, maxNorm float64, bf16States bool) (*result, error) {
	ctx := context.Background()
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	m, params, free, err := plainMLP()
	if err != nil {
		return nil, err
	}
	defer free()
	ms, vs := make([][]float32, len(params)), make([][]float32, len(params))
	for j, p := range params {
		d, _ := p.Data.Float32s()
		for i := range d {
			d[i] = bf16(d[i])
		}
		ms[j], vs[j] = make([]float32, len(d)), make([]float32, len(d))
	}
	res := &result{params: map[string][]float32{}}
	for s := range steps {
		loss, err := plainGrads(ctx, m, params, data.Micro(s, globalBatch, 0, globalBatch))
		if err != nil {
			return nil, err
		}
		var ss float64
		for _, p := range params {
			g, _ := p.Grad.Float32s()
			for i := range g {
				g[i] = bf16(g[i])
				ss += float64(g[i]) * float64(g[i])
			}
		}
		if inv := float32(1 / optim.CombinedScale(math.Sqrt(ss), 1, maxNorm)); inv != 1 {
			for _, p := range params {
				g, _ := p.Grad.Float32s()
				for i := range g {
					g[i] = bf16(g[i] * inv)
				}
			}
		}
		for j, p := range params {
			d, _ := p.Data.Float32s()
			g, _ := p.Grad.Float32s()
			dsAdamW(s+1, d, g, ms[j], vs[j], bf16States)
		}
		res.losses = append(res.losses, loss)
	}
	for _, p := range params {
		d, _ := p.Data.Float32s()
		res.params[p.Name] = append([]float32(nil), d...)
	}
	return res, nil
}

// TestBF16MasterEquivalence: the engine with bf16 master weights (moments
// in bf16 on the backend, fp32 on the host with offload_optimizer cpu, or
// bf16 on the host) at stages 1-3 on 1, 2 and 4 ranks against
// plainBF16Master, with gradient_clipping 1.0 (never clips) and lowClip
// (clips about half the steps), and on the simulated device, with and
// without delays, bit for bit against the CPU backend. On one rank the
// engine computes exactly what the plain loop does, so it must match it bit
// for bit; across ranks the bf16 gradients are reduced in another order.
func TestBF16MasterEquivalence(t *testing.T) {
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-44s %12s %12s\n", "case", "loss/plain", "param/plain")
	for _, prec := range []string{"bf16m", "bf16m-off", "bf16m-both-off"} {
		for _, clip := range []float64{0, lowClip} {
			want := cached(t, fmt.Sprintf("plain bf16 masters %s clip %g", prec, clip), func() (*result, error) {
				return plainBF16Master(steps, run{clip: clip}.maxNorm(), prec != "bf16m-off")
			})
			for _, stage := range []int{1, 2, 3} {
				for _, world := range []int{1, 2, 4} {
					r := run{stage: stage, world: world, gas: 1, precision: prec, clip: clip}
					if world == 2 {
						r.gas = 2
					}
					lt, pt := bf16MasterLossTol, bf16MasterParamTol
					if world == 1 {
						lt, pt = 0, 0
					}
					t.Run(r.String(), func(t *testing.T) {
						got, err := train(t, r)
						require.NoError(t, err)
						lp, pp := compareRuns(t, "vs plain bf16 masters", want, got, lt, pt)
						fmt.Fprintf(&table, "%-44s %12.2e %12.2e\n", r, lp, pp)
						if clip != 0 && world == 4 {
							return // the simulated device runs the unclipped table
						}
						for _, dev := range []string{"sim", "sim+delay"} {
							r.dev = dev
							dgot, err := train(t, r)
							require.NoError(t, err, dev)
							bitEqualRuns(t, got, dgot)
						}
					})
				}
			}
		}
	}
	t.Log(table.String())
}

// Tolerances of the engine with bf16 masters on several ranks against
// plainBF16Master. Both round the masters to bf16 after every step, so a
// gradient that rounds differently (the engine reduces bf16 gradients
// across ranks and micro-batches in its own order) moves a master by one
// bf16 ulp, 2^-8 relative, and clipping rounds the scaled gradients once
// more. Measured over 20 steps: losses within 2.4e-4 (6.1e-4 clipping),
// parameters within 1.5e-3 norm-wise (5.2e-3 clipping, on 4 ranks); on one
// rank the difference is 0. The tolerances leave a margin of 2 over that.
const (
	bf16MasterLossTol  = 1.5e-3
	bf16MasterParamTol = 1e-2
)

// TestBF16MasterCheckpoint: a run with bf16 masters saved after ckptAt
// steps and resumed in fresh engines ends bit for bit where the
// uninterrupted run ends (stages 1-3 on 2 ranks, the CPU and the simulated
// device, moments in bf16 on the backend or fp32 on the host). Checkpoints
// hold fp32, so the same checkpoint loads into fp32 masters exactly, and
// an fp32-master checkpoint loads into bf16 masters rounded to nearest even.
func TestBF16MasterCheckpoint(t *testing.T) {
	for _, prec := range []string{"bf16m", "bf16m-off"} {
		for _, stage := range []int{1, 2, 3} {
			for _, dev := range []string{"", "sim"} {
				r := run{stage: stage, world: 2, gas: 1, precision: prec, dev: dev}
				t.Run(r.String(), func(t *testing.T) {
					want, _, err := segment{r: r, from: 0, to: ckptSteps}.train(t)
					require.NoError(t, err)
					dir := t.TempDir()
					atSave, _, err := segment{r: r, save: dir, from: 0, to: ckptAt}.train(t)
					require.NoError(t, err)
					got, _, err := segment{r: r, load: dir, from: ckptAt, to: ckptSteps}.train(t)
					require.NoError(t, err)
					require.NoError(t, bitEqual(want, got), "resumed run")

					fp32 := r
					fp32.precision = "bf16"
					loaded, _, err := segment{r: fp32, load: dir, from: ckptAt, to: ckptAt}.train(t)
					require.NoError(t, err)
					require.NoError(t, bitEqual(atSave, loaded), "bf16-master checkpoint into fp32 masters")

					dir32 := t.TempDir()
					saved32, _, err := segment{r: fp32, save: dir32, from: 0, to: ckptAt}.train(t)
					require.NoError(t, err)
					rounded, _, err := segment{r: r, load: dir32, from: ckptAt, to: ckptAt}.train(t)
					require.NoError(t, err)
					for k, v := range saved32 {
						w := make([]float32, len(v))
						for i, x := range v {
							w[i] = bf16(x)
						}
						saved32[k] = w
					}
					require.NoError(t, bitEqual(saved32, rounded), "fp32-master checkpoint into bf16 masters")
				})
			}
		}
	}
}

// TestBF16MasterMemory: Memory() counts bf16 masters and moments at 2
// bytes an element: against the same run with fp32 masters the master
// bytes halve, and so do the optimizer-state bytes with
// bf16_optimizer_states (with offload they stay fp32).
func TestBF16MasterMemory(t *testing.T) {
	memAfterStep := func(r run) (m zeroMemory) {
		r.steps = 2
		r.hook = func(rank int, _ *testmodel.MLP, e *deepgo.Engine, step int) {
			if rank == 0 && step == 1 {
				mem := e.Memory()
				m = zeroMemory{mem.Master, mem.OptimizerState, mem.Grads}
			}
		}
		_, err := train(t, r)
		require.NoError(t, err)
		return m
	}
	for _, stage := range []int{1, 2, 3} {
		for _, c := range []struct{ prec, base string }{{"bf16m", ""}, {"bf16m-off", "off"}, {"bf16m-both-off", "off"}} {
			base := run{stage: stage, world: 2, gas: 1, precision: "bf16"}
			if c.base == "off" {
				base.zeroExtra = `, "offload_optimizer": {"device": "cpu"}`
			}
			r := run{stage: stage, world: 2, gas: 1, precision: c.prec}
			t.Run(r.String(), func(t *testing.T) {
				want, got := memAfterStep(base), memAfterStep(r)
				require.Positive(t, want.master)
				require.Equal(t, want.master/2, got.master, "master bytes")
				states := want.states
				if c.prec != "bf16m-off" {
					states /= 2
				}
				require.Equal(t, states, got.states, "optimizer-state bytes")
				require.Equal(t, want.grads, got.grads, "gradient bytes (bf16 either way)")
			})
		}
	}
}

// zeroMemory is the part of zero.Memory the bf16-master keys change.
type zeroMemory struct{ master, states, grads int64 }

// TestBF16MasterTrains: bf16 masters and moments train like fp32 masters:
// over 20 steps on 2 ranks the losses stay within 1% of the bf16 run with
// fp32 masters (measured: 5.0e-3 at most, stages 1-3, with and without
// offload), and the loss falls.
func TestBF16MasterTrains(t *testing.T) {
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-36s %12s %12s %12s\n", "case", "loss/fp32m", "first", "last")
	for _, stage := range []int{1, 2, 3} {
		want, err := train(t, run{stage: stage, world: 2, gas: 1, precision: "bf16"})
		require.NoError(t, err)
		for _, prec := range []string{"bf16m", "bf16m-off"} {
			r := run{stage: stage, world: 2, gas: 1, precision: prec}
			got, err := train(t, r)
			require.NoError(t, err)
			ld := lossDiff(want.losses, got.losses)
			require.LessOrEqual(t, ld, 1e-2, "%s: losses against fp32 masters\nwant %v\ngot  %v", r, want.losses, got.losses)
			first, last := 0.0, 0.0
			for i := range 4 {
				first += got.losses[i]
				last += got.losses[steps-4+i]
			}
			require.Less(t, last, first, "%s: the loss falls", r)
			fmt.Fprintf(&table, "%-36s %12.2e %12.4f %12.4f\n", r, ld, first/4, last/4)
		}
	}
	t.Log(table.String())
}

// TestBF16MasterRefusesOtherOptimizer: an optimizer passed with
// WithOptimizer that does not step bf16 masters is refused at Initialize.
func TestBF16MasterRefusesOtherOptimizer(t *testing.T) {
	r := run{stage: 2, world: 1, gas: 1, precision: "bf16m"}
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	opt, err := optim.New("AdamW", map[string]any{"lr": 0.002}, be)
	require.NoError(t, err)
	defer opt.Close()
	r.opts = []deepgo.Option{deepgo.WithOptimizer(opt)}
	_, err = train(t, r)
	require.ErrorIs(t, err, backend.ErrUnsupported)
	require.ErrorContains(t, err, "bf16.bf16_master_weights_and_grads")
	require.ErrorContains(t, err, "optim.WithBF16Master")
}
