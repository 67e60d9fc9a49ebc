package logstore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/datadir"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Partitions added and configs altered are on disk (meta.json and the
// partition directories) and in the data directory manifest: after a clean
// close or a crash the topic has its new partitions with their records,
// the new config, and a topic that compacted once still reads its gapped
// segments after compaction is turned off.
func TestAlterTopicSurvivesReopen(t *testing.T) {
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprintf("clean=%v", clean), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			m, err := datadir.Open(dir, nil)
			require.NoError(t, err)
			opts := logstore.Options{Manifest: m}
			s := openStore(t, dir, opts)
			info, err := s.CreateTopic(ctx, "t", 2, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1, CleanupPolicy: logstore.CleanupCompact})
			require.NoError(t, err)
			for i := range 60 { // five keys: compaction leaves gaps
				_, err := s.Append(ctx, "t", 0, []logstore.Record{{Key: []byte(fmt.Sprint("k", i%5)), Value: value(i, 100), Timestamp: int64(i)}})
				require.NoError(t, err)
			}
			s.CompactNow()
			compacted, err := s.Read(ctx, "t", 0, 0, 1000, 1<<20)
			require.NoError(t, err)
			require.Less(t, len(compacted), 60, "compaction removed superseded records")

			altered, err := s.AlterTopic(ctx, "t", func(cur logstore.TopicInfo) (logstore.TopicInfo, error) {
				cur.Partitions = 4
				cur.Config.CleanupPolicy = logstore.CleanupDelete
				cur.Config.MaxMessageBytes = 5000
				cur.Config.MessageTimestampType = logstore.TimestampLogAppendTime
				cur.Config.Overrides = []string{"cleanup.policy", "max.message.bytes", "message.timestamp.type"}
				return cur, nil
			})
			require.NoError(t, err)
			_, err = s.Append(ctx, "t", 0, []logstore.Record{{Value: []byte("keyless, now allowed"), Timestamp: 100}})
			require.NoError(t, err)
			_, err = s.Append(ctx, "t", 3, []logstore.Record{{Key: []byte("k"), Value: []byte("on 3"), Timestamp: 1}})
			require.NoError(t, err)
			_, before, err := s.Topic(ctx, "t")
			require.NoError(t, err)
			rec, ok := m.Topic(info.ID)
			require.True(t, ok)
			assert.Equal(t, int32(4), rec.Partitions, "the manifest knows the new partitions")

			if clean {
				require.NoError(t, s.Close())
			} else {
				require.NoError(t, s.Crash())
			}
			m, err = datadir.Open(dir, nil)
			require.NoError(t, err)
			s = openStore(t, dir, logstore.Options{Manifest: m})
			assert.Empty(t, s.Offline())
			got, after, err := s.Topic(ctx, "t")
			require.NoError(t, err)
			assert.Equal(t, altered, got)
			assert.Equal(t, before[2:], after[2:])
			assert.Equal(t, before[0].HighWatermark, after[0].HighWatermark)
			recs, err := s.Read(ctx, "t", 3, 0, 10, 1<<20)
			require.NoError(t, err)
			require.Len(t, recs, 1)
			assert.Equal(t, "on 3", string(recs[0].Value))
			// Partition 0's compacted segments (offsets with gaps) read
			// back although the topic no longer compacts.
			all, err := s.Read(ctx, "t", 0, 0, 1000, 1<<20)
			require.NoError(t, err)
			assert.Equal(t, append(compacted, all[len(all)-1])[:len(compacted)], all[:len(compacted)])
			assert.Equal(t, "keyless, now allowed", string(all[len(all)-1].Value))
			assert.Equal(t, int64(60), all[len(all)-1].Offset)
		})
	}
}

