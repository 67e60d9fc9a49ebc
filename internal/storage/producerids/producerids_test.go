package producerids

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

func TestReserveIsDurableAndNeverReused(t *testing.T) {
	dir := t.TempDir()
	f := Open(dir)
	f.now = func() time.Time { return time.UnixMilli(5) }
	first, err := f.ReserveProducerIDs(context.Background(), 10)
	require.NoError(t, err)
	assert.Equal(t, int64(5000), first, "a new directory starts at now-ms × 1000")
	second, err := f.ReserveProducerIDs(context.Background(), 10)
	require.NoError(t, err)
	assert.Equal(t, int64(5010), second)

	// A new process (restart) continues after every reserved block.
	again := Open(dir)
	third, err := again.ReserveProducerIDs(context.Background(), 1)
	require.NoError(t, err)
	assert.Equal(t, int64(5020), third)
}

func TestDamagedFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte("garbage, not a counter"), 0o644))
	_, err := Open(dir).ReserveProducerIDs(context.Background(), 1)
	require.ErrorIs(t, err, logstore.ErrStorage)
	assert.Contains(t, err.Error(), "damaged")
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
