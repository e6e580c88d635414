package config

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// JSON serialises the resolved config (defaults included, deprecated keys in
// their new form, recognised extra sections from Other) as indented JSON.
// Loading the result with Parse gives back the same values.
func (c *Config) JSON() ([]byte, error) {
	tree, err := c.tree()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tree); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tree returns the config as a generic JSON tree.
func (c *Config) tree() (map[string]any, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var tree map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&tree); err != nil {
		return nil, err
	}
	prune(tree, reflect.TypeOf(Config{}), "")
	for k, v := range c.Other {
		tree[k] = v
	}
	return tree, nil
}

// prune removes keys that are not valid in their section kind (e.g. the
// offload_param-only keys inside offload_optimizer).
func prune(m map[string]any, t reflect.Type, kind string) {
	s := sectionOf(t)
	for k, v := range m {
		f := s.byName[k]
		if f == nil {
			continue
		}
		if f.only != "" && f.only != kind {
			delete(m, k)
			continue
		}
		if sub, ok := v.(map[string]any); ok && isSection(f.typ) {
			prune(sub, base(f.typ), f.kind)
		}
	}
}
