package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// batch is a dense row-major matrix of rows×cols activations in Go memory.
type batch struct {
	rows, cols int
	x          []float32
}

// read returns a float32 copy of a float32/float16/bfloat16 host tensor.
func read(t *tensor.Tensor) []float32 {
	if t.DType() == tensor.Float32 {
		v, err := t.Float32s()
		if err != nil {
			panic(err)
		}
		return v
	}
	h, err := t.Uint16s()
	if err != nil {
		panic(err)
	}
	out := make([]float32, len(h))
	for i, b := range h {
		if t.DType() == tensor.Float16 {
			out[i] = tensor.Float16ToFloat32(b)
		} else {
			out[i] = tensor.BFloat16ToFloat32(b)
		}
	}
	return out
}

// addInto does t += d, rounding once per element for half dtypes.
func addInto(t *tensor.Tensor, d []float32) {
	if t.DType() == tensor.Float32 {
		v, _ := t.Float32s()
		for i := range v {
			v[i] += d[i]
		}
		return
	}
	h, _ := t.Uint16s()
	for i := range h {
		if t.DType() == tensor.Float16 {
			h[i] = tensor.Float32ToFloat16(tensor.Float16ToFloat32(h[i]) + d[i])
		} else {
			h[i] = tensor.Float32ToBFloat16(tensor.BFloat16ToFloat32(h[i]) + d[i])
		}
	}
}

// linear is y = x Wᵀ + b, optionally followed by ReLU, with explicit
// backward, computing in float32 over the engine's tensors.
type linear struct {
	name      string
	in, out   int
	relu      bool
	w, b      *model.Param
	x, y      batch // saved input, output (post-activation)
	injectInf func() bool
}

func newLinear(name string, in, out int, relu bool, rng *rand.Rand) *linear {
	l := &linear{name: name, in: in, out: out, relu: relu}
	ws := make([]float32, in*out)
	bound := 1 / math.Sqrt(float64(in))
	for i := range ws {
		ws[i] = float32((rng.Float64()*2 - 1) * bound)
	}
	bs := make([]float32, out)
	for i := range bs {
		bs[i] = float32((rng.Float64()*2 - 1) * bound)
	}
	wt, _ := tensor.FromFloat32(ws, out, in)
	bt, _ := tensor.FromFloat32(bs, out)
	l.w = &model.Param{Name: "weight", Shape: []int{out, in}, Data: wt}
	l.b = &model.Param{Name: "bias", Shape: []int{out}, Data: bt}
	return l
}

func (l *linear) Name() string           { return l.name }
func (l *linear) Params() []*model.Param { return []*model.Param{l.w, l.b} }

func (l *linear) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	x := in.(batch)
	if x.cols != l.in {
		return nil, fmt.Errorf("%s: input has %d columns, want %d", l.name, x.cols, l.in)
	}
	if l.w.Data == nil {
		return nil, fmt.Errorf("%s: weight not gathered", l.name)
	}
	w, b := read(l.w.Data), read(l.b.Data)
	y := batch{rows: x.rows, cols: l.out, x: make([]float32, x.rows*l.out)}
	for r := range x.rows {
		xr := x.x[r*l.in : (r+1)*l.in]
		for o := range l.out {
			s := b[o]
			wo := w[o*l.in : (o+1)*l.in]
			for i, v := range xr {
				s += v * wo[i]
			}
			if l.relu && s < 0 {
				s = 0
			}
			y.x[r*l.out+o] = s
		}
	}
	l.x, l.y = x, y
	return y, nil
}

