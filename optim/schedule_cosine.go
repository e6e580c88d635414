package optim

import (
	"fmt"
	"math"
)

const (
	keyWarmupMinRatio = "warmup_min_ratio"
	keyCosMinRatio    = "cos_min_ratio"
)

// warmupCosineLR implements WarmupCosineLR: lr = base_lr * ratio(t).
type warmupCosineLR struct {
	noBetas
	orgLRs         []float64
	total, n       int
	typ            string
	invLogN        float64
	wminRatio, cmr float64
}

func newWarmupCosineLR(r *paramReader, baseLRs []float64, o scheduleOptions) (*warmupCosineLR, error) {
	if err := r.checkKeys([]string{keyTotalNumSteps, keyWarmupMinRatio, keyWarmupNumSteps, keyCosMinRatio,
		keyWarmupType, keyLastBatchIteration}); err != nil {
		return nil, err
	}
	s := &warmupCosineLR{orgLRs: append([]float64(nil), baseLRs...)}
	var (
		present bool
		err     error
	)
	if s.total, present, err = r.integer(keyTotalNumSteps, 0); err != nil {
		return nil, err
	} else if !present {
		return nil, r.missing(keyTotalNumSteps)
	}
	if s.n, err = r.warmupSteps(); err != nil {
		return nil, err
	}
	if s.wminRatio, err = r.float(keyWarmupMinRatio, 0); err != nil {
		return nil, err
	}
	if s.cmr, err = r.float(keyCosMinRatio, 1e-4); err != nil {
		return nil, err
	}
	if s.typ, err = r.warmupType(o.warn); err != nil {
		return nil, err
	}
	s.invLogN = 1.0 / math.Log(float64(s.n))
	if s.total < s.n {
		o.warn(fmt.Sprintf("%s%s %d is less than %s %d", paramPrefix, keyTotalNumSteps, s.total, keyWarmupNumSteps, s.n))
	}
	return s, nil
}

func (s *warmupCosineLR) ratio(t int) float64 {
	if t < s.n {
		g := warmupGamma(s.typ, s.invLogN, t, s.n)
		return s.wminRatio + g*(1.0-s.wminRatio)
	}
	// Cosine progress is clamped to [0, 1] so the ratio stays at
	// cos_min_ratio after total_num_steps (and when total <= warmup).
	realLast := float64(t - s.n + 1)
	realTotal := math.Max(1, float64(s.total-s.n))
	p := math.Min(1.0, realLast/realTotal)
	c := (1 + math.Cos(math.Pi*p)) / 2
	return math.Max(0.0, s.cmr+(1.0-s.cmr)*c)
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
