package optim

import (
	"fmt"
	"math"
)

// warmupLR implements WarmupLR and, with decay set, WarmupDecayLR.
type warmupLR struct {
	noBetas
	minLRs, deltaLRs []float64
	n                int // warmup_num_steps, >= 2
	typ              string
	invLogN          float64
	decay            bool
	total            int // total_num_steps (WarmupDecayLR)
}

func newWarmupLR(r *paramReader, baseLRs []float64, decay bool, o scheduleOptions) (*warmupLR, error) {
	allowed := []string{keyWarmupMinLR, keyWarmupMaxLR, keyWarmupNumSteps, keyWarmupType, keyLastBatchIteration}
	if decay {
		allowed = append([]string{keyTotalNumSteps}, allowed...)
	}
	if err := r.checkKeys(allowed); err != nil {
		return nil, err
	}
	s := &warmupLR{decay: decay}
	var err error
	if decay {
		var present bool
		if s.total, present, err = r.integer(keyTotalNumSteps, 0); err != nil {
			return nil, err
		} else if !present {
			return nil, r.missing(keyTotalNumSteps)
		}
	}
	if s.n, err = r.warmupSteps(); err != nil {
		return nil, err
	}
	if s.minLRs, err = r.floats(keyWarmupMinLR, make([]float64, r.groups)); err != nil {
		return nil, err
	}
	// WarmupLR's warmup_max_lr defaults to the optimizer's lr; WarmupDecayLR
	// keeps its own signature default of 0.001.
	defMax := baseLRs
	if decay {
		defMax = make([]float64, r.groups)
		for i := range defMax {
			defMax[i] = 0.001
		}
	}
	maxLRs, err := r.floats(keyWarmupMaxLR, defMax)
	if err != nil {
		return nil, err
	}
	s.deltaLRs = make([]float64, len(maxLRs))
	for i := range maxLRs {
		s.deltaLRs[i] = maxLRs[i] - s.minLRs[i]
	}
	if s.typ, err = r.warmupType(o.warn); err != nil {
		return nil, err
	}
	s.invLogN = 1.0 / math.Log(float64(s.n))
	if decay && s.total < s.n {
		o.warn(fmt.Sprintf("%s%s %d is less than %s %d", paramPrefix, keyTotalNumSteps, s.total, keyWarmupNumSteps, s.n))
	}
	return s, nil
}

func (s *warmupLR) gamma(t int) float64 {
	if t < s.n {
		return warmupGamma(s.typ, s.invLogN, t, s.n)
	}
	if !s.decay {
		return 1.0
	}
	return math.Max(0, float64(s.total-t)/math.Max(1, float64(s.total-s.n)))
}

func (s *warmupLR) lrAt(t int) []float64 {
	out := make([]float64, len(s.minLRs))
	if t < 0 {
		copy(out, s.minLRs)
		return out
	}
	g := s.gamma(t)
	for i := range out {
		out[i] = s.minLRs[i] + s.deltaLRs[i]*g
	}
	return out
}
