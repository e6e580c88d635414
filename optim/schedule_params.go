package optim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// ErrUnknownSchedule is wrapped by the error NewSchedule returns for a
// scheduler type it does not know.
var ErrUnknownSchedule = errors.New("unknown scheduler type")

// ErrInvalidScheduleParam is wrapped by every *ParamError.
var ErrInvalidScheduleParam = errors.New("invalid scheduler parameter")

// paramPrefix is the ds_config path of the scheduler parameters.
const paramPrefix = "scheduler.params."

// ParamError reports a bad value in the ds_config "scheduler.params" block.
// It matches ErrInvalidScheduleParam with errors.Is.
type ParamError struct {
	// Key is the full ds_config path, e.g. "scheduler.params.warmup_num_steps".
	Key string
	// Value is the offending value as given (nil when the key is missing).
	Value any
	// Missing is true when a required key was absent.
	Missing bool
	// Reason says what is allowed.
	Reason string
}

// Error formats as "<key>: <value>: <reason>".
func (e *ParamError) Error() string {
	v := "missing"
	if !e.Missing {
		v = formatParamValue(e.Value)
	}
	return fmt.Sprintf("%s: %s: %s", e.Key, v, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidScheduleParam) true.
func (e *ParamError) Unwrap() error { return ErrInvalidScheduleParam }

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

// paramReader reads typed values out of a scheduler params map and records
// which keys were consumed.
type paramReader struct {
	typ    string
	params map[string]any
	groups int
}

func (r *paramReader) errf(key string, v any, format string, args ...any) error {
	return &ParamError{Key: paramPrefix + key, Value: v, Reason: fmt.Sprintf(format, args...)}
}

func (r *paramReader) missing(key string) error {
	return &ParamError{Key: paramPrefix + key, Missing: true, Reason: "required by " + r.typ}
}

// lookup returns the raw value; JSON null counts as absent (Python None).
func (r *paramReader) lookup(key string) (any, bool) {
	v, ok := r.params[key]
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

// checkKeys rejects keys the scheduler does not take, as Python does for
// unexpected keyword arguments.
func (r *paramReader) checkKeys(allowed []string) error {
	var unknown []string
	for k := range r.params {
		found := false
		for _, a := range allowed {
			if k == a {
				found = true
				break
			}
		}
		if !found {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	k := unknown[0]
	return r.errf(k, r.params[k], "unknown parameter for %s (allowed: %s)", r.typ, strings.Join(allowed, ", "))
}

// toFloat converts a JSON-ish number.
func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

func notNumberReason(v any) string {
	if s, ok := v.(string); ok && s == "auto" {
		return `must be a number ("auto" is resolved only by the Hugging Face Trainer integration)`
	}
	return "must be a number"
}

// float reads a finite number, or def when absent.
func (r *paramReader) float(key string, def float64) (float64, error) {
	v, ok := r.lookup(key)
	if !ok {
		return def, nil
	}
	f, ok := toFloat(v)
	if !ok {
		return 0, r.errf(key, v, "%s", notNumberReason(v))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, r.errf(key, v, "must be a finite number")
	}
	return f, nil
}

// requiredFloat reads a finite number that must be present.
func (r *paramReader) requiredFloat(key string) (float64, error) {
	if _, ok := r.lookup(key); !ok {
		return 0, r.missing(key)
	}
	return r.float(key, 0)
}

// floats reads a number (broadcast to every param group) or a list with one
// number per param group. def is used when absent (nil def = required).
func (r *paramReader) floats(key string, def []float64) ([]float64, error) {
	v, ok := r.lookup(key)
	if !ok {
		if def == nil {
			return nil, r.missing(key)
		}
		return append([]float64(nil), def...), nil
	}
	var list []any
	switch x := v.(type) {
	case []any:
		list = x
	case []float64:
		for _, f := range x {
			list = append(list, f)
		}
	case []int:
		for _, f := range x {
			list = append(list, f)
		}
	default:
		f, err := r.float(key, 0)
		if err != nil {
			if _, isNum := toFloat(v); !isNum {
				return nil, r.errf(key, v, "must be a number or a list of %d numbers (one per param group)", r.groups)
			}
			return nil, err
		}
		out := make([]float64, r.groups)
		for i := range out {
			out[i] = f
		}
		return out, nil
	}
	if len(list) != r.groups {
		return nil, r.errf(key, v, "list must have %d entries, one per param group, got %d", r.groups, len(list))
	}
	out := make([]float64, len(list))
	for i, e := range list {
		f, ok := toFloat(e)
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, r.errf(key, v, "entry %d must be a finite number", i)
		}
		out[i] = f
	}
	return out, nil
}

// integer reads an integral number (an integral float such as 1000.0 from a
// JSON decoder is accepted), or def when absent.
func (r *paramReader) integer(key string, def int) (int, bool, error) {
	v, ok := r.lookup(key)
	if !ok {
		return def, false, nil
	}
	f, ok := toFloat(v)
	if !ok {
		if _, isBool := v.(bool); isBool {
			return 0, true, r.errf(key, v, "must be an integer")
		}
		return 0, true, r.errf(key, v, "%s", strings.Replace(notNumberReason(v), "a number", "an integer", 1))
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, true, r.errf(key, v, "must be an integer")
	}
	return int(f), true, nil
}

// boolean reads a bool, or def when absent.
func (r *paramReader) boolean(key string, def bool) (bool, error) {
	v, ok := r.lookup(key)
	if !ok {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, r.errf(key, v, "must be true or false")
	}
	return b, nil
}

// str reads a string, or def when absent.
func (r *paramReader) str(key, def string) (string, error) {
	v, ok := r.lookup(key)
	if !ok {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", r.errf(key, v, "must be a string")
	}
	return s, nil
}

// lastBatchIteration reads DeepSpeed's last_batch_iteration kwarg (default
// -1, the start of the schedule).
func (r *paramReader) lastBatchIteration() (int, error) {
	n, _, err := r.integer(keyLastBatchIteration, -1)
	if err != nil {
		return 0, err
	}
	if n < -1 {
		return 0, r.errf(keyLastBatchIteration, r.params[keyLastBatchIteration], "must be >= -1 (-1 starts the schedule from the beginning)")
	}
	return n, nil
}

// warmupType reads warmup_type. Like DeepSpeed, an unknown string falls
// back to "log" with a warning.
func (r *paramReader) warmupType(warn func(string)) (string, error) {
	t, err := r.str(keyWarmupType, warmupLog)
	if err != nil {
		return "", err
	}
	if t != warmupLog && t != warmupLinear {
		warn(fmt.Sprintf("%s%s: %q: unknown warmup type, using %q (allowed: %q, %q)",
			paramPrefix, keyWarmupType, t, warmupLog, warmupLog, warmupLinear))
		t = warmupLog
	}
	return t, nil
}

// warmupSteps reads warmup_num_steps: an integer >= 0 (default 1000),
// clamped to at least 2 as DeepSpeed does (so 0, which the Hugging Face
// Trainer writes when it has no warmup, means 2). Negative values, which
// DeepSpeed also clamps, are refused: they are always a mistake.
func (r *paramReader) warmupSteps() (int, error) {
	n, _, err := r.integer(keyWarmupNumSteps, 1000)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, r.errf(keyWarmupNumSteps, r.params[keyWarmupNumSteps], "must be >= 0")
	}
	return max(2, n), nil
}
