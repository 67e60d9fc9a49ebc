package archtest

import (
	"bytes"
	"encoding/json"
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

// The layers of docs/architecture.md. Data flows one way: transports ->
// domain -> storage. A package is in the first layer whose prefix it has.
var layers = []struct {
	name     string
	prefixes []string
}{
	{"storage", []string{"internal/storage/"}},
	{"transport", []string{"internal/transport/", "internal/edge"}},
	{"wiring", []string{"internal/app", "cmd/server"}},
	{"client", []string{"client/", "cmd/sharelogctl"}},
	{"domain", []string{"apierr", "internal/broker", "internal/sharegroup", "internal/consumergroup", "internal/changestream",
		"internal/sessioncache", "internal/authz", "internal/principal", "internal/budget", "internal/cluster", "internal/ownership", "internal/users",
		"internal/txn"}},
}

// goPackage is what `go list` says of one package (its non-test files).
type goPackage struct {
	ImportPath string
	Imports    []string // direct
	Deps       []string // transitive
}

func listPackages(t *testing.T) map[string]goPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", mod+"...").Output()
	require.NoError(t, err)
	pkgs := map[string]goPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p goPackage
		require.NoError(t, dec.Decode(&p))
		pkgs[strings.TrimPrefix(p.ImportPath, mod)] = p
	}
	require.Greater(t, len(pkgs), 30, "go list found the packages")
	return pkgs
}

const mod = "github.com/sharelog/sharelog/"

func layerOf(rel string) string {
	for _, l := range layers {
		for _, p := range l.prefixes {
			if rel == strings.TrimSuffix(p, "/") || strings.HasPrefix(rel, strings.TrimSuffix(p, "/")+"/") {
				return l.name
			}
		}
	}
	return ""
}

func under(dep, prefix string) bool {
	return dep == prefix || strings.HasPrefix(dep, prefix+"/")
}

// The arrows that may not exist (docs/architecture.md):
//   - no transport imports a storage package: transports call the domain,
//     which alone decides how the log and the share state are used;
//   - nothing in the domain or in storage depends, even indirectly, on the
//     generated protobuf code, gRPC, a transport or the wiring, so that every
//     listener (gRPC, REST, Kafka, DCP) calls the domain as it is;
//   - storage depends on no domain package (it is the bottom layer);
//   - the CLI and the client libraries depend on no internal/ package: they
//     speak only the public API (gen/, apierr, client/);
//   - the public error vocabulary and the key partitioner (shared by the
//     domain and the clients) are leaves of the standard library.
func TestLayers(t *testing.T) {
	pkgs := listPackages(t)
	checked := map[string]int{}
	for rel, p := range pkgs {
		layer := layerOf(rel)
		checked[layer]++
		switch layer {
		case "transport":
			for _, im := range p.Imports {
				assert.False(t, under(im, mod+"internal/storage"), "transport %s imports the storage package %s", rel, im)
			}
		case "domain", "storage":
			for _, dep := range p.Deps {
				for _, bad := range []string{mod + "gen", "google.golang.org/grpc", "google.golang.org/protobuf",
					mod + "internal/transport", mod + "internal/app"} {
					assert.False(t, under(dep, bad), "%s %s depends on %s", layer, rel, dep)
				}
				if layer == "storage" && strings.HasPrefix(dep, mod) {
					assert.NotEqual(t, "domain", layerOf(strings.TrimPrefix(dep, mod)), "storage %s depends on the domain package %s", rel, dep)
				}
			}
		case "client":
			for _, dep := range p.Deps {
				assert.False(t, under(dep, mod+"internal"), "%s depends on %s: clients use the public API only", rel, dep)
			}
		}
	}
	for _, l := range []string{"storage", "transport", "wiring", "client", "domain"} {
		assert.NotZero(t, checked[l], "no package found in layer %s", l)
	}
	// The leaves the domain shares with the clients.
	for _, leaf := range []string{"apierr", "client/partitioner"} {
		var nonStd []string
		for _, dep := range pkgs[leaf].Deps {
			if strings.Contains(strings.Split(dep, "/")[0], ".") {
				nonStd = append(nonStd, dep)
			}
		}
		assert.Empty(t, nonStd, "%s imports only the standard library", leaf)
	}
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

// docs/architecture.md names every package of the module (but the test
// helpers' and the commands'), so that a new package comes with its line
// in the map.
func TestArchitectureDocNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	require.NoError(t, err)
	var missing []string
	for rel := range listPackages(t) {
		switch {
		case strings.HasPrefix(rel, "gen/"), strings.HasPrefix(rel, "cmd/"), strings.HasPrefix(rel, "examples/"),
			strings.HasSuffix(rel, "test"):
			continue
		}
		name := rel
		if i := strings.LastIndex(rel, "/"); strings.HasPrefix(rel, "internal/storage/") && i > len("internal/storage") {
			// storage subpackages may be named by their last element
			// (`jslog`, `statelog`) within their parent's row.
			if strings.Contains(string(doc), "`"+rel[i+1:]+"`") {
				continue
			}
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			missing = append(missing, rel)
		}
	}
	assert.Empty(t, missing, "packages docs/architecture.md does not name")
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
