package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/deepgo-ml/deepgo/config"
)

// Scheduler type names, as written in the ds_config "scheduler.type".
const (
	ScheduleWarmupLR       = config.ScheduleWarmupLR
	ScheduleWarmupDecayLR  = config.ScheduleWarmupDecayLR
	ScheduleWarmupCosineLR = config.ScheduleWarmupCosineLR
	ScheduleOneCycle       = config.ScheduleOneCycle
	ScheduleLRRangeTest    = config.ScheduleLRRangeTest
)

// ScheduleTypes returns the scheduler types NewSchedule knows, sorted.
func ScheduleTypes() []string { return config.ScheduleTypes() }

// ErrUnknownSchedule is matched by the error NewSchedule returns for a
// scheduler type it does not know. It is config.ErrUnknownSchedule.
var ErrUnknownSchedule = config.ErrUnknownSchedule

// ErrInvalidScheduleParam is matched by every *ParamError and by
// NewSchedule's other argument errors. It is config.ErrInvalidScheduleParam.
var ErrInvalidScheduleParam = config.ErrInvalidScheduleParam

// ParamError reports a bad value in the ds_config "scheduler.params" block:
// "<key>: <value>: <reason>", with "missing" as the value of an absent
// required key. It is config.ParamError: config.Parse and NewSchedule
// apply the same rules (config.ParseScheduler) and report the same path.
type ParamError = config.ParamError

// Schedule is a per-step learning-rate (and, for OneCycle, momentum)
// schedule with DeepSpeed's semantics (deepspeedai/DeepSpeed 0.19.x
// runtime/lr_schedules.py).
//
// A schedule keeps DeepSpeed's last_batch_iteration counter t, which starts
// at -1. Optimizer step k (0-based) runs with LR() as it is before the k-th
// Step call; the engine calls Step after each optimizer step that did not
// overflow, like DeepSpeed's lr_scheduler.step(). LR and Betas are pure
// functions of t, so a schedule restored with SetState continues exactly.
//
// A Schedule is not safe for concurrent use.
type Schedule interface {
	// Type returns the scheduler type name, e.g. "WarmupLR".
	Type() string
	// Groups returns the number of param groups.
	Groups() int
	// Step advances t by one.
	Step()
	// LastBatchIteration returns t (-1 before the first Step).
	LastBatchIteration() int
	// LR returns the per-group learning rates for the current t.
	LR() []float64
	// LRAt returns the per-group learning rates at t = lastBatchIteration
	// without changing the schedule. t = -1 gives the values the
	// constructor writes into the optimizer.
	LRAt(lastBatchIteration int) []float64
	// Betas returns per-group (beta1, beta2) for the current t, and false
	// when the schedule does not drive the optimizer's betas (every type but
	// OneCycle, or OneCycle with cycle_momentum off or an optimizer without
	// betas), in which case the optimizer keeps its own.
	Betas() ([][2]float64, bool)
	// BetasAt is Betas at t = lastBatchIteration.
	BetasAt(lastBatchIteration int) ([][2]float64, bool)
	// State returns the checkpointable state.
	State() ScheduleState
	// SetState restores a state taken by State.
	SetState(ScheduleState) error
}

// ScheduleState is the checkpointed state of a Schedule: DeepSpeed's
// scheduler state_dict plus the type for a sanity check.
type ScheduleState struct {
	// Type is the scheduler type the state came from (may be empty).
	Type string `json:"type,omitempty"`
	// LastBatchIteration is DeepSpeed's last_batch_iteration.
	LastBatchIteration int `json:"last_batch_iteration"`
}

// ScheduleOption customises NewSchedule.
type ScheduleOption func(*scheduleOptions)

type scheduleOptions struct {
	hasBetas bool
	warn     func(string)
}

// WithoutBetas tells NewSchedule that the optimizer has no betas (such as
// SGD). OneCycle then disables momentum cycling, as DeepSpeed does when
// "betas" is missing from the optimizer defaults.
func WithoutBetas() ScheduleOption {
	return func(o *scheduleOptions) { o.hasBetas = false }
}

// WithWarnings routes the warnings DeepSpeed logs while building a
// schedule (unknown warmup_type, total_num_steps < warmup_num_steps,
// momentum cycling disabled) to fn. By default they are dropped.
func WithWarnings(fn func(msg string)) ScheduleOption {
	return func(o *scheduleOptions) {
		if fn != nil {
			o.warn = fn
		}
	}
}

