package optim

import (
	"errors"
	"fmt"
	"math"
)

// LossScaler multiplies the loss before backward so that small fp16
// gradients do not underflow, and adapts that factor from the overflow
// outcome of each optimizer step.
//
// The engine uses it as DeepSpeed does: the backward of optimizer step t
// runs with Scale(); after the overflow check of step t it calls
// Update(overflow) exactly once; when overflow is true it skips the step
// (and does not step the LR schedule).
type LossScaler interface {
	// Scale returns the current loss scale.
	Scale() float64
	// Update records the overflow outcome of one optimizer step and adjusts
	// the scale. It returns an error (wrapping ErrLossScaleAtMinimum) when
	// the scale cannot be lowered any further; the state is then unchanged.
	Update(overflow bool) error
	// Dynamic reports whether the scale changes with overflows.
	Dynamic() bool
	// State returns a serialisable snapshot for checkpoints.
	State() ScalerState
	// SetState restores a snapshot taken by State.
	SetState(ScalerState) error
}

// ScalerState is the checkpointed state of a LossScaler. Field names follow
// the attributes of DeepSpeed's DynamicLossScaler.
type ScalerState struct {
	// Dynamic is true for a dynamic scaler, false for a static one.
	Dynamic bool `json:"dynamic"`
	// CurScale is the loss scale used for the next backward.
	CurScale float64 `json:"cur_scale"`
	// CurIter counts Update calls so far (dynamic scalers only).
	CurIter int64 `json:"cur_iter"`
	// LastOverflowIter is the CurIter value of the last overflowing Update,
	// or -1 if none happened yet (dynamic scalers only).
	LastOverflowIter int64 `json:"last_overflow_iter"`
	// CurHysteresis is the number of overflows still tolerated before the
	// scale is lowered (ZeRO mode only; 0 in the other modes).
	CurHysteresis int `json:"cur_hysteresis"`
}

// ErrLossScaleAtMinimum is wrapped by the error Update returns when an
// overflow arrives while the scale already sits at the minimum and
// RaiseErrorAtMin is set.
var ErrLossScaleAtMinimum = errors.New("loss scale already at minimum")

// ErrInvalidScalerConfig is wrapped by every configuration or state
// validation error of the loss scalers.
var ErrInvalidScalerConfig = errors.New("invalid loss scaler configuration")

// MinScaleError is the error returned by Update when the loss scale is stuck
// at its minimum and the gradients still overflow. It matches
// ErrLossScaleAtMinimum with errors.Is.
type MinScaleError struct {
	// Scale is the current (minimum) loss scale.
	Scale float64
	// Iter is the 0-based index of the Update call that failed.
	Iter int64
}

// Error implements error. The message keeps DeepSpeed's wording and says
// what to do about it.
func (e *MinScaleError) Error() string {
	return fmt.Sprintf("optim: loss scale already at minimum (%g) and gradients overflowed again at update %d "+
		"(DeepSpeed: \"Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\"); "+
		"fp16 training has diverged: lower the learning rate (or lengthen the warm-up), train in bf16 instead of fp16 "+
		"(models pretrained in bf16 often overflow fp16), check the input data and loss for inf/nan, "+
		"or lower fp16.min_loss_scale", e.Scale, e.Iter)
}

// Unwrap makes errors.Is(err, ErrLossScaleAtMinimum) true.
func (e *MinScaleError) Unwrap() error { return ErrLossScaleAtMinimum }

// StaticScaler is a LossScaler with a constant scale (DeepSpeed's
// LossScaler, used when fp16.loss_scale > 0, and with scale 1 for bf16/fp32).
type StaticScaler struct {
	scale float64
}

// NewStaticScaler returns a scaler that always reports scale. The scale must
// be positive and finite.
func NewStaticScaler(scale float64) (*StaticScaler, error) {
	if err := checkPositiveFinite("scale", scale); err != nil {
		return nil, err
	}
	return &StaticScaler{scale: scale}, nil
}

// Scale returns the constant scale.
func (s *StaticScaler) Scale() float64 { return s.scale }

// Update does nothing: a static scale never changes. The engine still skips
// steps whose gradients overflowed.
func (s *StaticScaler) Update(overflow bool) error { return nil }

// Dynamic returns false.
func (s *StaticScaler) Dynamic() bool { return false }

// State returns the scale as a ScalerState with Dynamic false.
func (s *StaticScaler) State() ScalerState {
	return ScalerState{CurScale: s.scale, LastOverflowIter: -1}
}

// SetState restores the scale from a static snapshot.
func (s *StaticScaler) SetState(st ScalerState) error {
	if st.Dynamic {
		return fmt.Errorf("optim: static scaler cannot load a dynamic scaler state: %w", ErrInvalidScalerConfig)
	}
	if err := checkPositiveFinite("cur_scale", st.CurScale); err != nil {
		return err
	}
	s.scale = st.CurScale
	return nil
}

func checkPositiveFinite(name string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return fmt.Errorf("optim: %s: %v: must be a positive finite number: %w", name, v, ErrInvalidScalerConfig)
	}
	return nil
}
