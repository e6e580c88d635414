// Package mlp is a user-written deepgo model in one file: an MLP whose
// layers compute on the engine's backend (backend.FromContext) with
// activations from its per-micro-step arena (tensor.ArenaFromContext), so
// nothing is freed by hand. Under bf16/fp16 they use the engine's half
// weights directly: no float32 replica, so ZeRO-3 really partitions them.
package mlp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Batch is a micro-batch: Rows samples of inputs X and targets Y,
// row-major, in Go memory; model.MicroBatch{Input: b, Target: b.Y}.
type Batch struct {
	X, Y []float32
	Rows int
}

// BatchSize is Rows (the engine checks it against the config).
func (b Batch) BatchSize() int { return b.Rows }

// Layer is y = x Wᵀ + b, followed by ReLU unless it is the last layer.
type Layer struct {
	name string
	relu bool
	W, B *model.Param
	x, y *tensor.Tensor // this micro-step's input and output (arena)
}

// Name is the layer's name.
func (l *Layer) Name() string { return l.name }

// Params lists the weight and the bias.
func (l *Layer) Params() []*model.Param { return []*model.Param{l.W, l.B} }

// env is what a layer needs from the engine: its matmul and the arena.
func env(ctx context.Context) (lin backend.Linear, a *tensor.Arena, err error) {
	be, _ := backend.FromContext(ctx)
	lin, ok := be.(backend.Linear)
	if a, ok2 := tensor.ArenaFromContext(ctx); ok && ok2 {
		return lin, a, nil
	}
	return nil, nil, errors.New("mlp: run the model through a deepgo engine (no matmul backend or arena in the context)")
}

// Forward takes a Batch (first layer) or the previous layer's output.
func (l *Layer) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	lin, a, err := env(ctx)
	if err != nil {
		return nil, err
	}
	if b, ok := in.(Batch); ok {
		if l.x, err = a.Float32(b.Rows, l.W.Shape[1]); err != nil {
			return nil, err
		}
		copy(f32(l.x), b.X)
	} else if l.x, ok = in.(*tensor.Tensor); !ok {
		return nil, fmt.Errorf("mlp: %s: input is %T", l.name, in)
	}
	if l.y, err = a.Float32(l.x.Shape()[0], l.W.Shape[0]); err == nil {
		err = lin.LinearForward(l.y, l.x, l.W.Data, l.B.Data)
	}
	if err != nil {
		return nil, err
	}
	for i, y := 0, f32(l.y); l.relu && i < len(y); i++ { // ReLU
		y[i] = max(y[i], 0)
	}
	return l.y, nil
}

// Backward adds into W.Grad and B.Grad and returns the input gradient.
func (l *Layer) Backward(ctx context.Context, gradOut model.Activation) (model.Activation, error) {
	lin, a, err := env(ctx)
	if err != nil {
		return nil, err
	}
	g, y := gradOut.(*tensor.Tensor), f32(l.y)           // g: this micro-step's arena buffer
	for i, gv := 0, f32(g); l.relu && i < len(gv); i++ { // ReLU, masked in place
		if y[i] <= 0 {
			gv[i] = 0
		}
	}
	din, err := a.Float32(l.x.Shape()...) // zeroed; LinearBackward adds
	if err == nil {
		err = lin.LinearBackward(din, l.W.Grad, l.B.Grad, g, l.x, l.W.Data)
	}
	return din, err
}

// MLP is the layers in order with a mean-squared-error loss.
type MLP struct{ Layers []*Layer }

// New builds fc1, fc2, ... of widths sizes[0] → sizes[1] → ..., weights and
// biases drawn uniformly from ±1/√in (from seed) and donated to the engine.
func New(seed uint64, sizes ...int) *MLP {
	rng, m := rand.New(rand.NewPCG(seed, 1)), &MLP{}
	for i := 1; i < len(sizes); i++ {
		in, out, name := sizes[i-1], sizes[i], fmt.Sprintf("fc%d", i)
		v := make([]float32, out*in+out)
		for j := range v {
			v[j] = float32((2*rng.Float64() - 1) / math.Sqrt(float64(in)))
		}
		w, _ := tensor.FromFloat32(v[:out*in], out, in)
		b, _ := tensor.FromFloat32(v[out*in:], out)
		m.Layers = append(m.Layers, &Layer{name: name, relu: i < len(sizes)-1,
			W: &model.Param{Name: name + ".weight", Shape: []int{out, in}, Data: w, Donate: true},
			B: &model.Param{Name: name + ".bias", Shape: []int{out}, Data: b, Donate: true}})
	}
	return m
}

// Modules lists the layers.
func (m *MLP) Modules() (out []model.Module) {
	for _, l := range m.Layers {
		out = append(out, l)
	}
	return out
}

// Loss is the mean squared error against target (a Batch's Y) and its
// gradient times gradScale (the engine's loss scale / accumulation steps).
func (m *MLP) Loss(ctx context.Context, out, target model.Activation, gradScale float64) (float64, model.Activation, error) {
	_, a, err := env(ctx)
	if err != nil {
		return 0, nil, err
	}
	y, t := f32(out.(*tensor.Tensor)), target.([]float32)
	g, err := a.Float32(len(y))
	var loss float64
	for i, gv := 0, f32(g); err == nil && i < len(y); i++ {
		d := float64(y[i] - t[i])
		loss += d * d
		gv[i] = float32(2 * d / float64(len(y)) * gradScale)
	}
	return loss / float64(len(y)), g, err
}

// f32 views a float32 host tensor's elements (nil for anything else).
func f32(t *tensor.Tensor) []float32 { v, _ := t.Float32s(); return v }