func (l *linear) Backward(ctx context.Context, gradOut model.Activation) (model.Activation, error) {
	gy := gradOut.(batch)
	if l.w.Data == nil || l.w.Grad == nil {
		return nil, fmt.Errorf("%s: weight or grad not bound in backward", l.name)
	}
	w := read(l.w.Data)
	g := make([]float32, len(gy.x))
	copy(g, gy.x)
	if l.relu {
		for i, v := range l.y.x {
			if v <= 0 {
				g[i] = 0
			}
		}
	}
	dw := make([]float32, l.out*l.in)
	db := make([]float32, l.out)
	gx := batch{rows: gy.rows, cols: l.in, x: make([]float32, gy.rows*l.in)}
	for r := range gy.rows {
		xr := l.x.x[r*l.in : (r+1)*l.in]
		gxr := gx.x[r*l.in : (r+1)*l.in]
		for o := range l.out {
			go_ := g[r*l.out+o]
			if go_ == 0 {
				continue
			}
			db[o] += go_
			for i := range l.in {
				dw[o*l.in+i] += go_ * xr[i]
				gxr[i] += go_ * w[o*l.in+i]
			}
		}
	}
	if l.injectInf != nil && l.injectInf() {
		dw[0] = float32(math.Inf(1))
	}
	addInto(l.w.Grad, dw)
	addInto(l.b.Grad, db)
	return gx, nil
}

// mlp is a stack of linear modules with a mean-squared-error loss.
type mlp struct {
	layers []*linear
	order  func() []model.Module // overrides Modules when set
}

func newMLP(seed uint64, sizes ...int) *mlp {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := &mlp{}
	for i := 0; i+1 < len(sizes); i++ {
		m.layers = append(m.layers, newLinear(fmt.Sprintf("fc%d", i+1), sizes[i], sizes[i+1], i+2 < len(sizes), rng))
	}
	return m
}

func (m *mlp) Modules() []model.Module {
	if m.order != nil {
		return m.order()
	}
	out := make([]model.Module, len(m.layers))
	for i, l := range m.layers {
		out[i] = l
	}
	return out
}

func (m *mlp) Loss(ctx context.Context, out, target model.Activation, gradScale float64) (float64, model.Activation, error) {
	y, t := out.(batch), target.(batch)
	n := float64(len(y.x))
	g := batch{rows: y.rows, cols: y.cols, x: make([]float32, len(y.x))}
	var loss float64
	for i, v := range y.x {
		d := float64(v) - float64(t.x[i])
		loss += d * d
		g.x[i] = float32(2 * d / n * gradScale)
	}
	return loss / n, g, nil
}

// dataset is a fixed random regression problem.
type dataset struct {
	in, out int
	x, y    []float32
}

func newDataset(seed uint64, samples, in, out int) *dataset {
	rng := rand.New(rand.NewPCG(seed, 11))
	d := &dataset{in: in, out: out, x: make([]float32, samples*in), y: make([]float32, samples*out)}
	for i := range d.x {
		d.x[i] = float32(rng.NormFloat64())
	}
	for i := range d.y {
		d.y[i] = float32(rng.NormFloat64() * 0.5)
	}
	return d
}

// micro returns samples [lo, lo+n) of step's slice of the data.
func (d *dataset) micro(step, global, lo, n int) model.MicroBatch {
	samples := len(d.x) / d.in
	base := (step * global) % samples
	x := batch{rows: n, cols: d.in, x: make([]float32, 0, n*d.in)}
	y := batch{rows: n, cols: d.out, x: make([]float32, 0, n*d.out)}
	for s := base + lo; s < base+lo+n; s++ {
		k := s % samples
		x.x = append(x.x, d.x[k*d.in:(k+1)*d.in]...)
		y.x = append(y.x, d.y[k*d.out:(k+1)*d.out]...)
	}
	return model.MicroBatch{Input: x, Target: y}
}

// rankBatch is the micro-batches of rank r (of n) for one step of a
// global batch split into gas accumulation steps.
func (d *dataset) rankBatch(step, global, n, r, gas int) []model.MicroBatch {
	mb := global / (n * gas)
	out := make([]model.MicroBatch, gas)
	for j := range gas {
		out[j] = d.micro(step, global, (j*n+r)*mb, mb)
	}
	return out
}

// initEngine is deepgo.Initialize for tests that reach the data-parallel
// engine's own methods (ZeRO internals, SaveAsync, counters).
func initEngine(ctx context.Context, cfg *config.Config, m model.Model, opts ...deepgo.Option) (*deepgo.Engine, error) {
	t, err := deepgo.Initialize(ctx, cfg, m, opts...)
	if err != nil {
		return nil, err
	}
	e, ok := t.(*deepgo.Engine)
	if !ok {
		t.Close()
		return nil, fmt.Errorf("Initialize returned %T, want *deepgo.Engine", t)
	}
	return e, nil
}