// A crash between the new partitions' directories and meta.json leaves
// empty directories beyond the recorded count: Open removes them, and the
// partitions can be added again.
func TestAlterTopicInterruptedPartitions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, logstore.Options{})
	info, err := s.CreateTopic(ctx, "t", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	stray := filepath.Join(dir, "topics", info.ID, "1")
	require.NoError(t, os.Mkdir(stray, 0o755))

	s = openStore(t, dir, logstore.Options{})
	assert.NoDirExists(t, stray)
	got, err := s.TopicInfo(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, int32(1), got.Partitions)
	entries, err := os.ReadDir(filepath.Join(dir, "quarantine"))
	if err == nil {
		assert.Empty(t, entries, "an empty leftover is removed, not quarantined")
	}

	// A failed meta.json write leaves the topic as it was; a retry works.
	s.InjectFault(func(op, path string) error {
		if op == "rename" && filepath.Base(path) == "meta.json" {
			return fmt.Errorf("injected: %w", os.ErrPermission)
		}
		return nil
	})
	_, err = s.AlterTopic(ctx, "t", func(cur logstore.TopicInfo) (logstore.TopicInfo, error) { cur.Partitions = 2; return cur, nil })
	require.Error(t, err)
	got, err = s.TopicInfo(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, int32(1), got.Partitions)
	s.InjectFault(nil)
	got, err = s.AlterTopic(ctx, "t", func(cur logstore.TopicInfo) (logstore.TopicInfo, error) { cur.Partitions = 2; return cur, nil })
	require.NoError(t, err)
	assert.Equal(t, int32(2), got.Partitions)
	_, err = s.Append(ctx, "t", 1, []logstore.Record{{Value: []byte("x")}})
	require.NoError(t, err)
}

// segment.ms rolls a non-empty active segment at the first append after
// it has been open that long, and an alteration changes it at once.
func TestSegmentMsRolls(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(1_000_000)
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	s := openStore(t, t.TempDir(), logstore.Options{Now: clock})
	_, err := s.CreateTopic(ctx, "t", 1, logstore.TopicConfig{RetentionMs: -1, SegmentMs: 1000})
	require.NoError(t, err)
	segments := func() int32 {
		_, parts, err := s.Topic(ctx, "t")
		require.NoError(t, err)
		return parts[0].SegmentCount
	}
	add := func() {
		_, err := s.Append(ctx, "t", 0, []logstore.Record{{Value: []byte("v")}})
		require.NoError(t, err)
	}
	add()
	now.Add(999)
	add()
	assert.Equal(t, int32(1), segments(), "younger than segment.ms")
	now.Add(1)
	add()
	assert.Equal(t, int32(2), segments(), "rolled once segment.ms passed")
	now.Add(5000)
	_, err = s.AlterTopic(ctx, "t", func(cur logstore.TopicInfo) (logstore.TopicInfo, error) {
		cur.Config.SegmentMs = 60000
		return cur, nil
	})
	require.NoError(t, err)
	add()
	assert.Equal(t, int32(2), segments(), "the altered segment.ms applies")
	recs, err := s.Read(ctx, "t", 0, 0, 10, 1<<20)
	require.NoError(t, err)
	assert.Len(t, recs, 4)
}

// retention.bytes releases the oldest sealed segments while the partition
// would still hold at least the limit without them.
func TestRetentionBytes(t *testing.T) {
	t.Parallel()
	s := openStore(t, t.TempDir(), logstore.Options{})
	_, err := s.CreateTopic(ctx, "t", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
	require.NoError(t, err)
	appendN(t, s, "t", 0, 200, 2, 100, tsIdentity)
	_, parts, err := s.Topic(ctx, "t")
	require.NoError(t, err)
	require.Zero(t, parts[0].LogStartOffset, "no size limit yet")
	total := parts[0].SizeBytes
	const limit = 5000
	require.Greater(t, total, int64(3*limit))

	_, err = s.AlterTopic(ctx, "t", func(cur logstore.TopicInfo) (logstore.TopicInfo, error) {
		cur.Config.RetentionBytes = limit
		return cur, nil
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, parts, err := s.Topic(ctx, "t")
		require.NoError(t, err)
		return parts[0].LogStartOffset > 0 && parts[0].SizeBytes < 2*limit
	}, 5*time.Second, 10*time.Millisecond, "the reclaimer applies the limit")
	_, parts, err = s.Topic(ctx, "t")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, parts[0].SizeBytes, int64(limit), "never below the limit")
	assert.Equal(t, int64(200), parts[0].HighWatermark)
	recs, err := s.Read(ctx, "t", 0, parts[0].LogStartOffset, 1000, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, int64(199), recs[len(recs)-1].Offset)
}
