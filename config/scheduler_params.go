package config

import (
	"fmt"
	"math"
	"strings"
)

// Scheduler types deepgo implements: DeepSpeed's runtime/lr_schedules.py.
// They are matched exactly, as DeepSpeed does.
const (
	ScheduleWarmupLR       = "WarmupLR"
	ScheduleWarmupDecayLR  = "WarmupDecayLR"
	ScheduleWarmupCosineLR = "WarmupCosineLR"
	ScheduleOneCycle       = "OneCycle"
	ScheduleLRRangeTest    = "LRRangeTest"
)

// ScheduleTypes returns the scheduler types ParseScheduler knows, sorted.
func ScheduleTypes() []string {
	return []string{ScheduleLRRangeTest, ScheduleOneCycle, ScheduleWarmupCosineLR, ScheduleWarmupDecayLR, ScheduleWarmupLR}
}

// ScheduleSpec is a parsed "scheduler" block. Exactly one of the pointers
// is set, for Type. Per-group values have one entry per param group.
type ScheduleSpec struct {
	// Type is the scheduler type, e.g. "WarmupLR".
	Type string
	// LastBatchIteration is DeepSpeed's last_batch_iteration kwarg (-1:
	// start of the schedule).
	LastBatchIteration int
	// Warmup is set for WarmupLR and WarmupDecayLR.
	Warmup *WarmupParams
	// WarmupCosine is set for WarmupCosineLR.
	WarmupCosine *WarmupCosineParams
	// OneCycle is set for OneCycle.
	OneCycle *OneCycleParams
	// LRRangeTest is set for LRRangeTest.
	LRRangeTest *LRRangeTestParams
	// Warnings are what DeepSpeed logs while building the schedule.
	Warnings []Warning
}

// WarmupParams are WarmupLR's and WarmupDecayLR's parameters.
type WarmupParams struct {
	// MinLR and MaxLR are warmup_min_lr and warmup_max_lr per param group.
	MinLR, MaxLR []float64
	// NumSteps is warmup_num_steps, raised to at least 2 as DeepSpeed does.
	NumSteps int
	// Type is warmup_type: "log" or "linear".
	Type string
	// Decay is true for WarmupDecayLR, which decays to 0 at TotalNumSteps.
	Decay bool
	// TotalNumSteps is total_num_steps (WarmupDecayLR only).
	TotalNumSteps int
}

// WarmupCosineParams are WarmupCosineLR's parameters.
type WarmupCosineParams struct {
	// TotalNumSteps is total_num_steps.
	TotalNumSteps int
	// NumSteps is warmup_num_steps, raised to at least 2.
	NumSteps int
	// MinRatio is warmup_min_ratio; CosMinRatio is cos_min_ratio.
	MinRatio, CosMinRatio float64
	// Type is warmup_type: "log" or "linear".
	Type string
}

// OneCycleParams are OneCycle's parameters.
type OneCycleParams struct {
	// MinLR and MaxLR are cycle_min_lr and cycle_max_lr per param group.
	MinLR, MaxLR []float64
	// DecayLRRate is decay_lr_rate.
	DecayLRRate float64
	// FirstStepSize and SecondStepSize are the half-cycle lengths (> 0).
	FirstStepSize, SecondStepSize float64
	// FirstStairCount and SecondStairCount quantise the half-cycles (0: continuous).
	FirstStairCount, SecondStairCount int
	// DecayStepSize is decay_step_size (0: no decay after the cycle).
	DecayStepSize float64
	// CycleMomentum is cycle_momentum, off when the optimizer has no betas.
	CycleMomentum bool
	// MinMom and MaxMom are cycle_min_mom and cycle_max_mom per param group.
	MinMom, MaxMom []float64
	// DecayMomRate is decay_mom_rate.
	DecayMomRate float64
}

