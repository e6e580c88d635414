package optim

import (
	"fmt"
	"math"
)

// ScalerMode selects which of DeepSpeed's two dynamic loss-scaling rules a
// DynamicScaler follows.
type ScalerMode int

const (
	// ScalerModeZeRO follows DeepSpeed's DynamicLossScaler, the scaler ZeRO
	// stages 1, 2 and 3 use: hysteresis (DelayedShift), optional consecutive
	// hysteresis, and an error when an overflow arrives at the minimum scale
	// (RaiseErrorAtMin).
	ScalerModeZeRO ScalerMode = iota
	// ScalerModeFP16Optimizer follows the private _update_scale of
	// DeepSpeed's FP16_Optimizer / FP16_UnfusedOptimizer (fp16 without
	// ZeRO): every overflow halves the scale (never below MinScale), there is
	// no hysteresis and no error at the minimum. DelayedShift,
	// ConsecutiveHysteresis and RaiseErrorAtMin are ignored.
	ScalerModeFP16Optimizer
)

// String returns "zero" or "fp16_optimizer".
func (m ScalerMode) String() string {
	switch m {
	case ScalerModeZeRO:
		return "zero"
	case ScalerModeFP16Optimizer:
		return "fp16_optimizer"
	}
	return fmt.Sprintf("ScalerMode(%d)", int(m))
}

// DynamicScalerConfig configures a DynamicScaler. The ds_config "fp16"
// section maps onto it as InitScale = 2**initial_scale_power,
// ScaleWindow = loss_scale_window, DelayedShift = hysteresis,
// ConsecutiveHysteresis = consecutive_hysteresis, MinScale = min_loss_scale.
type DynamicScalerConfig struct {
	// InitScale is the first loss scale (DeepSpeed default 2**16).
	InitScale float64
	// ScaleFactor multiplies/divides the scale on growth/overflow. Zero means
	// 2, DeepSpeed's fixed value; otherwise it must be > 1.
	ScaleFactor float64
	// ScaleWindow is the number of clean steps after an overflow before the
	// scale grows (DeepSpeed default 1000). Must be >= 1.
	ScaleWindow int
	// MinScale is the floor of the scale (DeepSpeed default 1). Must be
	// positive.
	MinScale float64
	// DelayedShift is DeepSpeed's hysteresis: the number of overflows
	// tolerated before the scale is lowered (default 2). Must be >= 1 in
	// ScalerModeZeRO.
	DelayedShift int
	// ConsecutiveHysteresis refills the hysteresis on every clean step
	// instead of only when the scale grows.
	ConsecutiveHysteresis bool
	// RaiseErrorAtMin makes Update fail with a *MinScaleError when an
	// overflow arrives with the scale at MinScale and no hysteresis left
	// (always true in DeepSpeed's ZeRO path).
	RaiseErrorAtMin bool
	// Mode selects the ZeRO or the non-ZeRO fp16 optimizer rule.
	Mode ScalerMode
}

// DefaultDynamicScalerConfig returns DeepSpeed's defaults for the ZeRO path:
// initial_scale_power 16, loss_scale_window 1000, hysteresis 2,
// consecutive_hysteresis false, min_loss_scale 1, error at the minimum.
func DefaultDynamicScalerConfig() DynamicScalerConfig {
	return DynamicScalerConfig{
		InitScale:       65536,
		ScaleFactor:     2,
		ScaleWindow:     1000,
		MinScale:        1,
		DelayedShift:    2,
		RaiseErrorAtMin: true,
		Mode:            ScalerModeZeRO,
	}
}

// Validate checks the configuration and returns an error naming the first
// bad field. A zero ScaleFactor is accepted (it means 2).
func (c DynamicScalerConfig) Validate() error {
	if err := checkPositiveFinite("InitScale", c.InitScale); err != nil {
		return err
	}
	if err := checkPositiveFinite("MinScale", c.MinScale); err != nil {
		return err
	}
	if c.ScaleFactor != 0 && (!(c.ScaleFactor > 1) || math.IsInf(c.ScaleFactor, 0)) {
		return fmt.Errorf("optim: ScaleFactor: %v: must be a finite number > 1 (or 0 for the default 2): %w",
			c.ScaleFactor, ErrInvalidScalerConfig)
	}
	if c.ScaleWindow < 1 {
		return fmt.Errorf("optim: ScaleWindow (fp16.loss_scale_window): %d: must be >= 1: %w",
			c.ScaleWindow, ErrInvalidScalerConfig)
	}
	switch c.Mode {
	case ScalerModeZeRO:
		if c.DelayedShift < 1 {
			return fmt.Errorf("optim: DelayedShift (fp16.hysteresis): %d: must be >= 1: %w",
				c.DelayedShift, ErrInvalidScalerConfig)
		}
	case ScalerModeFP16Optimizer:
	default:
		return fmt.Errorf("optim: Mode: %v: must be ScalerModeZeRO or ScalerModeFP16Optimizer: %w",
			c.Mode, ErrInvalidScalerConfig)
	}
	return nil
}

