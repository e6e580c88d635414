package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// paramReader reads typed values out of an "optimizer.params" or
// "scheduler.params" map. Every error is a *ParamError naming the full
// path. JSON null reads as absent (Python's None: the default).
type paramReader struct {
	prefix string // "optimizer.params." or "scheduler.params."
	owner  string // the type, named in "required by" and unknown-key errors
	params map[string]any
	class  error
	// loose makes "auto" read as absent though given: Parse has already
	// reported it (a warning, or an error under WithStrict), so it is not
	// reported again, and checks that need its value are skipped.
	loose bool
	autos map[string]bool
	warns []Warning
}

func newParamReader(prefix, owner string, params map[string]any, class error, loose bool) *paramReader {
	return &paramReader{prefix: prefix, owner: owner, params: params, class: class, loose: loose, autos: map[string]bool{}}
}

// bad is the error for key: reason says what is wrong, allowed what would do.
func (r *paramReader) bad(key string, v any, reason, allowed string) *ParamError {
	return &ParamError{Key: r.prefix + key, Value: v, Reason: reason, Allowed: allowed, Class: r.class}
}

// must is bad with the reason "must be <allowed>".
func (r *paramReader) must(key string, v any, allowed string) *ParamError {
	return r.bad(key, v, "must be "+allowed, allowed)
}

func (r *paramReader) missing(key string) *ParamError {
	why := "required by " + r.owner
	return &ParamError{Key: r.prefix + key, Missing: true, Reason: why, Allowed: why, Class: r.class}
}

func (r *paramReader) warn(key, format string, args ...any) {
	r.warns = append(r.warns, Warning{Path: r.prefix + key, Msg: fmt.Sprintf(format, args...)})
}

// isAuto reports whether v is HF's "auto" placeholder (matched exactly, as
// the HF Trainer does).
func isAuto(v any) bool { s, ok := v.(string); return ok && s == "auto" }

// lookup returns a given, non-null value. A loose reader reads "auto" as
// absent and remembers the key.
func (r *paramReader) lookup(key string) (any, bool) {
	v, ok := r.params[key]
	if !ok || v == nil {
		return nil, false
	}
	if r.loose && isAuto(v) {
		r.autos[key] = true
		return nil, false
	}
	return v, true
}

// given reports whether key has a non-null value, "auto" included.
func (r *paramReader) given(key string) bool { return r.params[key] != nil }

// anyAuto reports whether a loose reader read one of keys as "auto".
func (r *paramReader) anyAuto(keys ...string) bool {
	for _, k := range keys {
		if r.autos[k] {
			return true
		}
	}
	return false
}

// checkKeys rejects keys the type does not take, as Python does for
// unexpected keyword arguments. The first unknown key in sorted order is
// reported.
func (r *paramReader) checkKeys(allowed []string) error {
	var unknown []string
	for k := range r.params {
		if !contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	errs := make([]error, len(unknown))
	for i, k := range unknown {
		errs[i] = r.unknownKey(k, allowed)
	}
	return errors.Join(errs...)
}

func (r *paramReader) unknownKey(k string, allowed []string) error {
	list := strings.Join(allowed, ", ")
	e := r.bad(k, r.params[k], fmt.Sprintf("unknown parameter for %s (allowed: %s)", r.owner, list),
		fmt.Sprintf("a parameter of %s (%s)", r.owner, list))
	if sug := suggest(k, allowed); sug != "" {
		e.Allowed += fmt.Sprintf("; did you mean %q?", sug)
	}
	return e
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

// number reads any number (range checks come later), or def when absent.
func (r *paramReader) number(key string, def float64) (float64, error) {
	v, ok := r.lookup(key)
	if !ok {
		return def, nil
	}
	f, ok := toFloat(v)
	if !ok {
		return 0, r.notNumber(key, v, "a number")
	}
	return f, nil
}

// notNumber is the error for a value that is not what kind says ("a
// number", "an integer"); a strict reader meeting "auto" says who resolves it.
func (r *paramReader) notNumber(key string, v any, kind string) error {
	if isAuto(v) {
		return r.bad(key, v, fmt.Sprintf(`must be %s ("auto" is resolved only by the Hugging Face Trainer integration)`, kind), kind)
	}
	return r.must(key, v, kind)
}

// float reads a finite number, or def when absent.
func (r *paramReader) float(key string, def float64) (float64, error) {
	f, err := r.number(key, def)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, r.must(key, r.params[key], "a finite number")
	}
	return f, nil
}

// floats reads a number (broadcast to every param group) or a list with one
// number per param group; def is used when absent (nil def: required).
func (r *paramReader) floats(key string, def []float64, groups int) ([]float64, error) {
	v, ok := r.lookup(key)
	if !ok {
		if def == nil && !r.autos[key] {
			return nil, r.missing(key)
		}
		if def == nil {
			def = make([]float64, groups)
		}
		return append([]float64(nil), def...), nil
	}
	listOf := fmt.Sprintf("a number or a list of %d numbers (one per param group)", groups)
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
		if _, isNum := toFloat(v); !isNum {
			return nil, r.must(key, v, listOf)
		}
		f, err := r.float(key, 0)
		if err != nil {
			return nil, err
		}
		return fill(groups, f), nil
	}
	if len(list) != groups {
		return nil, r.bad(key, v, fmt.Sprintf("list must have %d entries, one per param group, got %d", groups, len(list)), listOf)
	}
	out := make([]float64, len(list))
	for i, e := range list {
		f, ok := toFloat(e)
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, r.bad(key, v, fmt.Sprintf("entry %d must be a finite number", i), listOf)
		}
		out[i] = f
	}
	return out, nil
}

// fill returns n copies of v.
func fill(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// integer reads an integral number (an integral float such as 1000.0 from a
// JSON decoder is accepted), or def when absent. given reports whether the
// key had a value ("auto" included).
func (r *paramReader) integer(key string, def int) (n int, given bool, err error) {
	v, ok := r.lookup(key)
	if !ok {
		return def, r.autos[key], nil
	}
	f, ok := toFloat(v)
	if !ok {
		if _, isBool := v.(bool); isBool {
			return 0, true, r.must(key, v, "an integer")
		}
		return 0, true, r.notNumber(key, v, "an integer")
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, true, r.must(key, v, "an integer")
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
		return false, r.must(key, v, "true or false")
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
		return "", r.must(key, v, "a string")
	}
	return s, nil
}