// LRRangeTestParams are LRRangeTest's parameters.
type LRRangeTestParams struct {
	// MinLR is lr_range_test_min_lr per param group.
	MinLR []float64
	// StepSize (> 0) and StepRate are lr_range_test_step_size and _step_rate.
	StepSize, StepRate float64
	// Staircase is lr_range_test_staircase.
	Staircase bool
}

// schedPrefix is the ds_config path of the scheduler parameters.
const schedPrefix = "scheduler.params."

// Parameter keys.
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

// ParseScheduler reads a ds_config "scheduler" block the way DeepSpeed's
// lr_schedules.py constructors do: typ is its "type" and params its
// "params" (as decoded from JSON). baseLRs are the learning rates of the
// optimizer's param groups (one entry per group, at least one); they are
// WarmupLR's default warmup_max_lr, WarmupCosineLR's base, and fix how many
// entries a per-group list must have. optimizerHasBetas false turns
// OneCycle's momentum cycling off, with a warning, as DeepSpeed does for an
// optimizer without betas.
//
// Parameters and defaults mirror DeepSpeed:
//
//   - WarmupLR: warmup_min_lr (0), warmup_max_lr (the optimizer's lr),
//     warmup_num_steps (1000, an integer >= 0, raised to 2 if below),
//     warmup_type ("log" or "linear"; anything else falls back to "log"
//     with a warning).
//   - WarmupDecayLR: as WarmupLR plus total_num_steps (required); its
//     warmup_max_lr defaults to 0.001.
//   - WarmupCosineLR: total_num_steps (required), warmup_min_ratio (0),
//     warmup_num_steps (1000), cos_min_ratio (1e-4), warmup_type ("log").
//   - OneCycle: cycle_min_lr and cycle_max_lr (required), decay_lr_rate (0),
//     cycle_first_step_size (2000), cycle_second_step_size (= first),
//     cycle_first_stair_count (0 = continuous), cycle_second_stair_count
//     (= first), decay_step_size (0 = no decay), cycle_momentum (true),
//     cycle_min_mom (0.8), cycle_max_mom (0.9), decay_mom_rate (0).
//   - LRRangeTest: lr_range_test_min_lr (1e-3), lr_range_test_step_size
//     (2000), lr_range_test_step_rate (1.0), lr_range_test_staircase (false).
//
// Learning-rate and momentum bounds accept a number or a list with one
// entry per param group. Every type also takes last_batch_iteration (-1).
// Bad values are a *ParamError matching ErrInvalidScheduleParam; an
// unknown type (torch.optim.lr_scheduler classes included) one matching
// ErrUnknownSchedule. Where DeepSpeed would only fail at the first step (a
// zero step size divides by zero), the value is rejected here.
func ParseScheduler(typ string, params map[string]any, baseLRs []float64, optimizerHasBetas bool) (*ScheduleSpec, error) {
	return parseScheduler(typ, params, baseLRs, optimizerHasBetas, false)
}

func parseScheduler(typ string, params map[string]any, baseLRs []float64, hasBetas, loose bool) (*ScheduleSpec, error) {
	if len(baseLRs) == 0 {
		return nil, fmt.Errorf("scheduler %q: need the learning rate of at least one param group: %w", typ, ErrInvalidScheduleParam)
	}
	r := newParamReader(schedPrefix, typ, params, ErrInvalidScheduleParam, loose)
	s := &ScheduleSpec{Type: typ}
	var err error
	switch typ {
	case ScheduleWarmupLR, ScheduleWarmupDecayLR:
		s.Warmup, err = r.warmupLR(baseLRs, typ == ScheduleWarmupDecayLR)
	case ScheduleWarmupCosineLR:
		s.WarmupCosine, err = r.warmupCosineLR()
	case ScheduleOneCycle:
		s.OneCycle, err = r.oneCycle(len(baseLRs), hasBetas)
	case ScheduleLRRangeTest:
		s.LRRangeTest, err = r.lrRangeTest(len(baseLRs))
	default:
		return nil, scheduleTypeError(typ)
	}
	if err == nil {
		s.LastBatchIteration, err = r.lastBatchIteration()
	}
	if err != nil {
		return nil, err
	}
	s.Warnings = r.warns
	return s, nil
}

