package optim

import (
	"math"

	"github.com/deepgo-ml/deepgo/config"
)

// oneCycleBeta2 is the beta2 DeepSpeed's OneCycle writes into every param
// group, whatever the optimizer's own beta2 was.
const oneCycleBeta2 = 0.99

// oneCycle implements DeepSpeed's OneCycle (1Cycle) LR and momentum policy.
type oneCycle struct {
	p            config.OneCycleParams
	total, ratio float64 // cycle length, and the increasing half's share of it
}

func newOneCycle(p *config.OneCycleParams) *oneCycle {
	total := p.FirstStepSize + p.SecondStepSize
	return &oneCycle{p: *p, total: total, ratio: p.FirstStepSize / total}
}

// scale returns the position in the cycle, 0 at the ends and 1 at the peak.
func (s *oneCycle) scale(t int) float64 {
	bi := float64(t + 1)
	cycle := math.Floor(1 + bi/s.total)
	x := 1. + bi/s.total - cycle
	var sf float64
	stairs := s.p.FirstStairCount
	if x <= s.ratio {
		sf = x / s.ratio
	} else {
		sf = (x - 1) / (s.ratio - 1)
		stairs = s.p.SecondStairCount
	}
	if stairs > 0 {
		// Quantise from the integer offset in the cycle, not from sf, so a
		// value a rounding error below a stair does not drop a whole stair.
		ci := math.Mod(bi, s.total)
		var pos float64
		if ci <= s.p.FirstStepSize {
			pos = ci * float64(stairs) / s.p.FirstStepSize
		} else {
			pos = (s.total - ci) * float64(stairs) / s.p.SecondStepSize
		}
		sf = math.Floor(pos) / float64(stairs)
	}
	return sf
}

func (s *oneCycle) lrAt(t int) []float64 {
	out := make([]float64, len(s.p.MinLR))
	switch {
	case t < 0:
		copy(out, s.p.MinLR)
	case float64(t) < s.total:
		sf := s.scale(t)
		for i := range out {
			out[i] = s.p.MinLR[i] + (s.p.MaxLR[i]-s.p.MinLR[i])*sf
		}
	case s.p.DecayStepSize == 0 || s.p.DecayLRRate == 0: // no decay
		copy(out, s.p.MinLR)
	default:
		f := 1 + s.p.DecayLRRate*((float64(t)-s.total+1)/s.p.DecayStepSize)
		for i := range out {
			out[i] = s.p.MinLR[i] / f
		}
	}
	return out
}

func (s *oneCycle) betasAt(t int) ([][2]float64, bool) {
	if !s.p.CycleMomentum {
		return nil, false
	}
	out := make([][2]float64, len(s.p.MinMom))
	switch {
	case t < 0:
		// The constructor writes the lower momentum bound.
		for i := range out {
			out[i] = [2]float64{s.p.MinMom[i], oneCycleBeta2}
		}
	case float64(t) < s.total:
		sf := s.scale(t)
		for i := range out {
			out[i] = [2]float64{s.p.MaxMom[i] - (s.p.MaxMom[i]-s.p.MinMom[i])*sf, oneCycleBeta2}
		}
	case s.p.DecayStepSize == 0 || s.p.DecayMomRate == 0: // no decay
		for i := range out {
			out[i] = [2]float64{s.p.MaxMom[i], oneCycleBeta2}
		}
	default:
		f := 1 + s.p.DecayMomRate*((float64(t)-s.total+1)/s.p.DecayStepSize)
		for i := range out {
			out[i] = [2]float64{s.p.MaxMom[i] * f, oneCycleBeta2}
		}
	}
	return out, true
}
