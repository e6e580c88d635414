package deepgo

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
)

// agreeConfig checks that every rank of each group resolved the same
// config. In-process ranks each hand Initialize a *config.Config of their
// own, and a rank with another micro-batch size trained on without an
// error, one with another ZeRO stage failed at its first reduction with
// a collective mismatch that said nothing of configs. deepgo launch's
// processes already agree on theirs; this covers every trainer. A
// collective over each group (a few KB each).
func agreeConfig(ctx context.Context, cfg *config.Config, groups ...comm.Comm) error {
	mine, err := agreedJSON(cfg)
	if err != nil {
		return fmt.Errorf("deepgo.Initialize: the config's JSON: %w", err)
	}
	for _, g := range groups {
		if g == nil || g.Size() == 1 {
			continue
		}
		all, err := comm.AllGatherBytes(ctx, g, mine)
		if err != nil {
			return fmt.Errorf("deepgo.Initialize: agreeing on the config over group %s: %w", g.Name(), err)
		}
		for r, b := range all {
			if string(b) != string(all[0]) {
				return fmt.Errorf("deepgo.Initialize: the ranks of group %s were given different configs: rank %d and rank 0 differ in %s; every rank must train with the same config",
					g.Name(), r, strings.Join(configDiff(all[0], b), ", "))
			}
		}
	}
	return nil
}

// agreedJSON is cfg's JSON without what may differ between ranks: the
// nvme_paths, folders on each rank's own machine (the swap folders under
// them are per rank anyway).
func agreedJSON(cfg *config.Config) ([]byte, error) {
	b, err := cfg.JSON()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if z, ok := m["zero_optimization"].(map[string]any); ok {
		for _, k := range []string{"offload_optimizer", "offload_param"} {
			if o, ok := z[k].(map[string]any); ok {
				delete(o, "nvme_path")
			}
		}
	}
	return json.Marshal(m)
}

// configDiff lists the leaf paths whose values differ between two config
// JSON documents, with both values (at most 5, sorted).
func configDiff(a, b []byte) []string {
	var ma, mb map[string]any
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return []string{"their JSON"}
	}
	la, lb := map[string]string{}, map[string]string{}
	flattenJSON("", ma, la)
	flattenJSON("", mb, lb)
	keys := map[string]bool{}
	for k := range la {
		keys[k] = true
	}
	for k := range lb {
		keys[k] = true
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		va, oka := la[k]
		vb, okb := lb[k]
		if va == vb && oka == okb {
			continue
		}
		if !oka {
			va = "absent"
		}
		if !okb {
			vb = "absent"
		}
		out = append(out, fmt.Sprintf("%s (%s vs %s)", k, vb, va))
	}
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("%d more", len(out)-5))
	}
	return out
}

// flattenJSON records every leaf of v under its dotted path.
func flattenJSON(path string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok {
		for k, x := range m {
			p := k
			if path != "" {
				p = path + "." + k
			}
			flattenJSON(p, x, out)
		}
		return
	}
	b, _ := json.Marshal(v)
	out[path] = string(b)
}
