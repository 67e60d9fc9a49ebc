package groupoffsets

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// conformance runs the Store contract against a store that open returns,
// reopened over the same medium by reopen (nil: no durability to check).
func conformance(t *testing.T, open func() Store, reopen func(Store) Store) {
	s := open()
	ts := time.UnixMilli(1_700_000_000_000).UTC()
	require.NoError(t, s.Commit("g1", []Offset{{Topic: "a", Partition: 0, Offset: 5, LeaderEpoch: -1, Metadata: "m", CommitTime: ts},
		{Topic: "a", Partition: 1, Offset: 7, LeaderEpoch: 2, CommitTime: ts}}))
	require.NoError(t, s.Commit("g1", []Offset{{Topic: "a", Partition: 0, Offset: 9, LeaderEpoch: -1, CommitTime: ts}}))
	require.NoError(t, s.Commit("g2", []Offset{{Topic: "b", Partition: 0, Offset: 1, CommitTime: ts}}))
	require.NoError(t, s.SetMeta("g2", Meta{ProtocolType: "consumer", EmptySince: ts}))
	require.NoError(t, s.Commit("g3", []Offset{{Topic: "c", Partition: 0, Offset: 1, CommitTime: ts}}))
	require.NoError(t, s.Delete("g3", nil))
	require.NoError(t, s.Delete("g1", []Partition{{"a", 1}}))
	require.NoError(t, s.Delete("g2", []Partition{}), "an empty delete deletes nothing")
	want := []Group{
		{ID: "g1", Offsets: []Offset{{Topic: "a", Partition: 0, Offset: 9, LeaderEpoch: -1, CommitTime: ts}}},
		{ID: "g2", Offsets: []Offset{{Topic: "b", Partition: 0, Offset: 1, CommitTime: ts}}, Meta: Meta{ProtocolType: "consumer", EmptySince: ts}},
	}
	got, err := s.Load()
	require.NoError(t, err)
	assert.Equal(t, want, got)
	if reopen == nil {
		return
	}
	s = reopen(s)
	got, err = s.Load()
	require.NoError(t, err)
	assert.Equal(t, want, got, "after reopening")
	require.NoError(t, s.Close())
}

func TestMemConformance(t *testing.T) {
	conformance(t, func() Store { return NewMem() }, nil)
}

func TestFileConformance(t *testing.T) {
	for _, mode := range []logstore.FsyncMode{logstore.FsyncAlways, logstore.FsyncInterval, logstore.FsyncNever} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			o := Options{Dir: dir, Fsync: mode, FsyncInterval: 10 * time.Millisecond}
			conformance(t, func() Store {
				s, err := Open(o)
				require.NoError(t, err)
				return s
			}, func(old Store) Store {
				require.NoError(t, old.Close())
				s, err := Open(o)
				require.NoError(t, err)
				return s
			})
		})
	}
}

// A torn or damaged tail is cut at the last whole frame: what was written
// before it is kept, and new writes follow it.
func TestFileCutsDamagedTail(t *testing.T) {
	for name, tail := range map[string][]byte{
		"torn header":  {0, 0},
		"torn payload": {0, 0, 0, 50, 1, 2, 3, 4, '{'},
		"bad checksum": append([]byte{0, 0, 0, 2, 9, 9, 9, 9}, "{}"...),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(Options{Dir: dir})
			require.NoError(t, err)
			require.NoError(t, s.Commit("g", []Offset{{Topic: "t", Offset: 3}}))
			require.NoError(t, s.Close())
			path := filepath.Join(dir, FileName)
			good, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, append(good, tail...), 0o644))

			s, err = Open(Options{Dir: dir})
			require.NoError(t, err)
			got, err := s.Load()
			require.NoError(t, err)
			require.Len(t, got, 1)
			assert.Equal(t, int64(3), got[0].Offsets[0].Offset)
			require.NoError(t, s.Commit("g", []Offset{{Topic: "t", Offset: 4}}))
			require.NoError(t, s.Close())
			s, err = Open(Options{Dir: dir})
			require.NoError(t, err)
			got, err = s.Load()
			require.NoError(t, err)
			assert.Equal(t, int64(4), got[0].Offsets[0].Offset, "the write after the cut is read back")
			require.NoError(t, s.Close())
		})
	}
}

// The file is compacted once it outgrows the live state, and the compacted
// file holds the same state.
func TestFileCompacts(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, CompactBytes: 4096}
	s, err := Open(o)
	require.NoError(t, err)
	for i := range 2000 {
		require.NoError(t, s.Commit("g", []Offset{{Topic: "t", Partition: int32(i % 3), Offset: int64(i)}}))
	}
	st, err := os.Stat(filepath.Join(dir, FileName))
	require.NoError(t, err)
	assert.Less(t, st.Size(), int64(2*4096), "compacted, not 2000 frames")
	require.NoError(t, s.Close())
	s, err = Open(o)
	require.NoError(t, err)
	got, err := s.Load()
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Len(t, got[0].Offsets, 3)
	assert.Equal(t, []int64{1998, 1999, 1997}, []int64{got[0].Offsets[0].Offset, got[0].Offsets[1].Offset, got[0].Offsets[2].Offset})
	require.NoError(t, s.Close())
}
