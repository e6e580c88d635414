package optim

import "math"

const (
	keyCycleMinLR           = "cycle_min_lr"
	keyCycleMaxLR           = "cycle_max_lr"
	keyDecayLRRate          = "decay_lr_rate"
	keyCycleFirstStepSize   = "cycle_first_step_size"
	keyCycleSecondStepSize  = "cycle_second_step_size"
	keyCycleFirstStairCount = "cycle_first_stair_count"
	keyCycleSecondStairCnt  = "cycle_second_stair_count"
	keyDecayStepSize        = "decay_step_size"
	keyCycleMomentum        = "cycle_momentum"
	keyCycleMinMom          = "cycle_min_mom"
	keyCycleMaxMom          = "cycle_max_mom"
	keyDecayMomRate         = "decay_mom_rate"

	// oneCycleBeta2 is the beta2 DeepSpeed's OneCycle writes into every
	// param group, whatever the optimizer's own beta2 was.
	oneCycleBeta2 = 0.99
)

// oneCycle implements DeepSpeed's OneCycle (1Cycle) LR and momentum policy.
type oneCycle struct {
	minLRs, maxLRs   []float64
	minMoms, maxMoms []float64
	first, second    float64 // half-cycle lengths
	total, ratio     float64
	stair1, stair2   int
	decayStep        float64
	lrRate, momRate  float64
	skipLR, skipMom  bool
	momentum         bool
}

func newOneCycle(r *paramReader, o scheduleOptions) (*oneCycle, error) {
	if err := r.checkKeys([]string{keyCycleMinLR, keyCycleMaxLR, keyDecayLRRate, keyCycleFirstStepSize,
		keyCycleSecondStepSize, keyCycleFirstStairCount, keyCycleSecondStairCnt, keyDecayStepSize,
		keyCycleMomentum, keyCycleMinMom, keyCycleMaxMom, keyDecayMomRate, keyLastBatchIteration}); err != nil {
		return nil, err
	}
	s := &oneCycle{}
	var err error
	if s.first, err = r.float(keyCycleFirstStepSize, 2000); err != nil {
		return nil, err
	}
	if !(s.first > 0) {
		return nil, r.errf(keyCycleFirstStepSize, r.params[keyCycleFirstStepSize], "must be > 0 (steps in the increasing half of the cycle)")
	}
	if s.second, err = r.float(keyCycleSecondStepSize, s.first); err != nil {
		return nil, err
	}
	if !(s.second > 0) {
		return nil, r.errf(keyCycleSecondStepSize, r.params[keyCycleSecondStepSize], "must be > 0 (steps in the decreasing half of the cycle)")
	}
	s.total = s.first + s.second
	s.ratio = s.first / s.total
	if s.stair1, _, err = r.integer(keyCycleFirstStairCount, 0); err != nil {
		return nil, err
	}
	if s.stair1 < 0 {
		return nil, r.errf(keyCycleFirstStairCount, r.params[keyCycleFirstStairCount], "must be >= 0 (0 = continuous)")
	}
	if s.stair2, _, err = r.integer(keyCycleSecondStairCnt, s.stair1); err != nil {
		return nil, err
	}
	if s.stair2 < 0 {
		return nil, r.errf(keyCycleSecondStairCnt, r.params[keyCycleSecondStairCnt], "must be >= 0 (0 = continuous)")
	}
	if s.decayStep, err = r.float(keyDecayStepSize, 0); err != nil {
		return nil, err
	}
	if s.decayStep < 0 {
		return nil, r.errf(keyDecayStepSize, r.params[keyDecayStepSize], "must be >= 0 (0 = no decay after the cycle)")
	}
	if s.minLRs, err = r.floats(keyCycleMinLR, nil); err != nil {
		return nil, err
	}
	if s.maxLRs, err = r.floats(keyCycleMaxLR, nil); err != nil {
		return nil, err
	}
	if s.lrRate, err = r.float(keyDecayLRRate, 0); err != nil {
		return nil, err
	}
	if s.momRate, err = r.float(keyDecayMomRate, 0); err != nil {
		return nil, err
	}
	s.skipLR = s.decayStep == 0 || s.lrRate == 0
	s.skipMom = s.decayStep == 0 || s.momRate == 0
	if s.momentum, err = r.boolean(keyCycleMomentum, true); err != nil {
		return nil, err
	}
	if s.minMoms, err = r.floats(keyCycleMinMom, fill(r.groups, 0.8)); err != nil {
		return nil, err
	}
	if s.maxMoms, err = r.floats(keyCycleMaxMom, fill(r.groups, 0.9)); err != nil {
		return nil, err
	}
	if s.momentum && !o.hasBetas {
		o.warn("OneCycle: cycle_momentum is disabled because the optimizer has no betas")
		s.momentum = false
	}
	return s, nil
}

func fill(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// scale returns the position in the cycle, 0 at the ends and 1 at the peak.
func (s *oneCycle) scale(t int) float64 {
	bi := float64(t + 1)
	cycle := math.Floor(1 + bi/s.total)
	x := 1. + bi/s.total - cycle
	var sf float64
	stairs := s.stair1
	if x <= s.ratio {
		sf = x / s.ratio
	} else {
		sf = (x - 1) / (s.ratio - 1)
		stairs = s.stair2
	}
	if stairs > 0 {
		// Quantise from the integer offset in the cycle, not from sf, so a
		// value a rounding error below a stair does not drop a whole stair.
		ci := math.Mod(bi, s.total)
		var pos float64
		if ci <= s.first {
			pos = ci * float64(stairs) / s.first
		} else {
			pos = (s.total - ci) * float64(stairs) / s.second
		}
		sf = math.Floor(pos) / float64(stairs)
	}
	return sf
}

func (s *oneCycle) lrAt(t int) []float64 {
	out := make([]float64, len(s.minLRs))
	switch {
	case t < 0:
		copy(out, s.minLRs)
	case float64(t) < s.total:
		sf := s.scale(t)
		for i := range out {
			out[i] = s.minLRs[i] + (s.maxLRs[i]-s.minLRs[i])*sf
		}
	case s.skipLR:
		copy(out, s.minLRs)
	default:
		f := 1 + s.lrRate*((float64(t)-s.total+1)/s.decayStep)
		for i := range out {
			out[i] = s.minLRs[i] / f
		}
	}
	return out
}

func (s *oneCycle) betasAt(t int) ([][2]float64, bool) {
	if !s.momentum {
		return nil, false
	}
	out := make([][2]float64, len(s.minMoms))
	switch {
	case t < 0:
		// The constructor writes the lower momentum bound.
		for i := range out {
			out[i] = [2]float64{s.minMoms[i], oneCycleBeta2}
		}
	case float64(t) < s.total:
		sf := s.scale(t)
		for i := range out {
			out[i] = [2]float64{s.maxMoms[i] - (s.maxMoms[i]-s.minMoms[i])*sf, oneCycleBeta2}
		}
	case s.skipMom:
		for i := range out {
			out[i] = [2]float64{s.maxMoms[i], oneCycleBeta2}
		}
	default:
		f := 1 + s.momRate*((float64(t)-s.total+1)/s.decayStep)
		for i := range out {
			out[i] = [2]float64{s.maxMoms[i] * f, oneCycleBeta2}
		}
	}
	return out, true
}
