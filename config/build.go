package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
)

// build turns a raw document into a Config.
func build(raw map[string]any, o options) (*Config, error) {
	l := newLoader(o)
	l.deprecated(raw)
	tree := l.walk("", raw, reflect.TypeOf(Config{}), "")
	l.optimizerParams(tree)
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
