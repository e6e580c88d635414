package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
)

// TestRoundTripCollections round-trips every real config that loads cleanly.
func TestRoundTripCollections(t *testing.T) {
	n := 0
	for _, d := range shareddata.ConfigDirs(t) {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(d, e.Name()))
			if err != nil {
				continue
			}
			cfg, err := Parse(b)
			if err != nil {
				continue
			}
			t.Run(e.Name(), func(t *testing.T) { checkRoundTrip(t, cfg) })
			n++
		}
	}
	t.Logf("%d configs round-tripped", n)
}
