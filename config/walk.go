package config

import (
	"math"
	"reflect"
	"sort"
)

// loader carries the state of one Parse: warnings, errors and bookkeeping.
type loader struct {
	o          options
	warns      []Warning
	errs       Errors
	explicit   map[string]bool
	autos      []string
	unresolved []string
	other      map[string]any
}

func newLoader(o options) *loader {
	return &loader{o: o, explicit: map[string]bool{}, other: map[string]any{}}
}

func (l *loader) warn(path, format string, args ...any) {
	l.warns = append(l.warns, Warning{Path: path, Msg: sprintf(format, args...)})
}

func (l *loader) fail(path string, value any, allowed, msg string) {
	v := ""
	if value != nil {
		v = render(value)
	}
	if _, ok := value.(absent); ok {
		v = "<absent>"
	}
	l.errs = append(l.errs, &FieldError{Path: path, Value: v, Allowed: allowed, Msg: msg})
}

// absent marks a missing value in fail.
type absent struct{}

func join(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}

// sortedKeys is m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// walk checks raw against the section type t and returns a clean copy with
// defaults filled in, ready for encoding/json to decode into t.
func (l *loader) walk(path string, raw map[string]any, t reflect.Type, kind string) map[string]any {
	s := sectionOf(t)
	out := map[string]any{}
	for _, k := range sortedKeys(raw) {
		p := join(path, k)
		v := raw[k]
		f := s.byName[k]
		if f == nil || (f.only != "" && f.only != kind) {
			if path == "" && otherSections[k] {
				l.other[k] = v
				continue
			}
			l.unknown(p, v, s, kind)
			continue
		}
		if v == nil {
			continue // null behaves like absent, as in DeepSpeed's dict reads
		}
		if str, ok := v.(string); ok && str == "auto" && !f.keepauto {
			l.autos = append(l.autos, p)
			nv, ok := l.auto(p, f, t, kind)
			if !ok {
				continue
			}
			if cv, ok := l.value(p, nv, f); ok {
				out[k] = cv
			}
			continue
		}
		if cv, ok := l.value(p, v, f); ok {
			out[k] = cv
			l.explicit[p] = true
		}
	}
	for _, f := range s.fields {
		if f.only != "" && f.only != kind {
			continue
		}
		if _, ok := out[f.name]; ok {
			continue
		}
		if f.typ.Kind() == reflect.Struct {
			out[f.name] = l.walk(join(path, f.name), map[string]any{}, f.typ, f.kind)
			continue
		}
		if f.required {
			if _, given := raw[f.name]; !given {
				l.fail(join(path, f.name), absent{}, f.allowed(), "required when "+path+" is given")
			}
			continue
		}
		if d, ok := f.defaultValue(kind); ok {
			out[f.name] = d
		}
	}
	return out
}

// value checks one value against its field and returns the clean value.
func (l *loader) value(p string, v any, f *field) (any, bool) {
	t := base(f.typ)
	bad := func() (any, bool) {
		l.fail(p, v, f.allowed(), "")
		return nil, false
	}
	switch t.Kind() {
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return bad()
		}
		return v, true
	case reflect.Int, reflect.Int64:
		n, ok := asInt(v)
		if !ok || !l.inRange(float64(n), f) {
			return bad()
		}
		return n, true
	case reflect.Float64:
		x, ok := asFloat(v)
		if !ok || !l.inRange(x, f) {
			return bad()
		}
		return x, true
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			return bad()
		}
		if len(f.enum) == 0 {
			return s, true
		}
		for _, e := range f.enum {
			if s == e || f.fold && equalFold(s, e) {
				return e, true
			}
		}
		return bad()
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return bad()
		}
		return l.walk(p, m, t, f.kind), true
	case reflect.Map:
		if _, ok := v.(map[string]any); !ok {
			return bad()
		}
		return v, true
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return bad()
		}
		for _, e := range arr {
			switch t.Elem().Kind() {
			case reflect.String:
				if _, ok := e.(string); !ok {
					return bad()
				}
			case reflect.Int:
				if _, ok := asInt(e); !ok {
					return bad()
				}
			}
		}
		return arr, true
	}
	return v, true
}

func (l *loader) inRange(x float64, f *field) bool {
	if f.min != nil && (x < *f.min || f.gt && x == *f.min) {
		return false
	}
	if f.max != nil && x > *f.max {
		return false
	}
	return true
}

// asInt accepts integers and integral floats within int64 range.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 9.2e18 {
			return int64(x), true
		}
	}
	return 0, false
}

// asFloat accepts any finite number (booleans are not numbers here).
func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return 0, false
		}
		return x, true
	}
	return 0, false
}
