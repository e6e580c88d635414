package optim

import (
	"math"

	"github.com/deepgo-ml/deepgo/config"
)

// warmupLR implements WarmupLR and, with Decay set, WarmupDecayLR.
type warmupLR struct {
	noBetas
	p        config.WarmupParams
	deltaLRs []float64
	invLogN  float64
}

func newWarmupLR(p *config.WarmupParams) *warmupLR {
	s := &warmupLR{p: *p, deltaLRs: make([]float64, len(p.MaxLR)), invLogN: 1.0 / math.Log(float64(p.NumSteps))}
	for i := range p.MaxLR {
		s.deltaLRs[i] = p.MaxLR[i] - p.MinLR[i]
	}
	return s
}

func (s *warmupLR) gamma(t int) float64 {
	if t < s.p.NumSteps {
		return warmupGamma(s.p.Type, s.invLogN, t, s.p.NumSteps)
	}
	if !s.p.Decay {
		return 1.0
	}
	return math.Max(0, float64(s.p.TotalNumSteps-t)/math.Max(1, float64(s.p.TotalNumSteps-s.p.NumSteps)))
}

func (s *warmupLR) lrAt(t int) []float64 {
	out := make([]float64, len(s.p.MinLR))
	if t < 0 {
		copy(out, s.p.MinLR)
		return out
	}
	g := s.gamma(t)
	for i := range out {
		out[i] = s.p.MinLR[i] + s.deltaLRs[i]*g
	}
	return out
}
