package config

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// The scheduler params: DeepSpeed's constructor keyword arguments.
const (
	keyLastBatchIteration   = "last_batch_iteration"
	keyWarmupMinLR          = "warmup_min_lr"
	keyWarmupMaxLR          = "warmup_max_lr"
	keyWarmupNumSteps       = "warmup_num_steps"
	keyWarmupType           = "warmup_type"
	keyTotalNumSteps        = "total_num_steps"
	keyWarmupMinRatio       = "warmup_min_ratio"
	keyCosMinRatio          = "cos_min_ratio"
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
	keyLRRTMinLR            = "lr_range_test_min_lr"
	keyLRRTStepSize         = "lr_range_test_step_size"
	keyLRRTStepRate         = "lr_range_test_step_rate"
	keyLRRTStaircase        = "lr_range_test_staircase"
	warmupLog               = "log"
	warmupLinear            = "linear"
)

// errSet gathers every bad parameter of a schedule, so one read reports
// them all (joined, as the optimizer's params are). A value that fails to
// read is left at its default, so the keys whose defaults depend on it
// get a valid one and report only their own errors.
type errSet []error

// keep adds err, if any, and reports whether there was one.
func (s *errSet) keep(err error) bool {
	if err != nil {
		*s = append(*s, err)
	}
	return err != nil
}

func (s errSet) join() error { return errors.Join(s...) }

// warmupLR reads WarmupLR's params (decay: WarmupDecayLR's).
func (r *paramReader) warmupLR(baseLRs []float64, decay bool) (*WarmupParams, error) {
	allowed := []string{keyWarmupMinLR, keyWarmupMaxLR, keyWarmupNumSteps, keyWarmupType, keyLastBatchIteration}
	if decay {
		allowed = append([]string{keyTotalNumSteps}, allowed...)
	}
	var errs errSet
	errs.keep(r.checkKeys(allowed))
	groups := len(baseLRs)
	p := &WarmupParams{Decay: decay}
	var err error
	if decay {
		p.TotalNumSteps, err = r.totalNumSteps()
		errs.keep(err)
	}
	p.NumSteps, err = r.warmupSteps()
	errs.keep(err)
	p.MinLR, err = r.lrs(keyWarmupMinLR, make([]float64, groups), groups)
	errs.keep(err)
	// WarmupLR's warmup_max_lr defaults to the optimizer's lr; WarmupDecayLR
	// keeps its own signature default of 0.001.
	defMax := baseLRs
	if decay {
		defMax = fill(groups, 0.001)
	}
	p.MaxLR, err = r.lrs(keyWarmupMaxLR, defMax, groups)
	errs.keep(err)
	if decay && !r.given(keyWarmupMaxLR) && !slices.Equal(defMax, baseLRs) {
		r.warn(keyWarmupMaxLR, "not given: WarmupDecayLR warms up to its default 0.001, not to the optimizer's lr %s (DeepSpeed does the same; WarmupLR would take the optimizer's lr); set warmup_max_lr to choose",
			fmtNum(baseLRs[0]))
	}
	p.Type, err = r.warmupType()
	errs.keep(err)
	if len(errs) > 0 {
		return nil, errs.join()
	}
	if decay {
		r.totalBelowWarmup(p.TotalNumSteps, p.NumSteps)
	}
	return p, nil
}

// warmupCosineLR reads WarmupCosineLR's params.
func (r *paramReader) warmupCosineLR() (*WarmupCosineParams, error) {
	var errs errSet
	errs.keep(r.checkKeys([]string{keyTotalNumSteps, keyWarmupMinRatio, keyWarmupNumSteps, keyCosMinRatio,
		keyWarmupType, keyLastBatchIteration}))
	p := &WarmupCosineParams{}
	var err error
	p.TotalNumSteps, err = r.totalNumSteps()
	errs.keep(err)
	p.NumSteps, err = r.warmupSteps()
	errs.keep(err)
	p.MinRatio, err = r.ratio(keyWarmupMinRatio, 0)
	errs.keep(err)
	p.CosMinRatio, err = r.ratio(keyCosMinRatio, 1e-4)
	errs.keep(err)
	p.Type, err = r.warmupType()
	errs.keep(err)
	if len(errs) > 0 {
		return nil, errs.join()
	}
	r.totalBelowWarmup(p.TotalNumSteps, p.NumSteps)
	return p, nil
}

