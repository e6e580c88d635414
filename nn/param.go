package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// numel is the element count of p's declared shape.
func numel(p *model.Param) int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

func newParam(name string, shape ...int) *model.Param { return &model.Param{Name: name, Shape: shape} }

// HasParams is anything with trainable parameters: every layer of this
// package, the GPT model and any model.Module. Params lists them in a fixed
// order, each exactly once (a tied weight is one model.Param, even though
// it is used twice). The layers' parameters are model.Params, so an engine
// binds them directly, with no copy.
type HasParams interface {
	Params() []*model.Param
}

// Specs lists m's parameters as tensor.ParamSpecs, in order.
func Specs(m HasParams) []tensor.ParamSpec {
	ps := m.Params()
	out := make([]tensor.ParamSpec, len(ps))
	for i, p := range ps {
		out[i] = tensor.ParamSpec{Name: p.Name, Shape: append([]int(nil), p.Shape...)}
	}
	return out
}

// Bind points m's parameters at values[i] and grads[i] (one pair per Param,
// in Params order; grads may be nil for inference), checking each as the
// layers do (checkParam): live, host, contiguous, a dtype the layers take,
// and the element count of the declared shape.
func Bind(m HasParams, values, grads []*tensor.Tensor) error {
	ps := m.Params()
	if len(values) != len(ps) || (grads != nil && len(grads) != len(ps)) {
		return fmt.Errorf("nn.Bind: %d parameters, got %d values and %d grads", len(ps), len(values), len(grads))
	}
	for i, p := range ps {
		if err := checkParam("Bind", tensor.CPU, p, "value", values[i]); err != nil {
			return err
		}
		if grads != nil {
			if err := checkParam("Bind", tensor.CPU, p, "gradient", grads[i]); err != nil {
				return err
			}
		}
	}
	for i, p := range ps {
		p.Data = values[i]
		if grads != nil {
			p.Grad = grads[i]
		}
	}
	return nil
}

// ParamBuffers is a standalone home for a module's parameters: one flat
// buffer of values and one of gradients, each parameter a view of both.
// Trainers without an engine (tests, benchmarks) use it; the engine binds
// its own partitioned buffers instead.
type ParamBuffers struct {
	Values, Grads *tensor.Flat
}

// NewParamBuffers allocates zeroed flat value and gradient buffers for m and
// binds every parameter to its views.
func NewParamBuffers(m HasParams) (*ParamBuffers, error) {
	specs := Specs(m)
	vals, err := tensor.NewFlat(tensor.Float32, specs, 16, 1)
	if err != nil {
		return nil, fmt.Errorf("nn.NewParamBuffers: %w", err)
	}
	grads, err := tensor.NewFlat(tensor.Float32, specs, 16, 1)
	if err != nil {
		vals.Free()
		return nil, fmt.Errorf("nn.NewParamBuffers: %w", err)
	}
	vs := make([]*tensor.Tensor, len(specs))
	gs := make([]*tensor.Tensor, len(specs))
	for i := range specs {
		if vs[i], err = vals.View(i); err == nil {
			gs[i], err = grads.View(i)
		}
		if err != nil {
			vals.Free()
			grads.Free()
			return nil, fmt.Errorf("nn.NewParamBuffers: %w", err)
		}
	}
	if err := Bind(m, vs, gs); err != nil {
		vals.Free()
		grads.Free()
		return nil, err
	}
	return &ParamBuffers{Values: vals, Grads: grads}, nil
}

// ZeroGrads sets every gradient to zero.
func (b *ParamBuffers) ZeroGrads() error {
	g, err := b.Grads.Data.Float32s()
	if err != nil {
		return err
	}
	clear(g)
	return nil
}

// Free releases both buffers; the bound views die with them.
func (b *ParamBuffers) Free() {
	b.Values.Free()
	b.Grads.Free()
}

// NumParams sums the parameter counts of m.
func NumParams(m HasParams) int {
	n := 0
	for _, p := range m.Params() {
		n += numel(p)
	}
	return n
}
