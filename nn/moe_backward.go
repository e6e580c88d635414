package nn

import (
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// backwardExperts writes din[n, C] (whatever it held) with the gradient
// of the forward's input given the gradient dout[n, C] of the experts'
// combined output, and accumulates every parameter gradient of the gate
// and experts: the experts' through their routed rows, wg's through the
// combine weights and the aux loss (m.dLAux × l_aux).
func (m *MoE) backwardExperts(be backend.NN, din, dout, in *tensor.Tensor, a *moeActs, n int) error {
	c, e, r := m.Width, m.Config.Experts, a.r
	total := a.off[e]
	dh := make([]float32, n*c)
	if err := download(be, dh, dout); err != nil {
		return err
	}
	// the combine: d weight = dout[s]·eout[slot], d eout[slot] = weight · dout[s]
	dw := make([]float32, len(r.Weight))
	deo := make([]float32, total*c)
	for i := range r.Expert {
		sl := a.slot(i)
		if sl < 0 {
			continue
		}
		s, w := i%n, r.Weight[i]
		var dot float64
		for j := 0; j < c; j++ {
			dot += float64(dh[s*c+j]) * float64(a.eoutHost[sl*c+j])
			deo[sl*c+j] = w * dh[s*c+j]
		}
		dw[i] = float32(dot)
	}
	if total > 0 {
		if err := upload(be, a.eout, deo); err != nil {
			return err
		}
	}
	for x := 0; x < e; x++ {
		if err := m.expertBackward(be, a, x); err != nil {
			return err
		}
	}
	// the gather: dx[s] = Σ_routes dxin[slot], routes in order
	dxh := make([]float32, n*c)
	if total > 0 {
		g := make([]float32, total*c)
		if err := download(be, g, a.dxin); err != nil {
			return err
		}
		for i := range r.Expert {
			if sl := a.slot(i); sl >= 0 {
				s := i % n
				for j := 0; j < c; j++ {
					dxh[s*c+j] += g[sl*c+j]
				}
			}
		}
	}
	dl := make([]float32, n*e)
	if err := r.Backward(dl, dw, m.dLAux); err != nil {
		return err
	}
	if err := upload(be, a.dlogits, dl); err != nil {
		return err
	}
	if err := m.WG.backwardWrite(be, din, a.dlogits, in, n); err != nil {
		return err
	}
	if err := upload(be, a.dx, dxh); err != nil {
		return err
	}
	return add(be, din, din, a.dx, n*c)
}

// expertBackward runs expert x's backward on its rows: a.eout holds the
// gradient of its outputs, a.dxin receives its inputs'.
func (m *MoE) expertBackward(be backend.NN, a *moeActs, x int) error {
	nr := a.r.Rows[x]
	if nr == 0 {
		return nil
	}
	v, err := m.views(a, x)
	if err != nil {
		return err
	}
	if err := m.Proj[x].backwardWrite(be, v.dact, v.eout, v.act, nr); err != nil {
		return err
	}
	if err := m.Act.backwardWrite(be, v.dfc, v.fc, v.dact, nr*m.Hidden); err != nil {
		return err
	}
	return m.FC[x].backwardWrite(be, v.dxin, v.dfc, v.xin, nr)
}
