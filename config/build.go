package config

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
)

// build turns a raw document into a Config.
func build(raw map[string]any, o options) (*Config, error) {
	l := newLoader(o)
	l.deprecated(raw)
	tree := l.walk("", raw, reflect.TypeOf(Config{}), "")
	l.optimizerParams(tree)
	l.overflows("", tree)
	l.overflows("", l.other)
	cfg := &Config{parseOpts: o}
	if err := decodeInto(tree, cfg); err != nil {
		return nil, fmt.Errorf("config: internal decode error: %w", err)
	}
	if len(l.other) > 0 {
		cfg.Other = map[string]any{}
		if err := decodeInto(l.other, &cfg.Other); err != nil {
			return nil, fmt.Errorf("config: internal decode error: %w", err)
		}
	}
	nilEmpty(reflect.ValueOf(cfg).Elem())
	cfg.Explicit = l.explicit
	sort.Strings(l.autos)
	cfg.AutoPaths = l.autos
	l.crossCheck(cfg)
	cfg.Warnings = l.warns
	sort.Strings(l.unresolved)
	cfg.Unresolved = l.unresolved
	if len(l.errs) > 0 {
		cfg.parseErrs = l.errs
		return cfg, l.errs
	}
	return cfg, nil
}

// overflows reports every number whose literal overflows a float64 (1e999:
// Python's json reads it as inf, which DeepSpeed would train with) where no
// other check has named its path, and sets it to 0 so the typed decode can
// run: JSON has no infinity.
func (l *loader) overflows(path string, v any) {
	at := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			if f, ok := x[k].(float64); ok && math.IsInf(f, 0) {
				l.overflowed(at(k), f)
				x[k] = 0.0
				continue
			}
			l.overflows(at(k), x[k])
		}
	case []any:
		for i, e := range x {
			p := fmt.Sprintf("%s[%d]", path, i)
			if f, ok := e.(float64); ok && math.IsInf(f, 0) {
				l.overflowed(p, f)
				x[i] = 0.0
				continue
			}
			l.overflows(p, e)
		}
	}
}

func (l *loader) overflowed(path string, f float64) {
	for _, e := range l.errs {
		if e.Path == path || strings.HasPrefix(e.Path, path+"[") {
			return
		}
	}
	l.errs = append(l.errs, &FieldError{Path: path, Value: render(f), Allowed: "a finite number",
		Msg: "the number overflows a float64; Python's json would read it as inf"})
}

// decodeInto copies a clean tree into v through encoding/json.
func decodeInto(tree any, v any) error {
	b, err := json.Marshal(tree)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// nilEmpty replaces empty maps and slices with nil throughout v, so that a
// document's "params": {} and an absent key give the same Config (and JSON's
// omitempty round-trips).
func nilEmpty(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			nilEmpty(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				nilEmpty(v.Field(i))
			}
		}
	case reflect.Map, reflect.Slice:
		if !v.IsNil() && v.Len() == 0 && v.CanSet() {
			v.Set(reflect.Zero(v.Type()))
		}
	}
}
