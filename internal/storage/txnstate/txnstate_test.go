package txnstate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/fsutil"
)

func TestFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	f := Open(dir, fsutil.SyncFileAndDir)
	got, err := f.Load()
	require.NoError(t, err)
	assert.Empty(t, got)
	a := Txn{ID: "a", ProducerID: 7, Epoch: 2, TimeoutMs: 60000, Status: Ongoing, StartMs: 5, UpdateMs: 6,
		Partitions: []Partition{{"t", 1}}, Groups: []string{"g"},
		Offsets: map[string][]Offset{"g": {{Topic: "t", Partition: 1, Offset: 42, LeaderEpoch: -1, Metadata: "m"}}}}
	require.NoError(t, f.Put(a))
	require.NoError(t, f.Put(Txn{ID: "b", ProducerID: 8, Status: Empty}))
	a.Status = PrepareCommit
	require.NoError(t, f.Put(a))

	got, err = Open(dir, fsutil.NoSync).Load()
	require.NoError(t, err)
	assert.Equal(t, []Txn{a, {ID: "b", ProducerID: 8, Status: Empty}}, got)
}

func TestFileDamagedIsAnError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte(`{"version":1,"ids":{`), 0o644))
	_, err := Open(dir, fsutil.NoSync).Load()
	assert.ErrorContains(t, err, "damaged")
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte(`{"version":2,"ids":{}}`), 0o644))
	_, err = Open(dir, fsutil.NoSync).Load()
	assert.ErrorContains(t, err, "version 2")
}
