package fsutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteFileAtomic(t *testing.T) {
	for _, sync := range []Sync{NoSync, SyncFile, SyncFileAndDir} {
		dir := t.TempDir()
		path := filepath.Join(dir, "meta")
		require.NoError(t, WriteFileAtomic(path, []byte("one"), sync))
		require.NoError(t, WriteFileAtomic(path, []byte("two"), sync))
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, "two", string(got), "the new content replaces the old")
		_, err = os.Stat(path + TmpSuffix)
		assert.True(t, os.IsNotExist(err), "no temp file is left behind")
	}
}

func TestWriteFileAtomicFailureKeepsOldContent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "meta")
	require.NoError(t, WriteFileAtomic(path, []byte("old"), SyncFileAndDir))
	// A directory in the temp file's place makes the write fail.
	require.NoError(t, os.Mkdir(path+TmpSuffix, 0o755))
	require.Error(t, WriteFileAtomic(path, []byte("new"), SyncFileAndDir))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "old", string(got))
}

func TestFdatasyncAndSyncDir(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "f"))
	require.NoError(t, err)
	_, err = f.WriteString("x")
	require.NoError(t, err)
	require.NoError(t, Fdatasync(f))
	require.NoError(t, f.Close())
	require.Error(t, Fdatasync(f), "a closed file cannot be synced")
	require.NoError(t, SyncDir(dir))
	require.Error(t, SyncDir(filepath.Join(dir, "missing")))
}
