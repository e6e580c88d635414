package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/require"
)

// FuzzParse feeds arbitrary text to Parse. It must never panic or hang, and
// every document that loads cleanly must survive a JSON round trip.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `{"train_batch_size": 8}`, "a: 1\nb: x,\n", `{"zero_optimization": true}`} {
		f.Add([]byte(s))
	}
	dirs, err := shareddata.LookupConfigDirs()
	if err != nil {
		f.Fatal(err)
	}
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(d, e.Name())); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse(b, WithWorld(8))
		if err != nil || cfg == nil {
			return
		}
		checkRoundTrip(t, cfg)
	})
}

// checkRoundTrip asserts that cfg.JSON() loads back to the same values.
func checkRoundTrip(t *testing.T, cfg *Config) {
	t.Helper()
	out, err := cfg.JSON()
	require.NoError(t, err, "JSON")
	back, err := Parse(out)
	require.NoError(t, err, "reload:\n%s", out)
	require.NoError(t, cfg.Validate(), "Validate")
	require.Equal(t, comparable(cfg), comparable(back), "round trip changed values:\n%s", out)
}

// comparable drops the bookkeeping fields that describe the document rather than the values.
func comparable(c *Config) Config {
	x := *c
	x.Warnings, x.Explicit, x.AutoPaths, x.Unresolved = nil, nil, nil, nil
	x.parseErrs, x.parseOpts = nil, options{}
	return x
}