func scheduleTypeError(typ string) error {
	known := strings.Join(ScheduleTypes(), ", ")
	e := &ParamError{Key: "scheduler.type", Value: typ,
		Reason:  fmt.Sprintf("unknown scheduler type (known: %s)", known),
		Allowed: fmt.Sprintf("a DeepSpeed schedule deepgo implements (%s)", known),
		Class:   ErrUnknownSchedule}
	if contains(torchSchedulers, typ) {
		e.msg = "torch.optim.lr_scheduler." + typ + " is not implemented"
	} else if sug := suggest(typ, append(ScheduleTypes(), torchSchedulers...)); sug != "" {
		e.msg = fmt.Sprintf("did you mean %q?", sug)
	}
	if e.msg != "" {
		e.Reason += "; " + e.msg
	}
	return e
}

func (r *paramReader) warmupLR(baseLRs []float64, decay bool) (*WarmupParams, error) {
	allowed := []string{keyWarmupMinLR, keyWarmupMaxLR, keyWarmupNumSteps, keyWarmupType, keyLastBatchIteration}
	if decay {
		allowed = append([]string{keyTotalNumSteps}, allowed...)
	}
	if err := r.checkKeys(allowed); err != nil {
		return nil, err
	}
	groups := len(baseLRs)
	p := &WarmupParams{Decay: decay}
	var err error
	if decay {
		if p.TotalNumSteps, err = r.totalNumSteps(); err != nil {
			return nil, err
		}
	}
	if p.NumSteps, err = r.warmupSteps(); err != nil {
		return nil, err
	}
	if p.MinLR, err = r.lrs(keyWarmupMinLR, make([]float64, groups), groups); err != nil {
		return nil, err
	}
	// WarmupLR's warmup_max_lr defaults to the optimizer's lr; WarmupDecayLR
	// keeps its own signature default of 0.001.
	defMax := baseLRs
	if decay {
		defMax = fill(groups, 0.001)
	}
	if p.MaxLR, err = r.lrs(keyWarmupMaxLR, defMax, groups); err != nil {
		return nil, err
	}
	if p.Type, err = r.warmupType(); err != nil {
		return nil, err
	}
	if decay {
		r.totalBelowWarmup(p.TotalNumSteps, p.NumSteps)
	}
	return p, nil
}

func (r *paramReader) warmupCosineLR() (*WarmupCosineParams, error) {
	if err := r.checkKeys([]string{keyTotalNumSteps, keyWarmupMinRatio, keyWarmupNumSteps, keyCosMinRatio,
		keyWarmupType, keyLastBatchIteration}); err != nil {
		return nil, err
	}
	p := &WarmupCosineParams{}
	var err error
	if p.TotalNumSteps, err = r.totalNumSteps(); err != nil {
		return nil, err
	}
	if p.NumSteps, err = r.warmupSteps(); err != nil {
		return nil, err
	}
	if p.MinRatio, err = r.ratio(keyWarmupMinRatio, 0); err != nil {
		return nil, err
	}
	if p.CosMinRatio, err = r.ratio(keyCosMinRatio, 1e-4); err != nil {
		return nil, err
	}
	if p.Type, err = r.warmupType(); err != nil {
		return nil, err
	}
	r.totalBelowWarmup(p.TotalNumSteps, p.NumSteps)
	return p, nil
}

