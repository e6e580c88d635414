// Package shareddata finds the project's shared test data (../shared beside
// the repository: real DeepSpeed configs and golden outputs of DeepSpeed
// itself) for tests, and reads its JSON Lines files. Tests skip, saying why,
// when the data is absent, so the README's test command never needs it.
package shareddata

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the folder named by the environment variable env when set,
// else ../shared/<rel> next to the repository root (the directory holding
// go.mod). It skips the test when the folder is absent.
func Dir(t testing.TB, env, rel string) string {
	t.Helper()
	if d := os.Getenv(env); d != "" {
		if _, err := os.Stat(d); err != nil {
			t.Skipf("%s=%s is not readable (%v); skipping", env, d, err)
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

// Golden is Dir for the golden outputs: $DEEPGO_GOLDEN, else ../shared/golden.
func Golden(t testing.TB) string { return Dir(t, "DEEPGO_GOLDEN", "golden") }

// ReadGolden decodes every non-empty line of the golden JSON Lines file name
// into a T (Python's float repr round-trips exactly through Go's parser). A
// missing file skips the test; an empty or malformed one fails it.
func ReadGolden[T any](t testing.TB, name string) []T {
	t.Helper()
	path := filepath.Join(Golden(t), name)
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("golden file %s: %v", path, err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec T
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%s:%d: %v", path, line, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no records", path)
	}
	return out
}
