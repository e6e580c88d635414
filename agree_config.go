package deepgo

import (
	"context"
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
	mine, err := agreedSettings(cfg)
	if err != nil {
		return fmt.Errorf("deepgo.Initialize: the config's settings: %w", err)
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

// agreedSettings is cfg's leaves (config.Settings), one "path=value" line
// each in path order, without what may differ between ranks: the
// nvme_paths, folders on each rank's own machine (the swap folders under
// them are per rank anyway).
func agreedSettings(cfg *config.Config) ([]byte, error) {
	ss, err := cfg.Settings()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, s := range ss {
		if strings.HasPrefix(s.Path, "zero_optimization.offload_") && strings.HasSuffix(s.Path, ".nvme_path") {
			continue
		}
		fmt.Fprintf(&b, "%s=%s\n", s.Path, s.Value)
	}
	return []byte(b.String()), nil
}

// configDiff lists the paths whose values differ between two
// agreedSettings, with b's value then a's (at most 5, in path order).
func configDiff(a, b []byte) []string {
	la, lb := settingsMap(a), settingsMap(b)
	paths := maps.Clone(la)
	maps.Copy(paths, lb)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(paths)) {
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

// settingsMap reads agreedSettings' lines back into path → value.
func settingsMap(b []byte) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}
