package optim

import (
	"math"

	"github.com/deepgo-ml/deepgo/config"
)

// warmupCosineLR implements WarmupCosineLR: lr = base_lr * ratio(t).
type warmupCosineLR struct {
	noBetas
	p       config.WarmupCosineParams
	orgLRs  []float64
	invLogN float64
}

func newWarmupCosineLR(p *config.WarmupCosineParams, baseLRs []float64) *warmupCosineLR {
	return &warmupCosineLR{p: *p, orgLRs: append([]float64(nil), baseLRs...), invLogN: 1.0 / math.Log(float64(p.NumSteps))}
}

func (s *warmupCosineLR) ratio(t int) float64 {
	n := s.p.NumSteps
	if t < n {
		g := warmupGamma(s.p.Type, s.invLogN, t, n)
		return s.p.MinRatio + g*(1.0-s.p.MinRatio)
	}
	// Cosine progress is clamped to [0, 1] so the ratio stays at
	// cos_min_ratio after total_num_steps (and when total <= warmup).
	realLast := float64(t - n + 1)
	realTotal := math.Max(1, float64(s.p.TotalNumSteps-n))
	p := math.Min(1.0, realLast/realTotal)
	c := (1 + math.Cos(math.Pi*p)) / 2
	cmr := s.p.CosMinRatio
	return math.Max(0.0, cmr+(1.0-cmr)*c)
}

func (s *warmupCosineLR) lrAt(t int) []float64 {
	out := make([]float64, len(s.orgLRs))
	if t < 0 {
		return out
	}
	q := s.ratio(t)
	for i, lr := range s.orgLRs {
		out[i] = lr * q
	}
	return out
}