// NewSchedule builds the schedule named by typ (the ds_config
// "scheduler.type") from params (the ds_config "scheduler.params", as
// decoded from JSON) for an optimizer whose param groups start with
// learning rates baseLRs. config.ParseScheduler reads the params: its doc
// lists each type's parameters and DeepSpeed's defaults. With t the
// last_batch_iteration and N the warm-up steps:
//
//   - WarmupLR: lr = min + (max-min)*g, g = ln(t+1)/ln(N) (log) or t/N
//     (linear) while t < N, then 1.
//   - WarmupDecayLR: as WarmupLR; after warm-up g = max(0, (T-t)/max(1, T-N))
//     with T = total_num_steps.
//   - WarmupCosineLR: lr = base_lr * ratio, warm-up from warmup_min_ratio,
//     then a cosine down to cos_min_ratio at T; zero before the first Step.
//   - OneCycle: a triangle from cycle_min_lr to cycle_max_lr and back (the
//     momentum, beta1, goes the other way), then decay.
//   - LRRangeTest: lr = min_lr * (1 + rate*k), k = (t+1)/step_size,
//     floored with staircase.
//
// Bad values give a
// *ParamError ("scheduler.params.<key>: <value>: <what is allowed>"); an
// unknown type gives an error matching ErrUnknownSchedule that lists the
// known ones.
func NewSchedule(typ string, params map[string]any, baseLRs []float64, opts ...ScheduleOption) (Schedule, error) {
	o := scheduleOptions{hasBetas: true, warn: func(string) {}}
	for _, opt := range opts {
		opt(&o)
	}
	if len(baseLRs) == 0 {
		return nil, fmt.Errorf("optim: NewSchedule(%q): need the learning rate of at least one param group: %w",
			typ, ErrInvalidScheduleParam)
	}
	for i, lr := range baseLRs {
		if math.IsNaN(lr) || math.IsInf(lr, 0) {
			return nil, fmt.Errorf("optim: NewSchedule(%q): base lr of param group %d: %v: must be finite: %w",
				typ, i, lr, ErrInvalidScheduleParam)
		}
	}
	spec, err := config.ParseScheduler(typ, params, baseLRs, o.hasBetas)
	if errors.Is(err, ErrUnknownSchedule) {
		return nil, fmt.Errorf("optim: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("optim: %s: %w", typ, err)
	}
	for _, w := range spec.Warnings {
		o.warn(w.String())
	}
	var impl scheduleImpl
	switch {
	case spec.Warmup != nil:
		impl = newWarmupLR(spec.Warmup)
	case spec.WarmupCosine != nil:
		impl = newWarmupCosineLR(spec.WarmupCosine, baseLRs)
	case spec.OneCycle != nil:
		impl = newOneCycle(spec.OneCycle)
	case spec.LRRangeTest != nil:
		impl = &lrRangeTest{p: *spec.LRRangeTest}
	}
	return &schedule{typ: typ, groups: len(baseLRs), last: spec.LastBatchIteration, impl: impl}, nil
}

// scheduleImpl is the pure part of a schedule: values as functions of t.
type scheduleImpl interface {
	lrAt(t int) []float64
	betasAt(t int) ([][2]float64, bool)
}

// noBetas is embedded by schedules that never touch the optimizer's betas.
type noBetas struct{}

func (noBetas) betasAt(int) ([][2]float64, bool) { return nil, false }

// schedule implements Schedule on top of a scheduleImpl.
type schedule struct {
	typ    string
	groups int
	last   int
	impl   scheduleImpl
}

func (s *schedule) Type() string                { return s.typ }
func (s *schedule) Groups() int                 { return s.groups }
func (s *schedule) Step()                       { s.last++ }
func (s *schedule) LastBatchIteration() int     { return s.last }
func (s *schedule) LR() []float64               { return s.impl.lrAt(s.last) }
func (s *schedule) LRAt(t int) []float64        { return s.impl.lrAt(t) }
func (s *schedule) Betas() ([][2]float64, bool) { return s.impl.betasAt(s.last) }
func (s *schedule) BetasAt(t int) ([][2]float64, bool) {
	return s.impl.betasAt(t)
}

func (s *schedule) State() ScheduleState {
	return ScheduleState{Type: s.typ, LastBatchIteration: s.last}
}

func (s *schedule) SetState(st ScheduleState) error {
	if st.Type != "" && st.Type != s.typ {
		return fmt.Errorf("optim: scheduler state is for %q, this schedule is %q: %w",
			st.Type, s.typ, ErrInvalidScheduleParam)
	}
	if st.LastBatchIteration < -1 {
		return fmt.Errorf("optim: scheduler state last_batch_iteration: %d: must be >= -1: %w",
			st.LastBatchIteration, ErrInvalidScheduleParam)
	}
	s.last = st.LastBatchIteration
	return nil
}

const warmupLinear = "linear"

// warmupGamma is DeepSpeed's warm-up progress for t in [0, n).
func warmupGamma(typ string, invLogN float64, t, n int) float64 {
	if typ == warmupLinear {
		return float64(t) / float64(n)
	}
	return invLogN * math.Log(float64(t+1))
}
