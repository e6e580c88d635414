package pipeline

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goldenDir returns the golden folder: $DEEPGO_GOLDEN when set, otherwise
// ../shared/golden next to the directory holding go.mod. It skips the test,
// saying why, when the folder is absent.
func goldenDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("DEEPGO_GOLDEN"); d != "" {
		if _, err := os.Stat(d); err != nil {
			t.Skipf("DEEPGO_GOLDEN=%s is not readable (%v); skipping golden comparison", d, err)
		}
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			g := filepath.Join(dir, "..", "shared", "golden")
			if _, err := os.Stat(g); err != nil {
				t.Skipf("golden folder %s not found (set DEEPGO_GOLDEN to point at it); skipping golden comparison", g)
			}
			return g
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skipf("no go.mod above %s, cannot locate the golden folder (set DEEPGO_GOLDEN); skipping", wd)
		}
		dir = parent
	}
}

// readGolden decodes every non-empty line of a JSON Lines golden file.
func readGolden[T any](t *testing.T, name string) []T {
	t.Helper()
	path := filepath.Join(goldenDir(t), name)
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

// logSummary logs how many records of each kind in a golden file matched,
// as a table.
func logSummary(t *testing.T, file string, kinds []string, matched, total map[string]int) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "golden summary for %s\n| %-40s | matched |\n", file, "kind")
	all, ok := 0, 0
	for _, k := range kinds {
		fmt.Fprintf(&b, "| %-40s | %3d/%-3d |\n", k, matched[k], total[k])
		all += total[k]
		ok += matched[k]
	}
	fmt.Fprintf(&b, "| %-40s | %3d/%-3d |", "all", ok, all)
	t.Log(b.String())
}
