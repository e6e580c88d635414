package shareddata

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLookup pins when missing data skips (the error wraps errAbsent) and
// when it fails: a variable that is set promises its folders and files.
func TestLookup(t *testing.T) {
	repo := t.TempDir() // a repository whose ../shared holds only configs/
	require.NoError(t, os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module x\n"), 0o644))
	shared := filepath.Join(filepath.Dir(repo), "shared")
	t.Cleanup(func() { os.RemoveAll(shared) })
	configs := filepath.Join(shared, "configs")
	require.NoError(t, os.MkdirAll(configs, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(configs, "a.json"), []byte("{}"), 0o644))
	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "b.json"), []byte("{}"), 0o644))
	missing := filepath.Join(other, "nope")
	const (
		ok   = "ok"
		skip = "skip"
		fail = "fail"
	)
	cases := []struct {
		name, golden, configs string
		call                  func() (string, error)
		want                  string // ok, skip or fail
		found                 string // for ok: a suffix of the result
	}{
		{"golden default absent", "", "", func() (string, error) { return findFile(GoldenEnv, "x.jsonl", "golden") }, skip, ""},
		{"golden set missing folder", missing, "", func() (string, error) { return findFile(GoldenEnv, "x.jsonl", "golden") }, fail, ""},
		{"golden set missing file", other, "", func() (string, error) { return findFile(GoldenEnv, "x.jsonl", "golden") }, fail, ""},
		{"golden set file present", other, "", func() (string, error) { return findFile(GoldenEnv, "b.json", "golden") }, ok, "b.json"},
		{"configs default", "", "", func() (string, error) { return findFile(ConfigsEnv, "a.json", configDefaults...) }, ok, "a.json"},
		{"configs default file absent", "", "", func() (string, error) { return findFile(ConfigsEnv, "z.json", configDefaults...) }, skip, ""},
		{"configs list", "", other + string(os.PathListSeparator) + configs, func() (string, error) {
			return findFile(ConfigsEnv, "a.json", configDefaults...)
		}, ok, filepath.Join("configs", "a.json")},
		{"configs list with a missing folder", "", configs + string(os.PathListSeparator) + missing, func() (string, error) {
			return findFile(ConfigsEnv, "a.json", configDefaults...)
		}, fail, ""},
		{"configs set file absent", "", other, func() (string, error) { return findFile(ConfigsEnv, "a.json", configDefaults...) }, fail, ""},
		{"fuzz seeds: set missing", "", missing, func() (string, error) {
			d, err := LookupConfigDirs()
			return strings.Join(d, ","), err
		}, fail, ""},
		{"fuzz seeds: default", "", "", func() (string, error) {
			d, err := LookupConfigDirs()
			return strings.Join(d, ","), err
		}, ok, "configs"},
	}
	t.Chdir(repo)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(GoldenEnv, c.golden)
			t.Setenv(ConfigsEnv, c.configs)
			got, err := c.call()
			kind := ok
			if err != nil {
				kind = fail
				if errors.Is(err, errAbsent) {
					kind = skip
				}
			}
			require.Equal(t, c.want, kind, "got %q, %v", got, err)
			if kind == ok {
				require.True(t, strings.HasSuffix(got, c.found), "got %q, want a suffix %q", got, c.found)
			}

		})
	}
}