// oneCycle reads OneCycle's params for groups param groups.
func (r *paramReader) oneCycle(groups int, hasBetas bool) (*OneCycleParams, error) {
	var errs errSet
	errs.keep(r.checkKeys([]string{keyCycleMinLR, keyCycleMaxLR, keyDecayLRRate, keyCycleFirstStepSize,
		keyCycleSecondStepSize, keyCycleFirstStairCount, keyCycleSecondStairCnt, keyDecayStepSize,
		keyCycleMomentum, keyCycleMinMom, keyCycleMaxMom, keyDecayMomRate, keyLastBatchIteration}))
	p := &OneCycleParams{}
	var err error
	// the second half defaults to the first; a first that does not read
	// leaves the default of both
	if p.FirstStepSize, err = r.positive(keyCycleFirstStepSize, 2000, "steps in the increasing half of the cycle"); errs.keep(err) {
		p.FirstStepSize = 2000
	}
	p.SecondStepSize, err = r.positive(keyCycleSecondStepSize, p.FirstStepSize, "steps in the decreasing half of the cycle")
	errs.keep(err)
	if p.FirstStairCount, err = r.stairs(keyCycleFirstStairCount, 0); errs.keep(err) {
		p.FirstStairCount = 0
	}
	p.SecondStairCount, err = r.stairs(keyCycleSecondStairCnt, p.FirstStairCount)
	errs.keep(err)
	if p.DecayStepSize, err = r.float(keyDecayStepSize, 0); !errs.keep(err) && p.DecayStepSize < 0 {
		errs.keep(r.bad(keyDecayStepSize, r.params[keyDecayStepSize], "must be >= 0 (0 = no decay after the cycle)", "a number >= 0 (0 = no decay after the cycle)"))
	}
	p.MinLR, err = r.lrs(keyCycleMinLR, nil, groups)
	errs.keep(err)
	p.MaxLR, err = r.lrs(keyCycleMaxLR, nil, groups)
	errs.keep(err)
	p.DecayLRRate, err = r.float(keyDecayLRRate, 0)
	errs.keep(err)
	p.DecayMomRate, err = r.float(keyDecayMomRate, 0)
	errs.keep(err)
	p.CycleMomentum, err = r.boolean(keyCycleMomentum, true)
	errs.keep(err)
	p.MinMom, err = r.floats(keyCycleMinMom, fill(groups, 0.8), groups)
	errs.keep(err)
	p.MaxMom, err = r.floats(keyCycleMaxMom, fill(groups, 0.9), groups)
	errs.keep(err)
	if len(errs) > 0 {
		return nil, errs.join()
	}
	if p.CycleMomentum && !hasBetas {
		r.warn(keyCycleMomentum, "momentum cycling is disabled because the optimizer has no betas")
		p.CycleMomentum = false
	}
	return p, nil
}

// lrRangeTest reads LRRangeTest's params for groups param groups.
func (r *paramReader) lrRangeTest(groups int) (*LRRangeTestParams, error) {
	var errs errSet
	errs.keep(r.checkKeys([]string{keyLRRTMinLR, keyLRRTStepSize, keyLRRTStepRate, keyLRRTStaircase,
		keyLastBatchIteration}))
	p := &LRRangeTestParams{}
	var err error
	p.MinLR, err = r.lrs(keyLRRTMinLR, fill(groups, 1e-3), groups)
	errs.keep(err)
	p.StepSize, err = r.positive(keyLRRTStepSize, 2000, "training steps per LR increase")
	errs.keep(err)
	p.StepRate, err = r.float(keyLRRTStepRate, 1.0)
	errs.keep(err)
	p.Staircase, err = r.boolean(keyLRRTStaircase, false)
	errs.keep(err)
	if len(errs) > 0 {
		return nil, errs.join()
	}
	return p, nil
}

// lrs is floats for a learning rate: DeepSpeed takes a negative one, so it
// is only a warning.
func (r *paramReader) lrs(key string, def []float64, groups int) ([]float64, error) {
	v, err := r.floats(key, def, groups)
	if err != nil {
		return nil, err
	}
	if !isAuto(r.params[key]) && r.given(key) && slicesMin(v) < 0 {
		r.warn(key, "negative learning rate %s; DeepSpeed accepts it and so does deepgo, but the schedule will produce negative rates unless the trainer overrides it",
			render(r.params[key]))
	}
	return v, nil
}

