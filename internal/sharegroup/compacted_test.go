package sharegroup

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// TestCompactedFileStoreOffsets is TestCompactedOffsets over a partition
// the file store's cleaner really compacted: its reads start at the next
// stored record and skip offsets, and acquisition archives every offset
// without a record and delivers exactly the stored ones.
func TestCompactedFileStoreOffsets(t *testing.T) {
	fs, err := logstore.Open(t.TempDir(), logstore.Options{Fsync: logstore.FsyncNever, CompactionInterval: -1})
	require.NoError(t, err)
	defer fs.Close()
	e := newEnvOn(t, fs, t.TempDir(), nil)
	ctx := context.Background()
	_, err = fs.CreateTopic(ctx, "t", 1, logstore.TopicConfig{SegmentBytes: 1024, CleanupPolicy: logstore.CleanupCompact, MinCleanableDirtyRatio: 0.01})
	require.NoError(t, err)
	x := tp("t", 0)
	e.open("m", x)
	e.fetch("m", FetchRequest{}) // the share-partition starts at the (empty) log's end
	// Keys k0..k3 are rewritten over and over, two keys are written once.
	for i := range 60 {
		key := fmt.Sprintf("k%d", i%4)
		if i == 0 || i == 25 {
			key = fmt.Sprintf("once-%d", i)
		}
		_, err := fs.Append(ctx, "t", 0, []logstore.Record{{Key: []byte(key), Value: fmt.Appendf(nil, "value-%02d-padding-padding", i)}})
		require.NoError(t, err)
	}
	fs.CompactNow()
	var stored []int64
	for off := int64(0); off < 60; {
		recs, err := fs.Read(ctx, "t", 0, off, 100, 1<<20)
		require.NoError(t, err)
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			stored = append(stored, r.Offset)
			off = r.Offset + 1
		}
	}
	require.Less(t, len(stored), 60, "compaction removed records")
	require.Equal(t, []int64{0, 25}, stored[:2], "the keys written once stay, with gaps around them")

	resp := e.fetch("m", FetchRequest{MaxRecords: i32(100)})
	p := part(t, resp, x)
	var got []int64
	for _, r := range p.Records {
		got = append(got, r.Offset)
	}
	assert.Equal(t, stored, got, "exactly the stored records are delivered")
	for _, a := range p.Acquired {
		for o := a.FirstOffset; o <= a.LastOffset; o++ {
			assert.Contains(t, stored, o, "acquired offset %d holds a record", o)
		}
	}
	assert.Contains(t, e.state(x), "ARCHIVED", "the removed offsets are archived")
}
