package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --version prints the program's name and version on stdout and exits 0;
// the process does not start a server (no data directory is created).
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(os.Args[0], "--version", "--data-dir", dir)
	cmd.Env = append(os.Environ(), "SHARELOG_TEST_CHILD=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	out := strings.TrimSpace(stdout.String())
	assert.Equal(t, filepath.Base(os.Args[0])+" "+versionString(), out)
	assert.NotEmpty(t, versionString())
	assert.NoDirExists(t, dir)
}

func TestVersionString(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v9.8.7"
	assert.Equal(t, "v9.8.7", versionString(), "-ldflags -X main.version wins")
	version = ""
	assert.NotEqual(t, "", versionString(), "build information otherwise")
}

// SHARELOG_VERSION is not --version: the flag has no variable.
func TestVersionHasNoEnvironmentVariable(t *testing.T) {
	t.Parallel()
	_, _, err := parseFlags(nil, func(k string) string { return map[string]string{"SHARELOG_VERSION": "true"}[k] }, &bytes.Buffer{})
	require.NoError(t, err)
	_, _, err = parseFlags([]string{"--version"}, func(string) string { return "" }, &bytes.Buffer{})
	require.ErrorIs(t, err, errShowVersion)
}

// --help names the program as it was invoked and lists --version.
func TestHelpNamesProgram(t *testing.T) {
	t.Parallel()
	var help bytes.Buffer
	_, _, _ = parseFlags([]string{"--help"}, func(string) string { return "" }, &help)
	assert.Contains(t, help.String(), "Usage: "+progName+" [flags]")
	assert.Contains(t, help.String(), "-version")
}
