// Package testmodel is the small model deepgo's engine tests and the
// bench-zero benchmark train: a stack of fully connected layers with
// explicit backward, written in plain Go against the model contract so
// that it depends on no engine and computes with no C kernel, and a fixed random
// regression data set. It computes in float32 over float32, float16 or
// bfloat16 parameters (gradients added with one rounding per element).
//
// On a device backend (one whose memory Go may not read, such as the
// simulated device) the layers move their weights and gradients through
// the backend's Copy, the context's backend.FromContext, and compute on the
// host exactly as on the CPU: the engine's device path is exercised with
// the same arithmetic, so its results must be bit-identical.
package testmodel

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// onHost returns t in host memory: t itself when it is there, else a host
// copy made with the context's backend, and the function that ends the
// use (writeBack: copies the host values back first).
func onHost(ctx context.Context, t *tensor.Tensor) (h *tensor.Tensor, done func(writeBack bool) error, err error) {
	if t.Device().IsCPU() {
		return t, func(bool) error { return nil }, nil
	}
	be, ok := backend.FromContext(ctx)
	if !ok {
		return nil, nil, fmt.Errorf("testmodel: %v is on a device and the context carries no backend to copy it with", t)
	}
	h, err = tensor.Empty(t.DType(), t.Shape()...)
	if err != nil {
		return nil, nil, err
	}
	if err := be.Copy(h, t); err != nil {
		h.Free()
		return nil, nil, err
	}
	return h, func(writeBack bool) error {
		defer h.Free()
		if writeBack {
			return be.Copy(t, h)
		}
		return nil
	}, nil
}

// gradOnHost is onHost of p's gradient; a frozen p without one
// (model.Param.Frozen) gets a float32 scratch that is dropped.
func gradOnHost(ctx context.Context, p *model.Param) (*tensor.Tensor, func(bool) error, error) {
	if p.Grad != nil {
		return onHost(ctx, p.Grad)
	}
	h, err := tensor.Empty(tensor.Float32, p.Shape...)
	if err != nil {
		return nil, nil, err
	}
	return h, func(bool) error { return h.Free() }, nil
}

// readParam is Read of a parameter that may live on the context's device.
func readParam(ctx context.Context, t *tensor.Tensor) ([]float32, error) {
	h, done, err := onHost(ctx, t)
	if err != nil {
		return nil, err
	}
	v := Read(h)
	if h != t {
		v = append([]float32(nil), v...)
	}
	return v, done(false)
}

// Batch is a dense row-major Rows×Cols matrix of activations in Go memory:
// the activation between layers and the MLP's input and target.
type Batch struct {
	Rows, Cols int
	X          []float32
}

// BatchSize is Rows, the number of samples (model.Sized).
func (b Batch) BatchSize() int { return b.Rows }

// HostCopy is b as a new host float32 tensor [Rows, Cols] the caller
// frees (model.HostCopier).
func (b Batch) HostCopy() (*tensor.Tensor, error) { return tensor.FromFloat32(b.X, b.Rows, b.Cols) }

