package optim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refSizes include empty and single tensors and lengths that are not
// multiples of any SIMD width (8 or 16 floats).
var refSizes = []int{0, 1, 7, 17, 33, 1000, 4099}

type cfgCase struct {
	name   string
	typ    string
	params map[string]any
}

var cfgCases = []cfgCase{
	{"adamw", "AdamW", map[string]any{"lr": 1e-3, "weight_decay": 0.01}},
	{"adam-l2", "Adam", map[string]any{"adam_w_mode": false, "weight_decay": 0.01, "betas": []any{0.8, 0.99}}},
	{"adam-nobc", "Adam", map[string]any{"bias_correction": false, "eps": 1e-6}},
	{"sgd", "SGD", map[string]any{"lr": 0.01, "weight_decay": 1e-4}},
	{"sgd-momentum", "SGD", map[string]any{"lr": 0.01, "momentum": 0.9, "dampening": 0.1}},
	{"sgd-nesterov", "SGD", map[string]any{"lr": 0.01, "momentum": 0.9, "nesterov": true}},
	{"lamb", "Lamb", map[string]any{"lr": 1e-3, "weight_decay": 0.01}},
	{"lion", "Lion", map[string]any{"lr": 1e-4, "weight_decay": 0.1}},
}

type dtCase struct {
	name    string
	p, g, c tensor.DType
	copy    bool
}

var dtCases = []dtCase{
	{"f32", tensor.Float32, tensor.Float32, 0, false},
	{"f32+f16copy/f16grad", tensor.Float32, tensor.Float16, tensor.Float16, true},
	{"f32+bf16copy/bf16grad", tensor.Float32, tensor.BFloat16, tensor.BFloat16, true},
	{"bf16/bf16grad", tensor.BFloat16, tensor.BFloat16, 0, false},
}

const (
	refSteps  = 100
	gradScale = 512.0     // grads carry a loss scale the kernel divides out
	f32Tol    = 1e-6      // |x - ref| / max(|ref|, 1) for float32 params and state
	bf16Tol   = 1.0 / 128 // one bfloat16 ulp relative to the value
)

func isas(t *testing.T) []csrc.ISA {
	out := []csrc.ISA{csrc.ISAScalar}
	for _, i := range []csrc.ISA{csrc.ISAAVX2, csrc.ISAAVX512} {
		if csrc.BestISA() >= i {
			out = append(out, i)
		} else {
			t.Logf("%v not available on this CPU: skipped", i)
		}
	}
	return out
}

