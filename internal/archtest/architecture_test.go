package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	const statelog = "github.com/sharelog/sharelog/internal/storage/sharestate/statelog"
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
				if p, _ := strconv.Unquote(im.Path.Value); p == statelog && pkgDir != "internal/app" {
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
	assert.Empty(t, importers, "only internal/app opens the file share-state store")
	assert.Empty(t, asserts, "type assertions to store interfaces")
}

// The domain packages are transport-neutral: none depends (even
// indirectly) on the gRPC handlers, gRPC itself or the generated protobuf
// code, so another listener (the Kafka protocol) can call them as they
// are. The public error vocabulary is a leaf of the standard library only.
func TestDomainPackagesStayTransportFree(t *testing.T) {
	const mod = "github.com/sharelog/sharelog/"
	domain := []string{
		mod + "apierr",
		mod + "internal/broker",
		mod + "internal/storage/logstore",
		mod + "internal/sharegroup",
		mod + "internal/storage/sharestate/...",
		mod + "internal/changestream",
		mod + "internal/sessioncache",
	}
	forbidden := []string{mod + "internal/transport/grpcapi", "google.golang.org/grpc", mod + "gen/"}
	for _, pkg := range domain {
		out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkg)...).CombinedOutput()
		require.NoError(t, err, "go list %s: %s", pkg, out)
		deps := strings.Fields(string(out))
		require.NotEmpty(t, deps)
		for _, dep := range deps {
			for _, bad := range forbidden {
				assert.False(t, dep == strings.TrimSuffix(bad, "/") || strings.HasPrefix(dep, strings.TrimSuffix(bad, "/")+"/"),
					"%s depends on %s", pkg, dep)
			}
		}
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", mod+"apierr").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, []string{mod + "apierr"}, strings.Fields(string(out)), "apierr imports only the standard library")
}

// The repository is self-contained: no source or generated file cites the
// external specification's files or an absolute path outside the
// repository; comments cite docs/*.md or the protos instead.
func TestSourcesCiteOnlyRepositoryFiles(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	// Built from parts so that this file does not match itself.
	cites := regexp.MustCompile(strings.Join([]string{`sp` + `ec/`, `api\.` + `md`, `share-groups\.` + `md`, `change-stream\.` + `md`, `/wo` + `rk/`, "\u00a7"}, "|"))
	var hits []string
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".proto")) {
			return nil
		}
		files++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if cites.MatchString(line) {
				rel, _ := filepath.Rel(root, path)
				hits = append(hits, fmt.Sprintf("%s:%d: %s", rel, i+1, strings.TrimSpace(line)))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the walk found the sources")
	assert.Empty(t, hits, "cite docs/*.md or the protos, and state the rule in words")
}

// internal/testsupport (the shared stack, test CA and waits, with testify
// in its imports) is for tests only: no package's non-test code imports
// it, so it never reaches a binary.
func TestTestSupportOnlyInTests(t *testing.T) {
	const ts = "github.com/sharelog/sharelog/internal/testsupport"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "github.com/sharelog/sharelog/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var importers []string
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Greater(t, len(lines), 20, "go list found the packages")
	for _, line := range lines {
		f := strings.Fields(line)
		if slices.Contains(f[1:], ts) {
			importers = append(importers, f[0])
		}
	}
	assert.Empty(t, importers, "non-test code importing %s", ts)
}
