// Package shareddata finds the project's shared test data (../shared beside
// the repository: real DeepSpeed configs and golden outputs of DeepSpeed
// itself) for tests, and reads its JSON Lines files.
//
// Two environment variables point the tests elsewhere:
//
//	DEEPGO_GOLDEN   the folder of golden JSON Lines files
//	                (default ../shared/golden)
//	DEEPGO_CONFIGS  folders of DeepSpeed configs, separated by ':'
//	                (os.PathListSeparator); default ../shared/configs and
//	                ../shared/seed/configs. FuzzParse seeds from them too.
//
// Unset, a variable's default data may be absent: the test skips and says
// why, so the README's test command never needs ../shared. Set, it is a
// promise that the data is there: a folder or file it should hold that is
// missing fails the test instead of skipping it, so a mistyped path cannot
// turn golden checks into silent skips.
package shareddata

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The environment variables this package reads.
const (
	GoldenEnv  = "DEEPGO_GOLDEN"
	ConfigsEnv = "DEEPGO_CONFIGS"
)

// errAbsent marks default data that is not there: a skip, not a failure.
var errAbsent = errors.New("shared data not available")

// sharedRoot is ../shared next to the repository root (the directory
// holding go.mod).
func sharedRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("%w: no working directory: %v", errAbsent, err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: repository root (go.mod) not found", errAbsent)
		}
		dir = parent
	}
}

// lookupDirs returns the folders env lists, each of which must exist, or
// when env is unset those of the defaults (relative to ../shared) that
// exist; an error wrapping errAbsent when env is unset and none does.
func lookupDirs(env string, defaults ...string) ([]string, error) {
	if v := os.Getenv(env); v != "" {
		var dirs []string
		for _, d := range filepath.SplitList(v) {
			if d == "" {
				continue
			}
			if st, err := os.Stat(d); err != nil || !st.IsDir() {
				return nil, fmt.Errorf("%s=%s: %s is not a readable folder (%v)", env, v, d, err)
			}
			dirs = append(dirs, d)
		}
		if len(dirs) == 0 {
			return nil, fmt.Errorf("%s=%q names no folder", env, v)
		}
		return dirs, nil
	}
	root, err := sharedRoot()
	if err != nil {
		return nil, err
	}
	var dirs, missing []string
	for _, rel := range defaults {
		d := filepath.Join(root, rel)
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dirs = append(dirs, d)
		} else {
			missing = append(missing, d)
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%w (%s): set %s or provide ../shared", errAbsent, strings.Join(missing, ", "), env)
	}
	return dirs, nil
}

// need turns err into a skip (default data absent) or a failure.
func need(t testing.TB, err error) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, errAbsent):
		t.Skip(err)
	default:
		t.Fatal(err)
	}
}

// Dir returns the folder named by the environment variable env when set
// (the test fails if it is missing), else ../shared/<rel> (the test skips
// if it is missing).
func Dir(t testing.TB, env, rel string) string {
	t.Helper()
	dirs, err := lookupDirs(env, rel)
	need(t, err)
	return dirs[0]
}

// Golden is Dir for the golden outputs: $DEEPGO_GOLDEN, else ../shared/golden.
func Golden(t testing.TB) string { return Dir(t, GoldenEnv, "golden") }

// GoldenFile returns the path of golden file name. When it is missing the
// test fails if DEEPGO_GOLDEN is set and skips otherwise.
func GoldenFile(t testing.TB, name string) string {
	t.Helper()
	p, err := findFile(GoldenEnv, name, "golden")
	need(t, err)
	return p
}

// LookupConfigDirs returns the folders of DeepSpeed configs: those
// $DEEPGO_CONFIGS lists (an error if one is missing), else those of
// ../shared/configs and ../shared/seed/configs that exist (none: nil, nil).
// It is for code without a test to skip, such as fuzz seeding.
func LookupConfigDirs() ([]string, error) {
	dirs, err := lookupDirs(ConfigsEnv, configDefaults...)
	if errors.Is(err, errAbsent) {
		return nil, nil
	}
	return dirs, err
}

var configDefaults = []string{"configs", filepath.Join("seed", "configs")}

// ConfigDirs is LookupConfigDirs for a test: it skips when the default
// folders are absent and fails when $DEEPGO_CONFIGS names a missing one.
func ConfigDirs(t testing.TB) []string {
	t.Helper()
	dirs, err := lookupDirs(ConfigsEnv, configDefaults...)
	need(t, err)
	return dirs
}

// ConfigFile returns the path of config name in the first config folder
// that holds it. When none does the test fails if DEEPGO_CONFIGS is set
// and skips otherwise.
func ConfigFile(t testing.TB, name string) string {
	t.Helper()
	p, err := findFile(ConfigsEnv, name, configDefaults...)
	need(t, err)
	return p
}

// findFile returns name in the first of env's folders holding it; when
// none does, the error wraps errAbsent only if env is unset.
func findFile(env, name string, defaults ...string) (string, error) {
	dirs, err := lookupDirs(env, defaults...)
	if err != nil {
		return "", err
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); fileExists(p) {
			return p, nil
		}
	}
	if v := os.Getenv(env); v != "" {
		return "", fmt.Errorf("%s=%s is set but no folder of it holds %s", env, v, name)
	}
	return "", fmt.Errorf("%w: no %s in %s", errAbsent, name, strings.Join(dirs, ", "))
}

func fileExists(p string) bool { st, err := os.Stat(p); return err == nil && !st.IsDir() }

// ReadGolden decodes every non-empty line of the golden JSON Lines file name
// into a T (Python's float repr round-trips exactly through Go's parser). A
// missing file skips or fails the test as GoldenFile does; an empty or
// malformed one fails it.
func ReadGolden[T any](t testing.TB, name string) []T {
	t.Helper()
	path := GoldenFile(t, name)
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("golden file %s: %v", path, err)
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

// Checked logs how many records of golden file name the test compared
// with its results, in the one format CI collects (.ci/run greps
// "records checked"); checking none fails the test.
func Checked(t testing.TB, name string, checked, total int) {
	t.Helper()
	if checked == 0 {
		t.Errorf("golden %s: no records checked", name)
		return
	}
	t.Logf("golden %s: %d of %d records checked", name, checked, total)
}
