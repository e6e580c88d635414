package config

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The classes of *ParamError, for errors.Is. Package optim re-exports them
// under the same names, so either package's sentinel matches.
var (
	// ErrUnsupportedOptimizer: an optimizer type deepgo does not implement.
	ErrUnsupportedOptimizer = errors.New("optimizer not supported")
	// ErrInvalidOptimizerParam: a bad value in "optimizer.params".
	ErrInvalidOptimizerParam = errors.New("invalid optimizer parameter")
	// ErrUnknownSchedule: a scheduler type deepgo does not implement.
	ErrUnknownSchedule = errors.New("unknown scheduler type")
	// ErrInvalidScheduleParam: a bad value in "scheduler.params".
	ErrInvalidScheduleParam = errors.New("invalid scheduler parameter")
)

// ParamError is one bad value in a ds_config "optimizer" or "scheduler"
// block, found by ParseOptimizer or ParseScheduler. It formats as
// "<key>: <value>: <reason>", e.g.
// "optimizer.params.betas[1]: 1.5: must be in [0, 1)". Parse reports the
// same problem as a *FieldError with the same path.
type ParamError struct {
	// Key is the full ds_config path, e.g. "scheduler.params.warmup_num_steps".
	Key string
	// Value is the offending value as given (nil when Missing).
	Value any
	// Missing is true when a required key was absent.
	Missing bool
	// Reason says what is wrong, e.g. "must be finite and >= 0".
	Reason string
	// Allowed says what would be accepted instead, as FieldError.Allowed
	// does, e.g. "a number >= 0 (finite)".
	Allowed string
	// Class is the sentinel the error matches with errors.Is:
	// ErrInvalidOptimizerParam, ErrUnsupportedOptimizer,
	// ErrInvalidScheduleParam or ErrUnknownSchedule.
	Class error
	// msg is FieldError.Msg: why a type is refused.
	msg string
}

// Error formats as "<key>: <value>: <reason>".
func (e *ParamError) Error() string {
	v := "missing"
	if !e.Missing {
		v = formatParamValue(e.Value)
	}
	return fmt.Sprintf("%s: %s: %s", e.Key, v, e.Reason)
}

// Unwrap makes errors.Is(err, e.Class) true.
func (e *ParamError) Unwrap() error { return e.Class }

// fieldError is the *FieldError Parse reports for e.
func (e *ParamError) fieldError() *FieldError {
	v := "<absent>"
	if !e.Missing {
		v = render(e.Value)
	}
	return &FieldError{Path: e.Key, Value: v, Allowed: e.Allowed, Msg: e.msg}
}

func formatParamValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case nil:
		return "null"
	}
	if b, err := json.Marshal(v); err == nil {
		return string(b)
	}
	return fmt.Sprintf("%v", v)
}
