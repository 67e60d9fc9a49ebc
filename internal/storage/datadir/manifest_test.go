package datadir_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sharelog/sharelog/internal/storage/datadir"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// What Save writes, Open reads back; high watermarks never move back
// except explicitly.
func TestManifestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m, err := datadir.Open(dir, nil)
	require.NoError(t, err)
	assert.Equal(t, datadir.Missing, m.Status())
	m.PutTopic(datadir.Topic{ID: "id-1", Name: "orders", Partitions: 2})
	assert.True(t, m.RaiseHighWatermark("id-1", 1, 42))
	assert.False(t, m.RaiseHighWatermark("id-1", 1, 7), "never moves back")
	m.SetShareState([]datadir.SharePartition{{Group: "g", Topic: "orders", TopicID: "id-1", Partition: 1}})
	require.NoError(t, m.Save())
	assert.False(t, m.Dirty())

	m2, err := datadir.Open(dir, nil)
	require.NoError(t, err)
	assert.Equal(t, datadir.Found, m2.Status())
	assert.Equal(t, []datadir.Topic{{ID: "id-1", Name: "orders", Partitions: 2, HighWatermarks: []int64{0, 42}}}, m2.Topics())
	assert.Equal(t, &datadir.ShareState{SharePartitions: []datadir.SharePartition{{Group: "g", Topic: "orders", TopicID: "id-1", Partition: 1}}}, m2.ShareState())
	m2.SetHighWatermark("id-1", 1, 5)
	m2.RemoveTopic("id-1")
	require.NoError(t, m2.Save())
	m3, err := datadir.Open(dir, nil)
	require.NoError(t, err)
	assert.Empty(t, m3.Topics())
}

// A damaged manifest (a flipped digit the JSON alone would accept) is
// moved to quarantine, and the checks are off for that start.
func TestManifestDamaged(t *testing.T) {
	dir := t.TempDir()
	m, err := datadir.Open(dir, nil)
	require.NoError(t, err)
	m.PutTopic(datadir.Topic{ID: "id-1", Name: "orders", Partitions: 1})
	m.RaiseHighWatermark("id-1", 0, 1234)
	require.NoError(t, m.Save())
	path := filepath.Join(dir, datadir.FileName)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), "1234")
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(b), "1234", "1235", 1)), 0o644))

	m2, err := datadir.Open(dir, nil)
	require.NoError(t, err)
	assert.Equal(t, datadir.Damaged, m2.Status())
	assert.Empty(t, m2.Topics())
	q, err := filepath.Glob(filepath.Join(dir, "quarantine", "*", datadir.FileName))
	require.NoError(t, err)
	assert.Len(t, q, 1, "the damaged manifest is kept")
}
