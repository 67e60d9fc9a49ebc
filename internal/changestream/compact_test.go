package changestream_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/changestream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// compactedStore is a file store with a compacted topic "c" whose
// tombstones expire after 1 ms of the injected clock, and no background
// cleaner: the tests run passes with CompactNow.
func compactedStore(t *testing.T) (*logstore.FileStore, *atomic.Int64) {
	t.Helper()
	var now atomic.Int64
	now.Store(1_000_000)
	s, err := logstore.Open(t.TempDir(), logstore.Options{Fsync: logstore.FsyncNever, CompactionInterval: -1,
		Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 1024, CleanupPolicy: logstore.CleanupCompact,
		DeleteRetentionMs: 1, MinCleanableDirtyRatio: 0.01})
	require.NoError(t, err)
	return s, &now
}

func put(t *testing.T, s logstore.Store, now *atomic.Int64, key string, val []byte) int64 {
	t.Helper()
	off, err := s.Append(ctx, "c", 0, []logstore.Record{{Key: []byte(key), Value: val, Timestamp: now.Load()}})
	require.NoError(t, err)
	return off
}

// filler appends n records of other keys, so segments roll.
func filler(t *testing.T, s logstore.Store, now *atomic.Int64, n int) {
	for i := range n {
		put(t, s, now, fmt.Sprintf("z/%d", i%4), []byte("filler-filler-filler-filler"))
	}
}

// TestTombstonesPurgedRollback: once compaction removed a tombstone at
// offset P (the latest record of its key, older than delete_retention_ms),
// requests with 0 < start_offset <= P get ROLLBACK_REQUIRED
// (tombstones_purged), start_offset 0 and P+1 do not; a superseded
// tombstone removed by compaction does not move P.
func TestTombstonesPurgedRollback(t *testing.T) {
	s, now := compactedStore(t)
	put(t, s, now, "a", []byte("1"))
	put(t, s, now, "b", []byte("1"))
	superseded := put(t, s, now, "a", nil)
	put(t, s, now, "a", []byte("2"))
	filler(t, s, now, 40)
	now.Add(10)
	s.CompactNow()
	m, err := changestream.New(s, s, changestream.Config{})
	require.NoError(t, err)
	_, parts, err := s.Topic(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, int64(0), parts[0].PurgedTombstonesBelow, "the superseded tombstone at %d does not raise P", superseded)
	end := int64(superseded + 1)
	require.NoError(t, m.Stream(ctx, changestream.Request{Topic: "c", Partition: 0, StartOffset: superseded, EndOffset: &end},
		changestream.SendFunc(func(*changestream.Event) error { return nil })))

	tomb := put(t, s, now, "b", nil)
	filler(t, s, now, 40)
	now.Add(10)
	s.CompactNow()
	_, parts, err = s.Topic(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, tomb+1, parts[0].PurgedTombstonesBelow)

	for _, tc := range []struct {
		start    int64
		rollback bool
	}{{0, false}, {1, true}, {tomb, true}, {tomb + 1, false}} {
		_, hw, err := s.Bounds("c", 0)
		require.NoError(t, err)
		err = m.Stream(ctx, changestream.Request{Topic: "c", Partition: 0, StartOffset: tc.start, EndOffset: &hw},
			changestream.SendFunc(func(*changestream.Event) error { return nil }))
		if !tc.rollback {
			assert.NoError(t, err, "start %d", tc.start)
			continue
		}
		var ce *apierr.Error
		if assert.ErrorAs(t, err, &ce, "start %d", tc.start) {
			assert.Equal(t, apierr.RollbackRequired, ce.Reason)
			assert.Equal(t, changestream.CauseTombstonesPurged, ce.Metadata["cause"])
			assert.Equal(t, "0", ce.Metadata["rollback_offset"])
		}
	}
}

// TestTombstonesPurgedWhileStreaming: an ordered stream whose next offset
// is at or below a tombstone that compaction removes meanwhile ends with
// stream_end{ROLLBACK}; one already past it goes on.
func TestTombstonesPurgedWhileStreaming(t *testing.T) {
	for _, tc := range []struct {
		name     string
		after    bool // the stream starts after the tombstone
		wantLast string
	}{
		{"behind the tombstone", false, "end(ROLLBACK)"},
		{"past the tombstone", true, "end(OK)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, now := compactedStore(t)
			put(t, s, now, "b", []byte("1"))
			filler(t, s, now, 5)
			tomb := put(t, s, now, "b", nil)
			filler(t, s, now, 60)
			_, hw, err := s.Bounds("c", 0)
			require.NoError(t, err)
			now.Add(10)
			m, err := changestream.New(s, s, changestream.Config{BatchRecords: 1})
			require.NoError(t, err)
			start := int64(1)
			if tc.after {
				start = tomb + 1
			}
			gate, resume := make(chan struct{}), make(chan struct{})
			var events []string
			items := 0
			done := make(chan error, 1)
			go func() {
				done <- m.Stream(ctx, changestream.Request{Topic: "c", Partition: 0, StartOffset: start, EndOffset: &hw},
					changestream.SendFunc(func(ev *changestream.Event) error {
						events = append(events, ev.String())
						if ev.Kind == changestream.EventMutation {
							if items++; items == 1 {
								close(gate)
								<-resume // compaction runs while the client holds this item
							}
						}
						return nil
					}))
			}()
			<-gate
			s.CompactNow()
			_, parts, err := s.Topic(ctx, "c")
			require.NoError(t, err)
			require.Equal(t, tomb+1, parts[0].PurgedTombstonesBelow)
			close(resume)
			require.NoError(t, <-done)
			require.NotEmpty(t, events)
			assert.Equal(t, tc.wantLast, events[len(events)-1])
		})
	}
}

// TestOrderedStreamOverCompactedPartition: a stream from 0 over a partition
// compacted before the call (P >= 0, offsets with gaps) is not rolled back:
// it never held what the removed tombstones deleted. It passes over the
// gaps and its materialised state is the latest value per key.
func TestOrderedStreamOverCompactedPartition(t *testing.T) {
	s, now := compactedStore(t)
	truth := map[string]string{}
	for i := range 90 {
		key := fmt.Sprintf("%c/%d", "ab"[i%2], i%7)
		var v []byte
		if i%5 != 4 {
			v = fmt.Appendf(nil, "v%d", i)
			truth[key] = string(v)
		} else {
			delete(truth, key)
		}
		put(t, s, now, key, v)
	}
	now.Add(10)
	s.CompactNow()
	_, parts, err := s.Topic(ctx, "c")
	require.NoError(t, err)
	require.Positive(t, parts[0].PurgedTombstonesBelow, "tombstones were removed")
	hw := parts[0].HighWatermark
	m, err := changestream.New(s, s, changestream.Config{BatchRecords: 7})
	require.NoError(t, err)
	state := map[string]string{}
	var last string
	items := 0
	require.NoError(t, m.Stream(ctx, changestream.Request{Topic: "c", Partition: 0, EndOffset: &hw, OSO: changestream.OSOOff},
		changestream.SendFunc(func(ev *changestream.Event) error {
			last = ev.String()
			switch ev.Kind {
			case changestream.EventMutation:
				state[string(ev.Record.Key)] = string(ev.Record.Value)
				items++
			case changestream.EventDeletion:
				delete(state, string(ev.Record.Key))
				items++
			}
			return nil
		})))
	assert.Equal(t, "end(OK)", last)
	assert.Equal(t, truth, state)
	assert.Less(t, items, 90, "superseded records were removed")
}
