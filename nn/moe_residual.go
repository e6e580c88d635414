package nn

import (
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// residual is PR-MoE (DeepSpeed's MoE with use_residual): a dense GPT MLP
// beside the experts and a coefficient Linear(C, 2) with bias, mixing
//
//	c   = softmax(coefficient(x))
//	out = experts(x) · c[0] + mlp(x) · c[1]
//
// named as DeepSpeed's MoE module names them under the block's MLP
// (mlp.mlp.c_fc, mlp.mlp.c_proj, mlp.coefficient).
type residual struct {
	FC, Proj, Coef *Linear
}

func newResidual(prefix string, width int) *residual {
	return &residual{FC: NewLinear(prefix+".mlp.c_fc", width, 4*width, true),
		Proj: NewLinear(prefix+".mlp.c_proj", 4*width, width, true),
		Coef: NewLinear(prefix+".coefficient", width, 2, true)}
}

// linears lists the residual's Linears; none when r is nil.
func (r *residual) linears() []*Linear {
	if r == nil {
		return nil
	}
	return []*Linear{r.FC, r.Proj, r.Coef}
}

func (r *residual) params() []*model.Param {
	var ps []*model.Param
	for _, l := range r.linears() {
		ps = append(ps, l.Params()...)
	}
	return ps
}

// residualActs are PR-MoE's buffers for n tokens and the host copies its
// backward reads.
type residualActs struct {
	fc, act, dfc, dact *tensor.Tensor // [n, 4C]
	out, experts, dx   *tensor.Tensor // [n, C]: the MLP's output, the experts', an input gradient
	dexp, dout         *tensor.Tensor // [n, C]: the experts' and the MLP's output gradients
	logits, dlogits    *tensor.Tensor // [n, 2]
	coef, outH, expH   []float32      // softmax(logits), host copies of out and experts
}

func (r *residual) newActs(a *Arena, n, c, hidden int) (*residualActs, error) {
	var s residualActs
	for _, f := range []struct {
		p     **tensor.Tensor
		shape []int
	}{{&s.fc, []int{n, hidden}}, {&s.act, []int{n, hidden}}, {&s.dfc, []int{n, hidden}}, {&s.dact, []int{n, hidden}},
		{&s.out, []int{n, c}}, {&s.experts, []int{n, c}}, {&s.dx, []int{n, c}}, {&s.dexp, []int{n, c}}, {&s.dout, []int{n, c}},
		{&s.logits, []int{n, 2}}, {&s.dlogits, []int{n, 2}}} {
		var err error
		if *f.p, err = a.Float32(f.shape...); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

// forward computes the layer's output out[n, C] from in[n, C].
func (m *MoE) forward(be backend.NN, out, in *tensor.Tensor, a *moeActs, n int) error {
	if m.Res == nil {
		return m.forwardExperts(be, out, in, a, n)
	}
	r, s, c := m.Res, a.res, m.Width
	if err := m.forwardExperts(be, s.experts, in, a, n); err != nil {
		return err
	}
	steps := []func() error{
		func() error { return r.FC.Forward(be, s.fc, in, n) },
		func() error { return m.Act.Forward(be, s.act, s.fc, n*m.Hidden) },
		func() error { return r.Proj.Forward(be, s.out, s.act, n) },
		func() error { return r.Coef.Forward(be, s.logits, in, n) },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	lg := make([]float32, 2*n)
	s.outH, s.expH = make([]float32, n*c), make([]float32, n*c)
	for _, d := range []struct {
		h []float32
		t *tensor.Tensor
	}{{lg, s.logits}, {s.outH, s.out}, {s.expH, s.experts}} {
		if err := download(be, d.h, d.t); err != nil {
			return err
		}
	}
	s.coef = make([]float32, 2*n)
	softmaxRows(s.coef, lg, n, 2)
	oh := make([]float32, n*c)
	for t := 0; t < n; t++ {
		c0, c1 := s.coef[2*t], s.coef[2*t+1]
		for j := t * c; j < (t+1)*c; j++ {
			oh[j] = s.expH[j]*c0 + s.outH[j]*c1
		}
	}
	return upload(be, out, oh)
}

// backward writes din[n, C] (whatever it held) from dout[n, C] and
// accumulates every parameter gradient of the layer.
func (m *MoE) backward(be backend.NN, din, dout, in *tensor.Tensor, a *moeActs, n int) error {
	if m.Res == nil {
		return m.backwardExperts(be, din, dout, in, a, n)
	}
	r, s, c := m.Res, a.res, m.Width
	dh := make([]float32, n*c)
	if err := download(be, dh, dout); err != nil {
		return err
	}
	dexp, dmlp, dl := make([]float32, n*c), make([]float32, n*c), make([]float32, 2*n)
	for t := 0; t < n; t++ {
		c0, c1 := s.coef[2*t], s.coef[2*t+1]
		var d0, d1 float64
		for j := t * c; j < (t+1)*c; j++ {
			dexp[j], dmlp[j] = dh[j]*c0, dh[j]*c1
			d0 += float64(dh[j]) * float64(s.expH[j])
			d1 += float64(dh[j]) * float64(s.outH[j])
		}
		// softmax over two: dz_i = c_i (d_i − Σ c·d)
		dot := float64(c0)*d0 + float64(c1)*d1
		dl[2*t], dl[2*t+1] = float32(float64(c0)*(d0-dot)), float32(float64(c1)*(d1-dot))
	}
	for _, u := range []struct {
		t *tensor.Tensor
		h []float32
	}{{s.dexp, dexp}, {s.dout, dmlp}, {s.dlogits, dl}} {
		if err := upload(be, u.t, u.h); err != nil {
			return err
		}
	}
	steps := []func() error{
		func() error { return m.backwardExperts(be, din, s.dexp, in, a, n) },
		func() error { return r.Proj.backwardWrite(be, s.dact, s.dout, s.act, n) },
		func() error { return m.Act.backwardWrite(be, s.dfc, s.fc, s.dact, n*m.Hidden) },
		func() error { return r.FC.backwardWrite(be, s.dx, s.dfc, in, n) },
		func() error { return add(be, din, din, s.dx, n*c) },
		func() error { return r.Coef.backwardWrite(be, s.dx, s.dlogits, in, n) },
		func() error { return add(be, din, din, s.dx, n*c) },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}
