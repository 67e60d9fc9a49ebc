package groupoffsets_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets/groupoffsetstest"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

func TestMemConformance(t *testing.T) {
	groupoffsetstest.Run(t, func(t *testing.T) (groupoffsets.Store, func() groupoffsets.Store) {
		return groupoffsets.NewMem(), nil
	})
}

func TestFileConformance(t *testing.T) {
	for _, mode := range []logstore.FsyncMode{logstore.FsyncAlways, logstore.FsyncInterval, logstore.FsyncNever} {
		t.Run(mode.String(), func(t *testing.T) {
			groupoffsetstest.Run(t, func(t *testing.T) (groupoffsets.Store, func() groupoffsets.Store) {
				o := groupoffsets.Options{Dir: t.TempDir(), Fsync: mode, FsyncInterval: 10 * time.Millisecond}
				open := func() groupoffsets.Store {
					s, err := groupoffsets.Open(o)
					require.NoError(t, err)
					return s
				}
				return open(), open
			})
		})
	}
}