func newCPU(t testing.TB, threads int) *backend.CPU {
	b, err := backend.NewCPU(threads)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// setHost writes vals (float32) into t of any float dtype, rounding halves.
func setHost(t testing.TB, x *tensor.Tensor, vals []float32) {
	switch x.DType() {
	case tensor.Float32:
		d, err := x.Float32s()
		require.NoError(t, err)
		copy(d, vals)
	default:
		d, err := x.Uint16s()
		require.NoError(t, err)
		for i, v := range vals {
			if x.DType() == tensor.Float16 {
				d[i] = tensor.Float32ToFloat16(v)
			} else {
				d[i] = tensor.Float32ToBFloat16(v)
			}
		}
	}
}

// getHost reads t widened to float64.
func getHost(t testing.TB, x *tensor.Tensor) []float64 {
	out := make([]float64, x.Numel())
	if x.DType() == tensor.Float32 {
		d, _ := x.Float32s()
		for i, v := range d {
			out[i] = float64(v)
		}
		return out
	}
	d, err := x.Uint16s()
	require.NoError(t, err)
	for i, h := range d {
		if x.DType() == tensor.Float16 {
			out[i] = float64(tensor.Float16ToFloat32(h))
		} else {
			out[i] = float64(tensor.BFloat16ToFloat32(h))
		}
	}
	return out
}

func mustEmpty(t testing.TB, dt tensor.DType, n int) *tensor.Tensor {
	x, err := tensor.Empty(dt, n)
	require.NoError(t, err)
	t.Cleanup(func() { x.Free() })
	return x
}

func randVals(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

// maxRelFloors is max |x - ref| / max(|ref|, floor[i], tiny).
func maxRelFloors(x, ref, floor []float64) (float64, int) {
	worst, at := 0.0, -1
	for i := range x {
		e := math.Abs(x[i]-ref[i]) / math.Max(math.Max(math.Abs(ref[i]), floor[i]), 1e-300)
		if !(e <= worst) {
			worst, at = e, i
		}
	}
	return worst, at
}

// maxRel is max |x - ref| / max(|ref|, floor).
func maxRel(x, ref []float64, floor float64) (float64, int) {
	worst, at := 0.0, -1
	for i := range x {
		e := math.Abs(x[i]-ref[i]) / math.Max(math.Abs(ref[i]), floor)
		if !(e <= worst) {
			worst, at = e, i
		}
	}
	return worst, at
}

func TestStepMatchesFloat64Reference(t *testing.T) {
	b := newCPU(t, 2)
	for _, isa := range isas(t) {
		require.NoError(t, b.SetISA(isa))
		for _, cc := range cfgCases {
			for _, dc := range dtCases {
				t.Run(fmt.Sprintf("%v/%s/%s", isa, cc.name, dc.name), func(t *testing.T) {
					runReference(t, b, cc, dc)
				})
			}
		}
	}
}

// runReference steps a group of refSizes tensors refSteps times and checks
// the result two ways against the float64 reference:
//   - per step: the reference restarted from the kernel's own state before
//     every step must agree to f32Tol (1e-6 relative) — this is the kernel's
//     error;
//   - over the trajectory: an independent float64 run must agree to one
//     float32 rounding of the parameter per step (refSteps * 2^-24), since
//     storing p in float32 after each step is an error no kernel can avoid.
func runReference(t *testing.T, b *backend.CPU, cc cfgCase, dc dtCase) {
	o, err := New(cc.typ, cc.params, b)
	require.NoError(t, err)
	defer o.Close()
	r := rand.New(rand.NewPCG(1, uint64(len(cc.name))))
	g := ParamGroup{Name: "shard0"}
	traj := make([]*refGroup, len(refSizes))
	for i, n := range refSizes {
		p := mustEmpty(t, dc.p, n)
		setHost(t, p, randVals(r, n, 1))
		g.Params = append(g.Params, p)
		g.Grads = append(g.Grads, mustEmpty(t, dc.g, n))
		if dc.copy {
			g.Copies = append(g.Copies, mustEmpty(t, dc.c, n))
		}
		traj[i] = &refGroup{p: getHost(t, p), m: make([]float64, n), v: make([]float64, n)}
	}
	h := o.Defaults()
	names := o.StateNames()
	stepTol := f32Tol
	if dc.p != tensor.Float32 {
		stepTol = bf16Tol // one bfloat16 ulp: a result near a tie may round either way
	}
	worstStep := 0.0
	for step := int64(1); step <= refSteps; step++ {
		lr := h.LR * (0.5 + float64(step)/refSteps) // a schedule: Step's lr wins over the config's
		if dc.p != tensor.Float32 {
			lr *= 20 // else most updates are below half a bfloat16 ulp and vanish
		}
		for i, n := range refSizes {
			setHost(t, g.Grads[i], randVals(r, n, gradScale))
		}
		// restart the per-step reference from the kernel's current state
		restart := make([]*refGroup, len(refSizes))
		before := make([]*refGroup, len(refSizes))
		st := o.State("shard0")
		for i, n := range refSizes {
			rg := &refGroup{p: getHost(t, g.Params[i]), m: make([]float64, n), v: make([]float64, n)}
			for j, name := range names {
				if st != nil { // nil before the first step: zero state
					copy([][]float64{rg.m, rg.v}[j], getHost(t, st[name][i]))
				}
			}
			restart[i] = rg
			before[i] = &refGroup{m: append([]float64(nil), rg.m...), v: append([]float64(nil), rg.v...)}
		}
		require.NoError(t, o.Step(g, lr, gradScale))
		hs := h
		hs.LR = lr
		st = o.State("shard0")
		for i := range refSizes {
			grad := getHost(t, g.Grads[i])
			refStep(o.Kind(), hs, step, gradScale, traj[i], grad)
			refStep(o.Kind(), hs, step, gradScale, restart[i], grad)
			if dc.p != tensor.Float32 { // the references keep their params in the param dtype too
				for _, rg := range []*refGroup{traj[i], restart[i]} {
					for k, v := range rg.p {
						rg.p[k] = float64(tensor.ToHalfPrecision(dc.p, float32(v)))
					}
				}
			}
			got := getHost(t, g.Params[i])
			e, at := maxRel(got, restart[i].p, 1)
			worstStep = math.Max(worstStep, e)
			if e > stepTol { // not require.LessOrEqual: got[at] exists only when the check fails (at is -1 when all agree)
				t.Fatalf("step %d: params[%d][%d] = %.9g, reference %.9g: error %.3g > %.3g", step, i, at, got[at], restart[i].p[at], e, stepTol)
			}
			for j, name := range names {
				ref := [][]float64{restart[i].m, restart[i].v}[j]
				// a moment is a sum of terms that may cancel (b1*m + (1-b1)*g),
				// so its error is taken relative to the largest term
				floor := make([]float64, len(ref))
				for k := range ref {
					gk := math.Abs(grad[k])/gradScale + hs.WeightDecay*math.Abs(got[k])
					old := [][]float64{before[i].m, before[i].v}[j][k]
					floor[k] = math.Max(math.Abs(old), [2]float64{gk, gk * gk}[j])
				}
				e, at := maxRelFloors(getHost(t, st[name][i]), ref, floor)
				require.LessOrEqual(t, e, f32Tol, "step %d: %s[%d][%d]: error relative to its largest term", step, name, i, at)
			}
		}
	}
	assert.EqualValues(t, refSteps, o.Steps("shard0"), "Steps")
	trajTol := refSteps * 0x1p-24
	if dc.p != tensor.Float32 {
		trajTol = 4 * bf16Tol
	}
	worst := 0.0
	for i := range refSizes {
		got := getHost(t, g.Params[i])
		e, at := maxRel(got, traj[i].p, 1)
		worst = math.Max(worst, e)
		if e > trajTol { // as above: got[at] exists only on failure
			t.Errorf("after %d steps: params[%d][%d] = %.9g, reference %.9g: error %.3g > %.3g", refSteps, i, at, got[at], traj[i].p[at], e, trajTol)
		}
		if dc.copy { // the copy is exactly the fp32 result rounded
			c, _ := g.Copies[i].Uint16s()
			p, _ := g.Params[i].Float32s()
			for k := range p {
				want := tensor.Float32ToBFloat16(p[k])
				if dc.c == tensor.Float16 {
					want = tensor.Float32ToFloat16(p[k])
				}
				require.Equal(t, want, c[k], "copies[%d][%d] = %#04x, want %#04x (param %g rounded)", i, k, c[k], want, p[k])
			}
		}
	}
	t.Logf("max param error: per step %.3g (tolerance %.3g), after %d steps %.3g (tolerance %.3g)", worstStep, stepTol, refSteps, worst, trajTol)
}

func newRand() *rand.Rand { return rand.New(rand.NewPCG(3, 4)) }
