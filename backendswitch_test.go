package deepgo_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// concreteBackends are the Backend implementations, as "package.Type".
var concreteBackends = map[string]bool{"backend.CPU": true, "cuda.Backend": true, "sim.Backend": true}

// backendPackages may name their own types: they are the implementations.
var backendPackages = []string{"backend", "cuda", "sim"}

// concreteBackend reports whether e names a concrete backend type
// (backend.CPU, *cuda.Backend, ...).
func concreteBackend(e ast.Expr) (string, bool) {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return "", false
	}
	name := pkg.Name + "." + sel.Sel.Name
	return name, concreteBackends[name]
}

// concreteBackendChecks lists every type switch case and type assertion on
// a concrete backend type in the Go files of src (tests included).
func concreteBackendChecks(t *testing.T, fset *token.FileSet, src *ast.File) []string {
	t.Helper()
	var found []string
	report := func(n ast.Node, name string) {
		found = append(found, fset.Position(n.Pos()).String()+": "+name)
	}
	ast.Inspect(src, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.TypeAssertExpr:
			if x.Type != nil {
				if name, ok := concreteBackend(x.Type); ok {
					report(x, name)
				}
			}
		case *ast.TypeSwitchStmt:
			for _, c := range x.Body.List {
				for _, e := range c.(*ast.CaseClause).List {
					if name, ok := concreteBackend(e); ok {
						report(e, name)
					}
				}
			}
		}
		return true
	})
	return found
}

// Code above the backends works through the backend.Backend interface (and
// the optional interfaces it documents), never by asking which concrete
// backend it holds: that is what lets the engine run unchanged on the CPU,
// the simulated device and CUDA.
func TestNoSwitchOnConcreteBackend(t *testing.T) {
	fset := token.NewFileSet()
	var found []string
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			for _, p := range backendPackages {
				if path == p {
					return filepath.SkipDir
				}
			}
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "build") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		found = append(found, concreteBackendChecks(t, fset, f)...)
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "walked too few Go files: is the test running at the module root?")
	assert.Empty(t, found, "type switches or assertions on a concrete backend outside %v: use backend.Backend and its optional interfaces", backendPackages)
}

// The check itself finds what it is meant to find.
func TestConcreteBackendCheckFinds(t *testing.T) {
	const src = `package p
func f(b backend.Backend) {
	_ = b.(*backend.CPU)
	_, _ = b.(*cuda.Backend)
	switch b.(type) {
	case *sim.Backend, interface{ Ctx() int }:
	}
	_ = b.(interface{ Name() string })
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	require.NoError(t, err)
	found := concreteBackendChecks(t, fset, f)
	require.Len(t, found, 3, "%v", found)
	for i, want := range []string{"backend.CPU", "cuda.Backend", "sim.Backend"} {
		assert.Contains(t, found[i], want)
	}
}
