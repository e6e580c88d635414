package optim

import "math"

// refGroup is the float64 reference state of one tensor.
type refGroup struct {
	p, m, v []float64
}

// refStep is the float64 reference of one step of kind on one tensor, the
// textbook formulas of adam.go, sgd.go, lamb.go and lion.go evaluated in
// float64 with no attention to operation order. g holds the scaled grads.
func refStep(kind Kind, h Hyper, t int64, scale float64, r *refGroup, g []float64) {
	bc1, bc2 := 1.0, 1.0
	if h.BiasCorrection {
		bc1 = 1 - math.Pow(h.Beta1, float64(t))
		bc2 = 1 - math.Pow(h.Beta2, float64(t))
	}
	switch kind {
	case KindAdam:
		for i := range r.p {
			gi := g[i] / scale
			if !h.AdamWMode {
				gi += h.WeightDecay * r.p[i]
			}
			r.m[i] = h.Beta1*r.m[i] + (1-h.Beta1)*gi
			r.v[i] = h.Beta2*r.v[i] + (1-h.Beta2)*gi*gi
			if h.AdamWMode {
				r.p[i] -= h.LR * h.WeightDecay * r.p[i]
			}
			r.p[i] -= h.LR / bc1 * r.m[i] / (math.Sqrt(r.v[i])/math.Sqrt(bc2) + h.Eps)
		}
	case KindSGD:
		for i := range r.p {
			gi := g[i]/scale + h.WeightDecay*r.p[i]
			if h.Momentum != 0 {
				if t == 1 {
					r.m[i] = gi
				} else {
					r.m[i] = h.Momentum*r.m[i] + (1-h.Dampening)*gi
				}
				if h.Nesterov {
					gi += h.Momentum * r.m[i]
				} else {
					gi = r.m[i]
				}
			}
			r.p[i] -= h.LR * gi
		}
	case KindLamb:
		u := make([]float64, len(r.p))
		var pn, un float64
		for i := range r.p {
			gi := g[i] / scale
			r.m[i] = h.Beta1*r.m[i] + (1-h.Beta1)*gi
			r.v[i] = h.Beta2*r.v[i] + (1-h.Beta2)*gi*gi
			u[i] = (r.m[i]/bc1)/(math.Sqrt(r.v[i]/bc2)+h.Eps) + h.WeightDecay*r.p[i]
			pn += r.p[i] * r.p[i]
			un += u[i] * u[i]
		}
		trust := 1.0
		if pn > 0 && un > 0 {
			trust = math.Min(math.Max(math.Sqrt(pn)/math.Sqrt(un), h.MinCoeff), h.MaxCoeff)
		}
		for i := range r.p {
			r.p[i] -= h.LR * trust * u[i]
		}
	case KindLion:
		for i := range r.p {
			gi := g[i] / scale
			c := h.Beta1*r.m[i] + (1-h.Beta1)*gi
			sign := 0.0
			if c > 0 {
				sign = 1
			} else if c < 0 {
				sign = -1
			}
			r.p[i] = r.p[i]*(1-h.LR*h.WeightDecay) - h.LR*sign
			r.m[i] = h.Beta2*r.m[i] + (1-h.Beta2)*gi
		}
	}
}