// Read returns t as float32 (t's own memory for float32, a widened copy
// for float16 and bfloat16).
func Read(t *tensor.Tensor) []float32 {
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

// AddInto does t += d, rounding once per element for half dtypes.
func AddInto(t *tensor.Tensor, d []float32) {
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

// Linear is y = x Wᵀ + b, optionally followed by ReLU.
type Linear struct {
	name    string
	in, out int
	relu    bool
	w, b    *model.Param
	x, y    Batch     // saved input, output (post-activation)
	dw, db  []float32 // gradient scratch, reused
	// InjectInf, when set and returning true, makes Backward write +Inf
	// into the first weight gradient (overflow tests).
	InjectInf func() bool
	// OnForward, when set, sees the weight and bias values each Forward
	// computes with (the gathered parameters, widened to float32).
	OnForward func(w, b []float32)
}

// NewLinear declares a Linear (parameters name.weight and name.bias) with
// weights and bias drawn uniformly from ±1/√in (torch's default), in
// float32 host tensors donated to the engine (model.Param.Donate):
// Initialize frees them once it has copied them.
func NewLinear(name string, in, out int, relu bool, rng *rand.Rand) *Linear {
	l := &Linear{name: name, in: in, out: out, relu: relu}
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
	l.w = &model.Param{Name: name + ".weight", Shape: []int{out, in}, Data: wt, Donate: true}
	l.b = &model.Param{Name: name + ".bias", Shape: []int{out}, Data: bt, Donate: true}
	return l
}

// Name is the module name given to NewLinear.
func (l *Linear) Name() string { return l.name }

// Params lists weight then bias.
func (l *Linear) Params() []*model.Param { return []*model.Param{l.w, l.b} }

// dot is a four-way unrolled float32 dot product (a fixed summation order).
func dot(a, b []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}

func axpy(alpha float32, x, y []float32) {
	for i := range x {
		y[i] += alpha * x[i]
	}
}

// Forward computes the layer's output for a Batch input.
func (l *Linear) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	x, ok := in.(Batch)
	if !ok {
		return nil, fmt.Errorf("%s: input is %T, want testmodel.Batch", l.name, in)
	}
	if x.Cols != l.in {
		return nil, fmt.Errorf("%s: input has %d columns, want %d", l.name, x.Cols, l.in)
	}
	if l.w.Data == nil || l.b.Data == nil {
		return nil, fmt.Errorf("%s: weight not gathered", l.name)
	}
	w, err := readParam(ctx, l.w.Data)
	if err != nil {
		return nil, err
	}
	b, err := readParam(ctx, l.b.Data)
	if err != nil {
		return nil, err
	}
	if l.OnForward != nil {
		l.OnForward(w, b)
	}
	y := Batch{Rows: x.Rows, Cols: l.out, X: make([]float32, x.Rows*l.out)}
	for r := range x.Rows {
		xr := x.X[r*l.in : (r+1)*l.in]
		for o := range l.out {
			s := b[o] + dot(xr, w[o*l.in:(o+1)*l.in])
			if l.relu && s < 0 {
				s = 0
			}
			y.X[r*l.out+o] = s
		}
	}
	l.x, l.y = x, y
	return y, nil
}

// Backward adds the weight and bias gradients into the bound Grads and
// returns the gradient with respect to the input.
func (l *Linear) Backward(ctx context.Context, gradOut model.Activation) (model.Activation, error) {
	gy, ok := gradOut.(Batch)
	if !ok {
		return nil, fmt.Errorf("%s: gradient is %T, want testmodel.Batch", l.name, gradOut)
	}
	if l.w.Data == nil || l.w.Grad == nil && !l.w.Frozen || l.b.Grad == nil && !l.b.Frozen {
		return nil, fmt.Errorf("%s: weight or grad not bound in backward", l.name)
	}
	w, err := readParam(ctx, l.w.Data)
	if err != nil {
		return nil, err
	}
	gw, doneW, err := gradOnHost(ctx, l.w)
	if err != nil {
		return nil, err
	}
	gb, doneB, err := gradOnHost(ctx, l.b)
	if err != nil {
		doneW(false)
		return nil, err
	}
	// float32 gradients accumulate in place; half ones through a float32
	// scratch added with one rounding per element.
	dw, db, direct := l.gradTargets(gw, gb)
	gx := Batch{Rows: gy.Rows, Cols: l.in, X: make([]float32, gy.Rows*l.in)}
	for r := range gy.Rows {
		xr := l.x.X[r*l.in : (r+1)*l.in]
		gxr := gx.X[r*l.in : (r+1)*l.in]
		for o := range l.out {
			v := gy.X[r*l.out+o]
			if v == 0 || l.relu && l.y.X[r*l.out+o] <= 0 {
				continue
			}
			db[o] += v
			axpy(v, xr, dw[o*l.in:(o+1)*l.in])
			axpy(v, w[o*l.in:(o+1)*l.in], gxr)
		}
	}
	if l.InjectInf != nil && l.InjectInf() {
		dw[0] = float32(math.Inf(1))
	}
	if !direct {
		AddInto(gw, dw)
		AddInto(gb, db)
	}
	errW, errB := doneW(true), doneB(true)
	if errW != nil {
		return nil, errW
	}
	return gx, errB
}

func (l *Linear) gradTargets(gw, gb *tensor.Tensor) (dw, db []float32, direct bool) {
	if gw.DType() == tensor.Float32 && gb.DType() == tensor.Float32 {
		dw, _ = gw.Float32s()
		db, _ = gb.Float32s()
		return dw, db, true
	}
	if l.dw == nil {
		l.dw, l.db = make([]float32, l.out*l.in), make([]float32, l.out)
	}
	clear(l.dw)
	clear(l.db)
	return l.dw, l.db, false
}

// MLP is a stack of Linear modules (ReLU between them) with a
// mean-squared-error loss.
type MLP struct {
	Layers []*Linear
	// Order, when set, overrides Modules (tests of diverging ranks).
	Order func() []model.Module
}

// NewMLP builds layers fc1, fc2, ... of widths sizes[0] → sizes[1] → ...,
// initialised from seed.
func NewMLP(seed uint64, sizes ...int) *MLP {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := &MLP{}
	for i := 0; i+1 < len(sizes); i++ {
		m.Layers = append(m.Layers, NewLinear(fmt.Sprintf("fc%d", i+1), sizes[i], sizes[i+1], i+2 < len(sizes), rng))
	}
	return m
}

// FreeUndonated frees the initial values Initialize did not take: after a
// failed Initialize the donated tensors are still the caller's
// (model.Param.Donate stays set); after a successful one there is nothing
// to free.
func (m *MLP) FreeUndonated() {
	for _, l := range m.Layers {
		for _, p := range l.Params() {
			if p.Donate && p.Data != nil {
				p.Data.Free()
				p.Data, p.Donate = nil, false
			}
		}
	}
}

// Modules lists the layers in order (or what Order returns).
func (m *MLP) Modules() []model.Module {
	if m.Order != nil {
		return m.Order()
	}
	out := make([]model.Module, len(m.Layers))
	for i, l := range m.Layers {
		out[i] = l
	}
	return out
}

// Loss is the mean squared error of out against target (both Batches) and
// its gradient times gradScale.
func (m *MLP) Loss(_ context.Context, out, target model.Activation, gradScale float64) (float64, model.Activation, error) {
	y, ok1 := out.(Batch)
	t, ok2 := target.(Batch)
	if !ok1 || !ok2 || len(y.X) != len(t.X) {
		return 0, nil, fmt.Errorf("testmodel: loss of %T against %T: want two Batches of one size", out, target)
	}
	n := float64(len(y.X))
	g := Batch{Rows: y.Rows, Cols: y.Cols, X: make([]float32, len(y.X))}
	var loss float64
	for i, v := range y.X {
		d := float64(v) - float64(t.X[i])
		loss += d * d
		g.X[i] = float32(2 * d / n * gradScale)
	}
	return loss / n, g, nil
}

// Dataset is a fixed random regression problem.
type Dataset struct {
	in, out int
	x, y    []float32
}

// NewDataset draws samples inputs of width in and targets of width out.
func NewDataset(seed uint64, samples, in, out int) *Dataset {
	rng := rand.New(rand.NewPCG(seed, 11))
	d := &Dataset{in: in, out: out, x: make([]float32, samples*in), y: make([]float32, samples*out)}
	for i := range d.x {
		d.x[i] = float32(rng.NormFloat64())
	}
	for i := range d.y {
		d.y[i] = float32(rng.NormFloat64() * 0.5)
	}
	return d
}

// Micro returns samples [lo, lo+n) of step's slice (global samples a
// step, wrapping around the data set).
func (d *Dataset) Micro(step, global, lo, n int) model.MicroBatch {
	samples := len(d.x) / d.in
	base := (step * global) % samples
	x := Batch{Rows: n, Cols: d.in, X: make([]float32, 0, n*d.in)}
	y := Batch{Rows: n, Cols: d.out, X: make([]float32, 0, n*d.out)}
	for s := base + lo; s < base+lo+n; s++ {
		k := s % samples
		x.X = append(x.X, d.x[k*d.in:(k+1)*d.in]...)
		y.X = append(y.X, d.y[k*d.out:(k+1)*d.out]...)
	}
	return model.MicroBatch{Input: x, Target: y}
}

// RankBatch is the micro-batches of rank r (of n) for one step of a global
// batch split into gas accumulation steps: micro-batch j of rank r holds
// samples [(j·n + r)·mb, +mb) of the step's slice.
func (d *Dataset) RankBatch(step, global, n, r, gas int) []model.MicroBatch {
	mb := global / (n * gas)
	out := make([]model.MicroBatch, gas)
	for j := range gas {
		out[j] = d.Micro(step, global, (j*n+r)*mb, mb)
	}
	return out
}
