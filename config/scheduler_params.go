package config

import (
	"errors"
	"fmt"
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
//     warmup_num_steps (1000, an integer >= 0, raised to 2 if below; 0,
//     which DeepSpeed 0.19.8 refuses, with a warning),
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
// Each bad value and each unknown key is a *ParamError matching
// ErrInvalidScheduleParam, all of them joined (errors.Join; errors.As
// finds the first); an unknown type (torch.optim.lr_scheduler classes
// included) one matching ErrUnknownSchedule. Where DeepSpeed would only fail at the first step (a
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
	var lbErr error
	s.LastBatchIteration, lbErr = r.lastBatchIteration()
	if err := errors.Join(err, lbErr); err != nil {
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
