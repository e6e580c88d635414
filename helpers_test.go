package deepgo_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

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

// plainTrain is the reference the engine tests compare with: the same MLP,
// data and config (AdamW lr 0.002 wd 0.01, gradient_clipping maxNorm)
// trained with no engine. Each step runs the modules' own Forward, Loss and
// Backward on the whole global batch, with float32 gradients bound by
// hand, then testmodel.Plain clips them and runs a float64 AdamW. Every
// engine run, whatever its stage, world and accumulation, must give the
// gradient of this batch's loss: micro-batches are equal slices of it.
func plainTrain(steps int, maxNorm float64) (*result, error) {
	return plainTrainWith(steps, maxNorm, nil)
}

// plainTrainWith is plainTrain with before(step, opt) called before each
// step's update, to set the AdamW hyperparameters a schedule gives it.
func plainTrainWith(steps int, maxNorm float64, before func(step int, opt *testmodel.AdamW)) (*result, error) {
	return plainTrainFrozen(steps, maxNorm, "", tensor.Float32, before)
}

// plainTrainFrozen is plainTrainWith with the parameters freeze matches
// frozen (freezeMLP): they get no gradient, and the clipping and AdamW
// (its weight decay included) see only the others, so they keep their
// initial values, rounded to the working dtype dt as the engine keeps
// them, which the result reports with the trained ones.
func plainTrainFrozen(steps int, maxNorm float64, freeze string, dt tensor.DType, before func(step int, opt *testmodel.AdamW)) (*result, error) {
	return plainTrainNorm(steps, maxNorm, freeze, dt, false, before)
}

// plainTrainNorm is plainTrainFrozen; with normAll the frozen parameters'
// gradients are computed and count in the clipping norm (not updated):
// what an engine that let them into the norm would do.
func plainTrainNorm(steps int, maxNorm float64, freeze string, dt tensor.DType, normAll bool, before func(step int, opt *testmodel.AdamW)) (*result, error) {
	ctx := context.Background()
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	m := testmodel.NewMLP(1, sizes...)
	freezeMLP(m, freeze)
	var params, frozen []*model.Param
	for _, l := range m.Layers {
		for _, p := range l.Params() {
			if p.Frozen {
				frozen = append(frozen, p)
				defer p.Data.Free()
				if v, err := p.Data.Float32s(); err == nil && dt != tensor.Float32 {
					for i := range v {
						v[i] = tensor.ToHalfPrecision(dt, v[i])
					}
				}
				continue
			}
			params = append(params, p)
		}
	}
	for _, p := range params {
		g, err := tensor.Empty(tensor.Float32, p.Shape...)
		if err != nil {
			return nil, err
		}
		p.Grad = g
		defer p.Data.Free()
		defer g.Free()
	}
	ref, err := testmodel.NewPlain(params, testmodel.NewAdamW(0.002, 0.01), maxNorm)
	if err != nil {
		return nil, err
	}
	if normAll {
		for _, p := range frozen {
			g, err := tensor.Empty(tensor.Float32, p.Shape...)
			if err != nil {
				return nil, err
			}
			defer g.Free()
			p.Grad = g
		}
		ref.NormOnly = frozen
	}
	res := &result{}
	for s := range steps {
		loss, err := plainGrads(ctx, m, append(slices.Clip(params), ref.NormOnly...), data.Micro(s, globalBatch, 0, globalBatch))
		if err != nil {
			return nil, err
		}
		if before != nil {
			before(s, ref.Opt)
		}
		if err := ref.Step(); err != nil {
			return nil, err
		}
		res.losses = append(res.losses, loss)
	}
	res.params, res.clipped = ref.Values(), ref.Clipped
	for _, p := range frozen {
		v, err := p.Data.Float32s()
		if err != nil {
			return nil, err
		}
		res.params[p.Name] = slices.Clone(v)
	}
	return res, nil
}

// freezeMLP sets Frozen on the parameters of m whose names freeze (a
// regexp; "" none) matches.
func freezeMLP(m *testmodel.MLP, freeze string) {
	if freeze == "" {
		return
	}
	re := regexp.MustCompile(freeze)
	for _, l := range m.Layers {
		for _, p := range l.Params() {
			p.Frozen = re.MatchString(p.Name)
		}
	}
}

// plainGrads leaves in params' float32 Grad the gradient of m's loss on mb
// (cleared first: one micro-batch, the whole global batch) and returns the
// loss: plainTrain's forward and backward.
func plainGrads(ctx context.Context, m *testmodel.MLP, params []*model.Param, mb model.MicroBatch) (float64, error) {
	for _, p := range params {
		g, _ := p.Grad.Float32s()
		clear(g)
	}
	mods := m.Modules()
	act := mb.Input
	var err error
	for _, mod := range mods {
		if act, err = mod.Forward(ctx, act); err != nil {
			return 0, err
		}
	}
	loss, grad, err := m.Loss(ctx, act, mb.Target, 1)
	if err != nil {
		return 0, err
	}
	for i := len(mods) - 1; i >= 0; i-- {
		if grad, err = mods[i].Backward(ctx, grad); err != nil {
			return 0, err
		}
	}
	return loss, nil
}

// plainMLP is the plain loops' MLP with a float32 gradient bound to each
// parameter by hand; free frees the parameters and gradients.
func plainMLP() (m *testmodel.MLP, params []*model.Param, free func(), err error) {
	m = testmodel.NewMLP(1, sizes...)
	for _, l := range m.Layers {
		params = append(params, l.Params()...)
	}
	free = func() {
		for _, p := range params {
			p.Data.Free()
			if p.Grad != nil {
				p.Grad.Free()
			}
		}
	}
	for _, p := range params {
		if p.Grad, err = tensor.Empty(tensor.Float32, p.Shape...); err != nil {
			free()
			return nil, nil, nil, err
		}
	}
	return m, params, free, nil
}
