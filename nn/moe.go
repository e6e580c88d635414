package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// MoE is DeepSpeed's MOELayer at expert parallel size 1 in place of a
// block's MLP: logits = x wgᵀ (fp32, no bias), the gate's routes (Route),
// each expert a GPT MLP (c_fc, GELU, c_proj) run on the tokens routed to
// it, and out[s] = Σ_routes weight · expert(x[s]).
//
// The linear layers run on the backend; the routing, the gather of each
// expert's tokens and the weighted combine run in Go on host copies
// (download/upload through the backend's Copy), so the layer runs on any
// backend with the nn kernels, the simulated device included. Each expert
// runs on its kept tokens only (slots [0, Rows[e]) of DeepSpeed's capacity
// buffer; the empty slots DeepSpeed also runs are never combined, so they
// change no output or gradient).
//
// The aux loss: the GPT's Loss adds LossCoeff × Σ l_aux to the loss it
// returns and hands each MoE layer LossCoeff × gradScale, which its
// Backward adds into the gate logits' gradient (DeepSpeed's user adds
// l_aux to the loss before engine.backward, which scales it alike).
type MoE struct {
	Width, Hidden int
	Config        MoEConfig
	WG            *Linear   // deepspeed_moe.gate.wg: C -> E, no bias
	FC, Proj      []*Linear // deepspeed_moe.experts.deepspeed_experts.<i>.c_fc / .c_proj
	Act           GELU
	// Res is PR-MoE's residual MLP and coefficient (use_residual); nil
	// without.
	Res *residual
	// eval selects EvalCapacityFactor (GPT.SetTraining(false)).
	eval bool
	// dLAux is the aux loss's gradient scale for the next Backward
	// (LossCoeff × the loss's gradScale), set by the GPT's Loss.
	dLAux float64
	// LAux and ExpCounts are the last forward's l_aux and exp_counts.
	LAux      float32
	ExpCounts []int64
	// Dropped is the routes the last forward's capacity dropped.
	Dropped int
}

// NewMoE declares an MoE layer named name+".mlp.deepspeed_moe" (the
// Megatron-DeepSpeed names) over width channels.
func NewMoE(name string, width int, cfg MoEConfig) (*MoE, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if !cfg.On() {
		return nil, fmt.Errorf("nn.NewMoE(%s): num_experts 0", name)
	}
	p := name + ".mlp.deepspeed_moe"
	m := &MoE{Width: width, Hidden: 4 * width, Config: cfg, WG: NewLinear(p+".gate.wg", width, cfg.Experts, false)}
	for i := 0; i < cfg.Experts; i++ {
		e := fmt.Sprintf("%s.experts.deepspeed_experts.%d", p, i)
		m.FC = append(m.FC, NewLinear(e+".c_fc", width, 4*width, true))
		m.Proj = append(m.Proj, NewLinear(e+".c_proj", 4*width, width, true))
	}
	if cfg.UseResidual {
		m.Res = newResidual(name+".mlp", width)
	}
	return m, nil
}

// Params lists wg, then each expert's c_fc and c_proj.
func (m *MoE) Params() []*model.Param {
	ps := m.WG.Params()
	for i := range m.FC {
		ps = append(ps, m.FC[i].Params()...)
		ps = append(ps, m.Proj[i].Params()...)
	}
	return append(ps, m.Res.params()...)
}

func (m *MoE) check(op string, dev tensor.Device, grad bool) error {
	ls := append([]*Linear{m.WG}, m.FC...)
	for _, l := range append(append(ls, m.Proj...), m.Res.linears()...) {
		if err := l.check(op, dev, grad); err != nil {
			return err
		}
	}
	return nil
}

// moeActs is what an MoE layer's backward reads for n tokens: device
// buffers sized for K·n routed rows (an upper bound whatever the routing)
// and the host routing.
type moeActs struct {
	logits, dlogits *tensor.Tensor // [n, E]
	xin, dxin       *tensor.Tensor // [K·n, C]: expert inputs, grouped by expert
	fc, fcAct       *tensor.Tensor // [K·n, 4C]
	dfc, dfcAct     *tensor.Tensor // [K·n, 4C]
	eout            *tensor.Tensor // [K·n, C]: expert outputs, then their gradients
	dx              *tensor.Tensor // [n, C]: the gather's input gradient
	r               *Routing
	off             []int     // each expert's first row
	eoutHost        []float32 // expert outputs, for the weights' gradient
	res             *residualActs
}

