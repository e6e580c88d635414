package main

import (
	"context"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// timedModel is the bubble benchmark's model: a chain of bias layers
// (out = in + b) whose forward and backward each take a fixed time. The
// time is spent sleeping, not computing, so that the stages, which share
// this machine's few cores, take the times the pipeline theory assumes
// (equal, independent stage times) and the measurement isolates what the
// engine adds: the schedule's order, the blocking transfers, the step.
type timedModel struct {
	mods     []model.Module
	width    int
	fwd, bwd time.Duration // per module
}

func newTimedModel(layers, width int, fwd, bwd time.Duration) *timedModel {
	m := &timedModel{width: width, fwd: fwd, bwd: bwd}
	for l := range layers {
		b, _ := tensor.Empty(tensor.Float32, width)
		m.mods = append(m.mods, &timedLayer{m: m, b: &model.Param{Name: fmt.Sprintf("layer.%d.bias", l), Shape: []int{width}, Data: b, Donate: true}})
	}
	return m
}

func (m *timedModel) Modules() []model.Module { return m.mods }

// Loss is 0.5·mean(out²); its gradient is gradScale·out/n.
func (m *timedModel) Loss(ctx context.Context, out, _ model.Activation, gradScale float64) (float64, model.Activation, error) {
	x, err := out.(*tensor.Tensor).Float32s()
	if err != nil {
		return 0, nil, err
	}
	a, _ := tensor.ArenaFromContext(ctx)
	g, err := a.Float32(len(x))
	if err != nil {
		return 0, nil, err
	}
	gv, _ := g.Float32s()
	var loss float64
	for i, v := range x {
		loss += 0.5 * float64(v) * float64(v)
		gv[i] = float32(gradScale * float64(v) / float64(len(x)))
	}
	return loss / float64(len(x)), g, nil
}

// NewPart shares the layers: they keep nothing between calls.
func (m *timedModel) NewPart(start, stop int) (model.Part, error) {
	if start < 0 || stop > len(m.mods) || start >= stop {
		return nil, fmt.Errorf("timedModel.NewPart: [%d, %d) of %d layers", start, stop, len(m.mods))
	}
	return &timedPart{m: m, mods: m.mods[start:stop], first: start == 0}, nil
}

type timedPart struct {
	m     *timedModel
	mods  []model.Module
	first bool
	in    *tensor.Tensor
}

func (p *timedPart) Modules() []model.Module { return p.mods }

func (p *timedPart) Input(_ context.Context, mb model.MicroBatch) (*tensor.Tensor, error) {
	if p.first {
		return nil, nil
	}
	n := mb.Input.(*tensor.Tensor).Numel()
	if p.in == nil || p.in.Numel() != n {
		if p.in != nil {
			p.in.Free()
		}
		t, err := tensor.Empty(tensor.Float32, n)
		if err != nil {
			return nil, err
		}
		p.in = t
	}
	return p.in, nil
}

func (p *timedPart) Loss(ctx context.Context, out, target model.Activation, gradScale float64) (float64, model.Activation, error) {
	return p.m.Loss(ctx, out, target, gradScale)
}

func (p *timedPart) Free() {
	if p.in != nil {
		p.in.Free()
		p.in = nil
	}
}

// timedLayer is out = in + b (b broadcast over rows), taking m.fwd forward
// and m.bwd backward.
type timedLayer struct {
	m *timedModel
	b *model.Param
}

func (l *timedLayer) Name() string           { return l.b.Name[:len(l.b.Name)-len(".bias")] }
func (l *timedLayer) Params() []*model.Param { return []*model.Param{l.b} }

func (l *timedLayer) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	start := time.Now()
	x, err := in.(*tensor.Tensor).Float32s()
	if err != nil {
		return nil, err
	}
	a, _ := tensor.ArenaFromContext(ctx)
	out, err := a.Float32(len(x))
	if err != nil {
		return nil, err
	}
	o, _ := out.Float32s()
	b, _ := l.b.Data.Float32s()
	for i, v := range x {
		o[i] = v + b[i%len(b)]
	}
	time.Sleep(l.m.fwd - time.Since(start))
	return out, nil
}

func (l *timedLayer) Backward(_ context.Context, g model.Activation) (model.Activation, error) {
	start := time.Now()
	d, err := g.(*tensor.Tensor).Float32s()
	if err != nil {
		return nil, err
	}
	gb, err := l.b.Grad.Float32s()
	if err != nil {
		return nil, err
	}
	for i, v := range d {
		gb[i%len(gb)] += v
	}
	time.Sleep(l.m.bwd - time.Since(start))
	return g, nil
}