// DynamicScaler is DeepSpeed's dynamic loss scaler (deepspeedai/DeepSpeed
// 0.19.x semantics). Let stable = CurIter - LastOverflowIter - 1 at an
// Update call.
//
// ScalerModeZeRO (DynamicLossScaler.update_scale):
//   - overflow with DelayedShift == 1 or hysteresis == 1: if the scale is
//     already MinScale and RaiseErrorAtMin, fail with *MinScaleError (state
//     unchanged); otherwise scale = max(scale/factor, MinScale).
//   - overflow otherwise: hysteresis -= 1, scale kept.
//   - clean step: with ConsecutiveHysteresis refill the hysteresis; if
//     stable > 0 and stable % ScaleWindow == 0, grow scale *= factor (and
//     refill hysteresis when not consecutive).
//
// ScalerModeFP16Optimizer (FP16_Optimizer._update_scale): overflow sets
// scale = max(scale/factor, MinScale); clean steps grow as above.
//
// Every overflow records LastOverflowIter = CurIter, and every successful
// Update increments CurIter. A DynamicScaler is not safe for concurrent use.
type DynamicScaler struct {
	cfg   DynamicScalerConfig
	state ScalerState
}

// NewDynamicScaler validates cfg and returns a scaler at cfg.InitScale.
func NewDynamicScaler(cfg DynamicScalerConfig) (*DynamicScaler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ScaleFactor == 0 {
		cfg.ScaleFactor = 2
	}
	s := &DynamicScaler{cfg: cfg}
	s.state = ScalerState{
		Dynamic:          true,
		CurScale:         cfg.InitScale,
		CurIter:          0,
		LastOverflowIter: -1,
	}
	if cfg.Mode == ScalerModeZeRO {
		s.state.CurHysteresis = cfg.DelayedShift
	}
	return s, nil
}

// Config returns the configuration the scaler was built with (ScaleFactor
// resolved).
func (s *DynamicScaler) Config() DynamicScalerConfig { return s.cfg }

// Scale returns the loss scale for the next backward.
func (s *DynamicScaler) Scale() float64 { return s.state.CurScale }

// Hysteresis returns the number of overflows still tolerated before the
// scale is lowered (0 in ScalerModeFP16Optimizer).
func (s *DynamicScaler) Hysteresis() int { return s.state.CurHysteresis }

// Dynamic returns true.
func (s *DynamicScaler) Dynamic() bool { return true }

// Update applies the outcome of one optimizer step; see DynamicScaler.
func (s *DynamicScaler) Update(overflow bool) error {
	st := &s.state
	f := s.cfg.ScaleFactor
	if overflow {
		if s.cfg.Mode == ScalerModeFP16Optimizer {
			st.CurScale = math.Max(st.CurScale/f, s.cfg.MinScale)
		} else if s.cfg.DelayedShift == 1 || st.CurHysteresis == 1 {
			if st.CurScale == s.cfg.MinScale && s.cfg.RaiseErrorAtMin {
				return &MinScaleError{Scale: st.CurScale, Iter: st.CurIter}
			}
			st.CurScale = math.Max(st.CurScale/f, s.cfg.MinScale)
		} else {
			st.CurHysteresis--
		}
		st.LastOverflowIter = st.CurIter
	} else {
		consecutive := s.cfg.Mode == ScalerModeZeRO && s.cfg.ConsecutiveHysteresis
		if consecutive {
			st.CurHysteresis = s.cfg.DelayedShift
		}
		stable := st.CurIter - st.LastOverflowIter - 1
		if stable > 0 && stable%int64(s.cfg.ScaleWindow) == 0 {
			if s.cfg.Mode == ScalerModeZeRO && !consecutive {
				st.CurHysteresis = s.cfg.DelayedShift
			}
			st.CurScale *= f
		}
	}
	st.CurIter++
	return nil
}

// State returns a copy of the checkpointable state.
func (s *DynamicScaler) State() ScalerState { return s.state }

// SetState restores a state taken by State (for example from a checkpoint).
// It rejects static states and inconsistent counters.
func (s *DynamicScaler) SetState(st ScalerState) error {
	if !st.Dynamic {
		return fmt.Errorf("optim: dynamic scaler cannot load a static scaler state: %w", ErrInvalidScalerConfig)
	}
	if err := checkPositiveFinite("cur_scale", st.CurScale); err != nil {
		return err
	}
	if st.CurIter < 0 || st.LastOverflowIter < -1 || (st.LastOverflowIter >= 0 && st.LastOverflowIter >= st.CurIter) {
		return fmt.Errorf("optim: cur_iter %d, last_overflow_iter %d: need cur_iter >= 0 and -1 <= last_overflow_iter < cur_iter: %w",
			st.CurIter, st.LastOverflowIter, ErrInvalidScalerConfig)
	}
	if s.cfg.Mode == ScalerModeZeRO {
		if st.CurHysteresis < 1 || st.CurHysteresis > s.cfg.DelayedShift {
			return fmt.Errorf("optim: cur_hysteresis: %d: must be in [1, %d] (fp16.hysteresis): %w",
				st.CurHysteresis, s.cfg.DelayedShift, ErrInvalidScalerConfig)
		}
	} else {
		st.CurHysteresis = 0
	}
	s.state = st
	return nil
}