func (m *MoE) newActs(a *Arena, n int) (*moeActs, error) {
	k, c, e := max(m.Config.K, 1), m.Width, m.Config.Experts
	var s moeActs
	var err error
	for _, f := range []struct {
		p     **tensor.Tensor
		shape []int
	}{{&s.logits, []int{n, e}}, {&s.dlogits, []int{n, e}}, {&s.xin, []int{k * n, c}}, {&s.dxin, []int{k * n, c}},
		{&s.fc, []int{k * n, m.Hidden}}, {&s.fcAct, []int{k * n, m.Hidden}}, {&s.dfc, []int{k * n, m.Hidden}},
		{&s.dfcAct, []int{k * n, m.Hidden}}, {&s.eout, []int{k * n, c}}, {&s.dx, []int{n, c}}} {
		if *f.p, err = a.Float32(f.shape...); err != nil {
			return nil, err
		}
	}
	if m.Res != nil {
		if s.res, err = m.Res.newActs(a, n, c, m.Hidden); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

// rows views rows [lo, lo+n) of t, a [*, w] buffer.
func rows(t *tensor.Tensor, lo, n, w int) (*tensor.Tensor, error) { return t.Slice(lo*w, n*w) }

// slot is the buffer row of route i, or -1 for a dropped route.
func (a *moeActs) slot(i int) int {
	x := a.r.Expert[i]
	if x < 0 {
		return -1
	}
	return a.off[x] + int(a.r.Loc[i])
}

// forwardExperts computes the experts' combined output out[n, C] from
// in[n, C] on be (the layer's output without PR-MoE's residual).
func (m *MoE) forwardExperts(be backend.NN, out, in *tensor.Tensor, a *moeActs, n int) error {
	c, e := m.Width, m.Config.Experts
	if err := m.WG.Forward(be, a.logits, in, n); err != nil {
		return err
	}
	lg := make([]float32, n*e)
	if err := download(be, lg, a.logits); err != nil {
		return err
	}
	r, err := Route(lg, n, e, m.Config.gate(!m.eval))
	if err != nil {
		return fmt.Errorf("nn.MoE(%s): %w", m.WG.W.Name, err)
	}
	a.r, a.off = r, make([]int, e+1)
	for x := 0; x < e; x++ {
		a.off[x+1] = a.off[x] + r.Rows[x]
	}
	m.LAux, m.ExpCounts = r.LAux, r.ExpCounts
	total := a.off[e]
	m.Dropped = len(r.Expert) - total
	xh := make([]float32, n*c)
	if err := download(be, xh, in); err != nil {
		return err
	}
	gath := make([]float32, total*c)
	for i := range r.Expert {
		if sl := a.slot(i); sl >= 0 {
			s := i % n
			copy(gath[sl*c:(sl+1)*c], xh[s*c:(s+1)*c])
		}
	}
	if total > 0 {
		if err := upload(be, a.xin, gath); err != nil {
			return err
		}
	}
	for x := 0; x < e; x++ {
		if err := m.expertForward(be, a, x); err != nil {
			return err
		}
	}
	a.eoutHost = make([]float32, total*c)
	if total > 0 {
		if err := download(be, a.eoutHost, a.eout); err != nil {
			return err
		}
	}
	// out[s] = Σ_r weight · eout[slot] in float32, routes in order
	oh := make([]float32, n*c)
	for i := range r.Expert {
		if sl := a.slot(i); sl >= 0 {
			s, w := i%n, r.Weight[i]
			for j := 0; j < c; j++ {
				oh[s*c+j] += w * a.eoutHost[sl*c+j]
			}
		}
	}
	return upload(be, out, oh)
}

// expertViews are expert x's rows of the layer's buffers.
type expertViews struct{ xin, fc, act, eout, dact, dfc, dxin *tensor.Tensor }

func (m *MoE) views(a *moeActs, x int) (expertViews, error) {
	lo, nr := a.off[x], a.r.Rows[x]
	var v expertViews
	for _, f := range []struct {
		dst **tensor.Tensor
		t   *tensor.Tensor
		w   int
	}{{&v.xin, a.xin, m.Width}, {&v.fc, a.fc, m.Hidden}, {&v.act, a.fcAct, m.Hidden}, {&v.eout, a.eout, m.Width},
		{&v.dact, a.dfcAct, m.Hidden}, {&v.dfc, a.dfc, m.Hidden}, {&v.dxin, a.dxin, m.Width}} {
		var err error
		if *f.dst, err = rows(f.t, lo, nr, f.w); err != nil {
			return v, err
		}
	}
	return v, nil
}

// expertForward runs expert x on its rows of a.xin.
func (m *MoE) expertForward(be backend.NN, a *moeActs, x int) error {
	nr := a.r.Rows[x]
	if nr == 0 {
		return nil
	}
	v, err := m.views(a, x)
	if err != nil {
		return err
	}
	if err := m.FC[x].Forward(be, v.fc, v.xin, nr); err != nil {
		return err
	}
	if err := m.Act.Forward(be, v.act, v.fc, nr*m.Hidden); err != nil {
		return err
	}
	return m.Proj[x].Forward(be, v.eout, v.act, nr)
}
