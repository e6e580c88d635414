package config

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// manifestRow is one line of MANIFEST.tsv.
type manifestRow struct {
	file, features, jsonValid, hjson string
}

func readManifest(t *testing.T, dir string) (map[string]manifestRow, bool) {
	f, err := os.Open(filepath.Join(dir, "MANIFEST.tsv"))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	rows := map[string]manifestRow{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var col map[string]int
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "\t")
		if col == nil {
			col = map[string]int{}
			for i, c := range cells {
				col[c] = i
			}
			for _, need := range []string{"file", "notable_features", "json_valid", "hjson_load_as_deepspeed"} {
				require.Contains(t, col, need, "MANIFEST.tsv lacks column %q", need)
			}
			continue
		}
		get := func(k string) string {
			if i := col[k]; i < len(cells) {
				return cells[i]
			}
			return ""
		}
		rows[get("file")] = manifestRow{get("file"), get("notable_features"), get("json_valid"), get("hjson_load_as_deepspeed")}
	}
	return rows, true
}

var (
	dupExpect         = regexp.MustCompile(`Duplicate keys in DeepSpeed config: \['([^']*)'\]`)
	placeholderExpect = regexp.MustCompile(`(?:^|[,:])([a-z0-9_.]+)='([^']*)'`)
)

// TestConfigCollections loads every file of the config folders
// ($DEEPGO_CONFIGS, else ../shared/configs and ../shared/seed/configs),
// checks each against its manifest row, and prints a table.
func TestConfigCollections(t *testing.T) {
	for _, dir := range shareddata.ConfigDirs(t) {
		checkCollection(t, dir)
	}
}

func checkCollection(t *testing.T, dir string) {
	manifest, haveManifest := readManifest(t, dir)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		if e.IsDir() || e.Name() == "MANIFEST.tsv" || strings.HasSuffix(e.Name(), ".md") {
			continue
		}
		files = append(files, e.Name())
	}
	sort.Strings(files)
	if haveManifest {
		assert.Len(t, manifest, len(files), "%s: %d files but %d manifest rows", dir, len(files), len(manifest))
	}
	counts := map[string]int{}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-6s %-9s %-5s %-5s %s\n", "load", "validate", "warn", "auto", "file")
	for _, name := range files {
		row, ok := manifest[name]
		if haveManifest && !assert.True(t, ok, "%s: not in MANIFEST.tsv", name) {
			continue
		}
		if !haveManifest {
			row = manifestRow{file: name, hjson: "ok"}
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		cfg, err := Parse(b)
		load, validate := "ok", "ok"
		var es Errors
		switch {
		case err == nil:
		case errors.As(err, &es):
			validate = fmt.Sprintf("%d err", len(es))
		default:
			load, validate = "FAIL", "-"
		}
		counts["load "+load]++
		counts["validate "+validate]++
		// Expectations from the manifest's hjson column.
		if row.hjson == "ok" {
			assert.Equal(t, "ok", load, "%s: DeepSpeed loads it but deepgo: %v", name, err)
		} else {
			var dk *DuplicateKeyError
			var se *SyntaxError
			if m := dupExpect.FindStringSubmatch(row.hjson); m != nil {
				if assert.ErrorAs(t, err, &dk, "%s: want duplicate key %q error", name, m[1]) {
					assert.Equal(t, m[1], dk.Key, "%s: duplicate key", name)
				}
			} else {
				assert.True(t, errors.As(err, &se) || errors.As(err, &dk), "%s: DeepSpeed rejects it (%s) but deepgo: %v", name, row.hjson, err)
			}
		}
		// Quoteless placeholders the manifest shows as key='TEXT' (not "auto")
		// must be reported as type errors at that path.
		for _, m := range placeholderExpect.FindAllStringSubmatch(row.features, -1) {
			key, val := m[1], m[2]
			if val == "auto" || load != "ok" {
				continue
			}
			if strings.HasSuffix(key, "communication_data_type") {
				continue // a real string value
			}
			path := key
			assert.NotNil(t, findErr(es, path), "%s: placeholder %s=%q: want a FieldError at %s, got %v", name, key, val, path, err)
		}
		for _, fe := range es {
			assert.True(t, fe.Path != "" || fe.Allowed != "", "%s: error without path or allowed: %v", name, fe)
		}
		nw, na := 0, 0
		if cfg != nil {
			nw, na = len(cfg.Warnings), len(cfg.AutoPaths)
		}
		fmt.Fprintf(&table, "%-6s %-9s %-5d %-5d %s\n", load, validate, nw, na, name)
		if testing.Verbose() && err != nil {
			fmt.Fprintf(&table, "       %v\n", strings.ReplaceAll(err.Error(), "\n", "\n       "))
		}
	}
	var cs []string
	for k, v := range counts {
		cs = append(cs, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(cs)
	t.Logf("%s: %d files%s\nsummary: %s", dir, len(files), table.String(), strings.Join(cs, " "))
}

func findErr(es Errors, path string) *FieldError {
	for _, e := range es {
		if e.Path == path {
			return e
		}
	}
	return nil
}
