package config

import (
	"encoding/json"
	"sort"
	"strings"
	"sync"
)

// Setting is one leaf value of a resolved config, for display.
type Setting struct {
	// Path is the dotted JSON path.
	Path string
	// Value is the value as JSON text.
	Value string
	// Default is true when the document did not set the key (deepgo filled DeepSpeed's default).
	Default bool
	// Auto is true when the document held "auto" here.
	Auto bool
}

// Settings lists every leaf of the resolved config in path order, marking
// which values are defaults and which came from "auto".
func (c *Config) Settings() ([]Setting, error) {
	tree, err := c.tree()
	if err != nil {
		return nil, err
	}
	auto := map[string]bool{}
	for _, p := range c.AutoPaths {
		auto[p] = true
	}
	var out []Setting
	var rec func(prefix string, v any, inOther bool)
	rec = func(prefix string, v any, inOther bool) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, e := range m {
				rec(join(prefix, k), e, inOther)
			}
			return
		}
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte("?")
		}
		def := !auto[prefix] && !inOther && !c.Explicit[knownAncestor(prefix)]
		out = append(out, Setting{Path: prefix, Value: string(b), Default: def, Auto: auto[prefix]})
	}
	for k, v := range tree {
		_, other := c.Other[k]
		rec(k, v, other)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// knownAncestor returns path itself if it is a schema key, else its nearest
// ancestor that is (for leaves inside verbatim maps such as optimizer.params).
func knownAncestor(path string) string {
	known := knownPaths()
	for p := path; ; {
		if known[p] {
			return p
		}
		i := strings.LastIndex(p, ".")
		if i < 0 {
			return path
		}
		p = p[:i]
	}
}

var knownPaths = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for _, k := range allKeys() {
		m[k.path] = true
	}
	return m
})
