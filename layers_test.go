package deepgo_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const modulePath = "github.com/deepgo-ml/deepgo"

// layerTable reads the level of every package from the layer table in
// docs/design.md ("| level | packages | ..." rows with `pkg` names).
func layerTable(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open("docs/design.md")
	require.NoError(t, err)
	defer f.Close()
	row := regexp.MustCompile(`^\| (\d+) \| ([^|]+)\|`)
	name := regexp.MustCompile("`([^`]+)`")
	levels := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		lvl, _ := strconv.Atoi(m[1])
		for _, n := range name.FindAllStringSubmatch(m[2], -1) {
			p := strings.TrimSuffix(n[1], " (root)")
			switch {
			case p == "deepgo":
				p = modulePath
			case strings.HasSuffix(p, "/..."):
				p = modulePath + "/" + p // a prefix rule, matched below
			default:
				p = modulePath + "/" + p
			}
			levels[p] = lvl
		}
	}
	require.NotEmpty(t, levels, "docs/design.md: no layer table rows found")
	return levels
}

func levelOf(levels map[string]int, pkg string) (int, bool) {
	if l, ok := levels[pkg]; ok {
		return l, true
	}
	for p, l := range levels {
		if prefix, ok := strings.CutSuffix(p, "/..."); ok && strings.HasPrefix(pkg, prefix+"/") {
			return l, true
		}
	}
	return 0, false
}

type listedPackage struct {
	ImportPath string
	Imports    []string
}

// goList runs go list -json over every package, build tags included.
func goList(t *testing.T, args ...string) []listedPackage {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command("go", append([]string{"list", "-json", "-tags", "mpi,cuda,gloo"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "go list: %s", errb.String())
	var pkgs []listedPackage
	dec := json.NewDecoder(&out)
	for {
		var p listedPackage
		err := dec.Decode(&p)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// Imports point only down the layer table of docs/design.md, and every
// package is in it.
func TestLayers(t *testing.T) {
	levels := layerTable(t)
	for _, p := range goList(t, "./...") {
		lvl, ok := levelOf(levels, p.ImportPath)
		if !assert.True(t, ok, "%s is not in the layer table of docs/design.md", p.ImportPath) {
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, modulePath) {
				continue
			}
			il, ok := levelOf(levels, imp)
			if !ok {
				continue // reported as a package of its own
			}
			assert.Less(t, il, lvl, "%s (level %d) imports %s (level %d): imports must point to lower levels", p.ImportPath, lvl, imp, il)
		}
	}
}

// nn is a model library: it must not pull in any engine.
func TestNNDependsOnNoEngine(t *testing.T) {
	pkgs := goList(t, "-deps", "./nn")
	banned := map[string]bool{modulePath: true, modulePath + "/zero": true, modulePath + "/checkpoint": true, modulePath + "/comm/local": true}
	for _, p := range pkgs {
		assert.False(t, banned[p.ImportPath], "go list -deps ./nn contains %s", p.ImportPath)
	}
}
