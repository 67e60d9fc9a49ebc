package scramcreds_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/scramcreds"
	"github.com/sharelog/sharelog/internal/storage/scramcreds/scramcredstest"
)

func TestFileStoreConformance(t *testing.T) {
	scramcredstest.Run(t, func(t *testing.T) (scramcreds.Store, func() scramcreds.Store) {
		dir := t.TempDir()
		s, err := scramcreds.OpenFile(dir)
		require.NoError(t, err)
		return s, func() scramcreds.Store {
			r, err := scramcreds.OpenFile(dir)
			require.NoError(t, err)
			return r
		}
	})
}

func TestMemStoreConformance(t *testing.T) {
	scramcredstest.Run(t, func(t *testing.T) (scramcreds.Store, func() scramcreds.Store) {
		s := scramcreds.NewMemStore()
		return s, func() scramcreds.Store { return s }
	})
}

// The file is readable by the server's user only, and a damaged file stops
// the open instead of starting without users.
func TestFileStoreModeAndDamage(t *testing.T) {
	dir := t.TempDir()
	s, err := scramcreds.OpenFile(dir)
	require.NoError(t, err)
	require.NoError(t, s.Put(context.Background(), scramcredstest.Cred("alice", scramcreds.SHA256, 1)))
	fi, err := os.Stat(filepath.Join(dir, scramcreds.FileName))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	for name, content := range map[string]string{
		"not json":      "{",
		"wrong format":  `{"format":2,"credentials":[]}`,
		"unknown field": `{"format":1,"credentials":[],"x":1}`,
		"short key":     `{"format":1,"credentials":[{"user":"a","mechanism":"SCRAM-SHA-256","salt":"AQ==","iterations":4096,"storedKey":"AQ==","serverKey":"AQ=="}]}`,
		"unknown mech":  `{"format":1,"credentials":[{"user":"a","mechanism":"SCRAM-SHA-1","salt":"AQ==","iterations":4096,"storedKey":"AQ==","serverKey":"AQ=="}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(d, scramcreds.FileName), []byte(content), 0o600))
			_, err := scramcreds.OpenFile(d)
			assert.Error(t, err)
		})
	}
}

// A failed write changes nothing, in memory or on disk.
func TestFileStoreFailedWrite(t *testing.T) {
	dir := t.TempDir()
	s, err := scramcreds.OpenFile(dir)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Put(ctx, scramcredstest.Cred("alice", scramcreds.SHA256, 1)))
	// A directory where the temporary file goes fails every save, as root
	// too.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, scramcreds.FileName+".tmp", "x"), 0o700))
	err = s.Put(ctx, scramcredstest.Cred("bob", scramcreds.SHA256, 2))
	require.ErrorIs(t, err, scramcreds.ErrStorage)
	_, err = s.Delete(ctx, "alice", scramcreds.SHA256)
	require.ErrorIs(t, err, scramcreds.ErrStorage)
	cs, err := s.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, []scramcreds.Credential{scramcredstest.Cred("alice", scramcreds.SHA256, 1)}, cs)
}

// The file is read from disk at every start: any content opens as a valid
// store or fails, never panics, and what opens lists only well-formed
// credentials.
func FuzzOpenFile(f *testing.F) {
	f.Add([]byte(`{"format":1,"credentials":[]}`))
	f.Add([]byte(`{"format":1,"credentials":[{"user":"a","mechanism":"SCRAM-SHA-256","salt":"AQ==","iterations":4096,"storedKey":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","serverKey":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, scramcreds.FileName), raw, 0o600))
		s, err := scramcreds.OpenFile(dir)
		if err != nil {
			return
		}
		cs, err := s.List(context.Background())
		require.NoError(t, err)
		for _, c := range cs {
			_, err := scramcreds.ToRecord(c).Credential()
			assert.NoError(t, err)
		}
	})
}
