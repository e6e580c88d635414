package testmodel

import (
	"fmt"
	"math"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// AdamW is a float64 reference of the optimizer DeepSpeed runs for
// "optimizer": {"type": "AdamW"}: torch.optim.AdamW's update with bias
// correction and weight decay decoupled from the gradient. The engine
// equivalence tests train a model with it and no engine, and compare the
// engine's float32 result with that. It is the textbook formula evaluated
// in float64, independent of package optim.
type AdamW struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64

	step int
	m, v [][]float64
}

// NewAdamW returns AdamW with learning rate lr and weight decay wd, and
// DeepSpeed's defaults for the rest: betas (0.9, 0.999), eps 1e-8.
func NewAdamW(lr, wd float64) *AdamW {
	return &AdamW{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: wd}
}

// Step applies one update to params from grads (one slice per tensor, the
// same shapes at every call):
//
//	p ← p − lr·wd·p
//	m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²
//	p ← p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + eps)
func (a *AdamW) Step(params, grads [][]float64) {
	if a.m == nil {
		for _, p := range params {
			a.m = append(a.m, make([]float64, len(p)))
			a.v = append(a.v, make([]float64, len(p)))
		}
	}
	a.step++
	bc1 := 1 - math.Pow(a.Beta1, float64(a.step))
	bc2 := 1 - math.Pow(a.Beta2, float64(a.step))
	for j, p := range params {
		m, v, g := a.m[j], a.v[j], grads[j]
		for i := range p {
			m[i] = a.Beta1*m[i] + (1-a.Beta1)*g[i]
			v[i] = a.Beta2*v[i] + (1-a.Beta2)*g[i]*g[i]
			p[i] -= a.LR * a.WeightDecay * p[i]
			p[i] -= a.LR / bc1 * m[i] / (math.Sqrt(v[i])/math.Sqrt(bc2) + a.Eps)
		}
	}
}

// ClipGrads scales grads in place as DeepSpeed's gradient_clipping does
// (torch's clip_grad_norm_): by maxNorm/(‖g‖₂ + 1e-6) when that is below 1.
// It returns the global L2 norm before clipping and the factor applied.
func ClipGrads(grads [][]float64, maxNorm float64) (norm, coef float64) {
	for _, g := range grads {
		for _, x := range g {
			norm += x * x
		}
	}
	norm = math.Sqrt(norm)
	coef = 1.0
	if c := maxNorm / (norm + 1e-6); maxNorm > 0 && c < 1 {
		coef = c
		for _, g := range grads {
			for i := range g {
				g[i] *= c
			}
		}
	}
	return norm, coef
}

// Plain is a training step with no engine: it keeps a float64 master copy
// of float32 parameters bound by hand, and Step clips their float32
// gradients, runs AdamW on the master and writes it back, rounded, into
// each Param.Data for the next forward.
type Plain struct {
	Params  []*model.Param
	Master  [][]float64
	Opt     *AdamW
	MaxNorm float64 // gradient_clipping; <= 0 disables it
	Clipped int     // steps whose gradients were clipped
	// NormOnly are parameters whose float32 gradients count in the
	// clipping norm but that are not updated: a wrong handling of frozen
	// parameters, for tests that show it changes the result.
	NormOnly []*model.Param
}

// NewPlain copies the values of params (float32 Data, float32 Grad) into
// a float64 master.
func NewPlain(params []*model.Param, opt *AdamW, maxNorm float64) (*Plain, error) {
	p := &Plain{Params: params, Opt: opt, MaxNorm: maxNorm}
	for _, prm := range params {
		d, err := prm.Data.Float32s()
		if err != nil {
			return nil, fmt.Errorf("testmodel.NewPlain: %s: %w", prm.Name, err)
		}
		if prm.Grad == nil || prm.Grad.DType() != tensor.Float32 {
			return nil, fmt.Errorf("testmodel.NewPlain: %s: need a float32 gradient bound", prm.Name)
		}
		m := make([]float64, len(d))
		for i, x := range d {
			m[i] = float64(x)
		}
		p.Master = append(p.Master, m)
	}
	return p, nil
}

// Step updates the parameters from the gradients the last backward left.
func (p *Plain) Step() error {
	grads := make([][]float64, len(p.Params))
	for j, prm := range p.Params {
		g, err := prm.Grad.Float32s()
		if err != nil {
			return fmt.Errorf("testmodel.Plain.Step: %s: %w", prm.Name, err)
		}
		grads[j] = make([]float64, len(g))
		for i, x := range g {
			grads[j][i] = float64(x)
		}
	}
	for _, prm := range p.NormOnly {
		g, err := prm.Grad.Float32s()
		if err != nil {
			return fmt.Errorf("testmodel.Plain.Step: %s: %w", prm.Name, err)
		}
		extra := make([]float64, len(g))
		for i, x := range g {
			extra[i] = float64(x)
		}
		grads = append(grads, extra)
	}
	if _, coef := ClipGrads(grads, p.MaxNorm); coef < 1 {
		p.Clipped++
	}
	grads = grads[:len(p.Params)]
	p.Opt.Step(p.Master, grads)
	for j, prm := range p.Params {
		d, _ := prm.Data.Float32s()
		for i, x := range p.Master[j] {
			d[i] = float32(x)
		}
	}
	return nil
}

// Values returns the float64 master rounded to float32, by parameter name.
func (p *Plain) Values() map[string][]float32 {
	out := make(map[string][]float32, len(p.Params))
	for j, prm := range p.Params {
		v := make([]float32, len(p.Master[j]))
		for i, x := range p.Master[j] {
			v[i] = float32(x)
		}
		out[prm.Name] = v
	}
	return out
}
