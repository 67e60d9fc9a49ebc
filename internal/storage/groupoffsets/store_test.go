package groupoffsets

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