func slicesMin(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

// ratio is float for a ratio DeepSpeed does not range-check: outside
// [0, 1] it is a warning.
func (r *paramReader) ratio(key string, def float64) (float64, error) {
	f, err := r.float(key, def)
	if err == nil && (f < 0 || f > 1) {
		r.warn(key, "%s is outside [0, 1]; DeepSpeed accepts it and so does deepgo, but the learning rate then leaves [0, base lr]", render(r.params[key]))
	}
	return f, err
}

// positive reads a finite number > 0 (a step size DeepSpeed divides by).
func (r *paramReader) positive(key string, def float64, what string) (float64, error) {
	f, err := r.float(key, def)
	if err != nil {
		return 0, err
	}
	if !(f > 0) {
		return 0, r.bad(key, r.params[key], fmt.Sprintf("must be > 0 (%s)", what), fmt.Sprintf("a number > 0 (%s)", what))
	}
	return f, nil
}

// stairs reads a stair count: an integer >= 0.
func (r *paramReader) stairs(key string, def int) (int, error) {
	n, _, err := r.integer(key, def)
	if err == nil && n < 0 {
		err = r.bad(key, r.params[key], "must be >= 0 (0 = continuous)", "an integer >= 0 (0 = continuous)")
	}
	return n, err
}

// totalNumSteps reads the required total_num_steps.
func (r *paramReader) totalNumSteps() (int, error) {
	n, given, err := r.integer(keyTotalNumSteps, 0)
	if err == nil && !given {
		err = r.missing(keyTotalNumSteps)
	}
	return n, err
}

// totalBelowWarmup warns as DeepSpeed does when total < warmup.
func (r *paramReader) totalBelowWarmup(total, warmup int) {
	if total < warmup && !r.anyAuto(keyTotalNumSteps, keyWarmupNumSteps) {
		r.warn(keyTotalNumSteps, "%d is less than %s %d", total, keyWarmupNumSteps, warmup)
	}
}

// lastBatchIteration reads DeepSpeed's last_batch_iteration kwarg (default
// -1, the start of the schedule).
func (r *paramReader) lastBatchIteration() (int, error) {
	n, _, err := r.integer(keyLastBatchIteration, -1)
	if err == nil && n < -1 {
		err = r.bad(keyLastBatchIteration, r.params[keyLastBatchIteration], "must be >= -1 (-1 starts the schedule from the beginning)",
			"an integer >= -1 (-1 starts the schedule from the beginning)")
	}
	return n, err
}

// warmupType reads warmup_type. Like DeepSpeed, an unknown string falls
// back to "log" with a warning.
func (r *paramReader) warmupType() (string, error) {
	t, err := r.str(keyWarmupType, warmupLog)
	if err != nil {
		return "", err
	}
	if t != warmupLog && t != warmupLinear {
		r.warn(keyWarmupType, "%q: unknown warmup type, using %q (allowed: %q, %q)", t, warmupLog, warmupLog, warmupLinear)
		t = warmupLog
	}
	return t, nil
}

// warmupSteps reads warmup_num_steps: an integer >= 0 (default 1000),
// raised to at least 2 as DeepSpeed does (1 is 2 there too). 0, which the
// Hugging Face Trainer writes when it has no warmup, is a warning:
// DeepSpeed 0.19.8 raises ValueError for it, earlier releases raised it to
// 2 as deepgo still does, so the first two steps run at the schedule's
// minimum. Negative values are refused.
func (r *paramReader) warmupSteps() (int, error) {
	n, given, err := r.integer(keyWarmupNumSteps, 1000)
	if err == nil && n < 0 {
		err = r.bad(keyWarmupNumSteps, r.params[keyWarmupNumSteps], "must be >= 0", "an integer >= 0")
	}
	if err == nil && given && n == 0 && !isAuto(r.params[keyWarmupNumSteps]) {
		r.warn(keyWarmupNumSteps, "0: DeepSpeed 0.19.8 refuses it (ValueError: warmup_num_steps must be a positive integer); deepgo warms up over 2 steps, as earlier DeepSpeed releases did, so steps 1 and 2 run at the schedule's minimum rate")
	}
	return max(2, n), err
}