func (r *paramReader) oneCycle(groups int, hasBetas bool) (*OneCycleParams, error) {
	if err := r.checkKeys([]string{keyCycleMinLR, keyCycleMaxLR, keyDecayLRRate, keyCycleFirstStepSize,
		keyCycleSecondStepSize, keyCycleFirstStairCount, keyCycleSecondStairCnt, keyDecayStepSize,
		keyCycleMomentum, keyCycleMinMom, keyCycleMaxMom, keyDecayMomRate, keyLastBatchIteration}); err != nil {
		return nil, err
	}
	p := &OneCycleParams{}
	var err error
	if p.FirstStepSize, err = r.positive(keyCycleFirstStepSize, 2000, "steps in the increasing half of the cycle"); err != nil {
		return nil, err
	}
	if p.SecondStepSize, err = r.positive(keyCycleSecondStepSize, p.FirstStepSize, "steps in the decreasing half of the cycle"); err != nil {
		return nil, err
	}
	if p.FirstStairCount, err = r.stairs(keyCycleFirstStairCount, 0); err != nil {
		return nil, err
	}
	if p.SecondStairCount, err = r.stairs(keyCycleSecondStairCnt, p.FirstStairCount); err != nil {
		return nil, err
	}
	if p.DecayStepSize, err = r.float(keyDecayStepSize, 0); err != nil {
		return nil, err
	}
	if p.DecayStepSize < 0 {
		return nil, r.bad(keyDecayStepSize, r.params[keyDecayStepSize], "must be >= 0 (0 = no decay after the cycle)", "a number >= 0 (0 = no decay after the cycle)")
	}
	if p.MinLR, err = r.lrs(keyCycleMinLR, nil, groups); err != nil {
		return nil, err
	}
	if p.MaxLR, err = r.lrs(keyCycleMaxLR, nil, groups); err != nil {
		return nil, err
	}
	if p.DecayLRRate, err = r.float(keyDecayLRRate, 0); err != nil {
		return nil, err
	}
	if p.DecayMomRate, err = r.float(keyDecayMomRate, 0); err != nil {
		return nil, err
	}
	if p.CycleMomentum, err = r.boolean(keyCycleMomentum, true); err != nil {
		return nil, err
	}
	if p.MinMom, err = r.floats(keyCycleMinMom, fill(groups, 0.8), groups); err != nil {
		return nil, err
	}
	if p.MaxMom, err = r.floats(keyCycleMaxMom, fill(groups, 0.9), groups); err != nil {
		return nil, err
	}
	if p.CycleMomentum && !hasBetas {
		r.warn(keyCycleMomentum, "momentum cycling is disabled because the optimizer has no betas")
		p.CycleMomentum = false
	}
	return p, nil
}

func (r *paramReader) lrRangeTest(groups int) (*LRRangeTestParams, error) {
	if err := r.checkKeys([]string{keyLRRTMinLR, keyLRRTStepSize, keyLRRTStepRate, keyLRRTStaircase,
		keyLastBatchIteration}); err != nil {
		return nil, err
	}
	p := &LRRangeTestParams{}
	var err error
	if p.MinLR, err = r.lrs(keyLRRTMinLR, fill(groups, 1e-3), groups); err != nil {
		return nil, err
	}
	if p.StepSize, err = r.positive(keyLRRTStepSize, 2000, "training steps per LR increase"); err != nil {
		return nil, err
	}
	if p.StepRate, err = r.float(keyLRRTStepRate, 1.0); err != nil {
		return nil, err
	}
	if p.Staircase, err = r.boolean(keyLRRTStaircase, false); err != nil {
		return nil, err
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
// raised to at least 2 as DeepSpeed does (so 0, which the Hugging Face
// Trainer writes when it has no warmup, means 2). Negative values, which
// DeepSpeed also raises, are refused: they are always a mistake.
func (r *paramReader) warmupSteps() (int, error) {
	n, _, err := r.integer(keyWarmupNumSteps, 1000)
	if err == nil && n < 0 {
		err = r.bad(keyWarmupNumSteps, r.params[keyWarmupNumSteps], "must be >= 0", "an integer >= 0")
	}
	return max(2, n), err
}
