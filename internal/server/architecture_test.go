package server_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The storage implementations are chosen in one place: only this package's
// wiring opens the file share-state store (everything else sees a
// sharestate.Store), and no code finds a capability by asserting an
// interface on a store (a wrapper, such as the tracing one, would hide
// it): capabilities are handed over explicitly.
func TestStorageWiringArchitecture(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	const statelog = "github.com/sharelog/sharelog/internal/sharestate/statelog"
	var importers, asserts []string
	fset := token.NewFileSet()
	files := 0
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files++
			rel, _ := filepath.Rel(root, path)
			pkgDir := filepath.ToSlash(filepath.Dir(rel))
			for _, im := range f.Imports {
				if p, _ := strconv.Unquote(im.Path.Value); p == statelog && pkgDir != "internal/server" {
					importers = append(importers, rel)
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				ta, ok := n.(*ast.TypeAssertExpr)
				if !ok || ta.Type == nil {
					return true
				}
				if sel, ok := ta.Type.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && (x.Name == "logstore" || x.Name == "sharestate") {
						asserts = append(asserts, fset.Position(ta.Pos()).String())
					}
				}
				return true
			})
			return nil
		})
		require.NoError(t, err)
	}
	require.Greater(t, files, 50, "the walk found the sources")
	assert.Empty(t, importers, "only internal/server opens the file share-state store")
	assert.Empty(t, asserts, "type assertions to store interfaces")
}
