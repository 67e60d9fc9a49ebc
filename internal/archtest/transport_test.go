package archtest

import (
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

// The transports speak to the domain, never to storage: no non-test file
// under internal/transport imports a package of internal/storage (the log
// domain, internal/broker, re-exports the types and sentinels they need).
// The error translation tables are the last exceptions, until the store's
// sentinels map to reasons in the domain.
func TestTransportsImportNoStorage(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	const storage = "github.com/sharelog/sharelog/internal/storage/"
	exceptions := map[string]bool{
		"internal/transport/kafkawire/errors.go": true,
		"internal/transport/grpcapi/status.go":   true,
	}
	var hits []string
	files := 0
	fset := token.NewFileSet()
	err = filepath.WalkDir(filepath.Join(root, "internal", "transport"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); strings.HasPrefix(p, storage) && !exceptions[rel] {
				hits = append(hits, rel+" imports "+p)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 20, "the walk found the sources")
	assert.Empty(t, hits, "transports call internal/broker, not storage")
}
