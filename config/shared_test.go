package config

import (
	"os"
	"path/filepath"
	"testing"
)

// sharedDir returns the folder named by env, else ../shared/<rel> relative to
// the repository root (the directory holding go.mod). It skips the test when
// the folder is absent.
func sharedDir(t testing.TB, env, rel string) string {
	t.Helper()
	if d := os.Getenv(env); d != "" {
		if _, err := os.Stat(d); err != nil {
			t.Skipf("%s=%s: %v", env, d, err)
		}
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Skipf("no working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("repository root (go.mod) not found")
		}
		dir = parent
	}
	d := filepath.Join(dir, "..", "shared", rel)
	if _, err := os.Stat(d); err != nil {
		t.Skipf("shared data not available (%s): set %s or provide ../shared", d, env)
	}
	return d
}
