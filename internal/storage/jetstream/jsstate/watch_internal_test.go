package jsstate

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

type fakeEntry struct {
	key string
	val []byte
	rev uint64
	op  njs.KeyValueOp
}

func (e fakeEntry) Bucket() string            { return "SL_SHARE" }
func (e fakeEntry) Key() string               { return e.key }
func (e fakeEntry) Value() []byte             { return e.val }
func (e fakeEntry) Revision() uint64          { return e.rev }
func (e fakeEntry) Created() time.Time        { return time.Time{} }
func (e fakeEntry) Delta() uint64             { return 0 }
func (e fakeEntry) Operation() njs.KeyValueOp { return e.op }

type fakeWatcher struct{ ch chan njs.KeyValueEntry }

func (w fakeWatcher) Updates() <-chan njs.KeyValueEntry { return w.ch }
func (w fakeWatcher) Stop() error                       { return nil }

// watching is a watch that delivers es (a nil entry: the end of the
// initial values), then nothing until ctx ends.
func watching(es ...njs.KeyValueEntry) func(context.Context) (njs.KeyWatcher, error) {
	return func(context.Context) (njs.KeyWatcher, error) {
		ch := make(chan njs.KeyValueEntry, len(es))
		for _, e := range es {
			ch <- e
		}
		return fakeWatcher{ch}, nil
	}
}

// markAt is a syncMark whose write has revision rev.
func markAt(rev uint64) func(context.Context) (uint64, error) {
	return func(context.Context) (uint64, error) { return rev, nil }
}

func syncAt(rev uint64) fakeEntry { return fakeEntry{key: syncKey, rev: rev} }

func groupAt(t *testing.T, g string, rev uint64) fakeEntry {
	t.Helper()
	val, err := json.Marshal(groupValue{Epoch: int32(rev)})
	require.NoError(t, err)
	return fakeEntry{key: groupKey(g), val: val, rev: rev}
}

// A watch that ends before the end of its initial values is not taken for
// the whole bucket: the read starts again with a new watch and returns
// what that one delivers in full.
func TestWatchSnapshotsStartsAgainAfterAnEarlyEnd(t *testing.T) {
	g1, g2 := groupAt(t, "g1", 1), groupAt(t, "g2", 2)
	opened := 0
	dm, st, err := watchSnapshots(context.Background(), markAt(3), func(context.Context) (njs.KeyWatcher, error) {
		opened++
		ch := make(chan njs.KeyValueEntry, 4)
		ch <- g1
		if opened == 1 {
			close(ch) // ends after g1: g2 never came
		} else {
			ch <- g2
			ch <- syncAt(3)
			ch <- nil
		}
		return fakeWatcher{ch}, nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, opened)
	require.Len(t, st.Groups, 2)
	require.Equal(t, uint64(2), dm["g2"].rev)

	// Until ctx ends: then the error says the read was incomplete.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err = watchSnapshots(ctx, markAt(1), func(context.Context) (njs.KeyWatcher, error) {
		ch := make(chan njs.KeyValueEntry)
		close(ch)
		return fakeWatcher{ch}, nil
	})
	require.ErrorIs(t, err, errWatchEnded)
}

// The watch's initial values are those of the replica its consumer is on,
// which can lag behind writes a quorum acknowledged. A read is not
// complete at the end of the initial values but once the watch has
// delivered the read's own mark: what came before it, after the initial
// values, is in the read — a key written, a key deleted, a key changed.
func TestReadSnapshotsWaitsForItsMark(t *testing.T) {
	p1 := fakeEntry{key: partKeyName("g1", partKey{topicID: "tid", part: 0}), val: []byte(`{"topic_id":"tid","initialized":true,"spso":4}`), rev: 3}
	tests := []struct {
		name  string
		watch []njs.KeyValueEntry
		revs  map[string]uint64 // group → its key's revision (0: only share-partition keys)
		parts map[string]uint64 // group → revision of its share-partition key tid/0
	}{
		{
			name:  "the mark in the initial values",
			watch: []njs.KeyValueEntry{groupAt(t, "g1", 1), syncAt(10), nil},
			revs:  map[string]uint64{"g1": 1},
		},
		{
			name:  "a later mark of another read counts",
			watch: []njs.KeyValueEntry{syncAt(12), groupAt(t, "g1", 1), nil},
			revs:  map[string]uint64{"g1": 1},
		},
		{
			name:  "a key the initial values missed",
			watch: []njs.KeyValueEntry{groupAt(t, "g1", 1), syncAt(7), nil, groupAt(t, "g2", 8), p1, syncAt(10)},
			revs:  map[string]uint64{"g1": 1, "g2": 8},
			parts: map[string]uint64{"g1": 3},
		},
		{
			name: "a key deleted after the initial values",
			watch: []njs.KeyValueEntry{groupAt(t, "g1", 1), groupAt(t, "g2", 2), p1, nil,
				fakeEntry{key: groupKey("g2"), rev: 8, op: njs.KeyValueDelete},
				fakeEntry{key: p1.key, rev: 9, op: njs.KeyValuePurge}, syncAt(10)},
			revs: map[string]uint64{"g1": 1},
		},
		{
			name:  "a key delivered deleted, written since",
			watch: []njs.KeyValueEntry{fakeEntry{key: groupKey("g1"), rev: 5, op: njs.KeyValueDelete}, nil, groupAt(t, "g1", 9), syncAt(10)},
			revs:  map[string]uint64{"g1": 9},
		},
		{
			name:  "a key changed after the initial values",
			watch: []njs.KeyValueEntry{groupAt(t, "g1", 1), nil, groupAt(t, "g1", 9), syncAt(11)},
			revs:  map[string]uint64{"g1": 9},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A read that did not end at its mark would wait for more
			// until ctx ends, and fail.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			dm, st, err := watchSnapshots(ctx, markAt(10), watching(tc.watch...))
			require.NoError(t, err)
			revs, parts := map[string]uint64{}, map[string]uint64{}
			for g, dg := range dm {
				if dg.rev != 0 {
					revs[g] = dg.rev
				}
				if dp := dg.parts[partKey{topicID: "tid", part: 0}]; dp != nil {
					parts[g] = dp.rev
				}
			}
			require.Equal(t, tc.revs, revs)
			if tc.parts == nil {
				tc.parts = map[string]uint64{}
			}
			require.Equal(t, tc.parts, parts)
			require.Len(t, st.Groups, len(dm))
		})
	}
}

// A read does not end at the end of the initial values while its mark has
// not come: the watch's replica has not applied everything acknowledged
// before the read.
func TestReadSnapshotsDoesNotEndBeforeItsMark(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := watchSnapshots(ctx, markAt(10), watching(groupAt(t, "g1", 1), syncAt(9), nil))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
