package logstore

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGroupCommitSharesFsyncs(t *testing.T) {
	s, err := Open(t.TempDir(), Options{Fsync: FsyncAlways})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.CreateTopic(context.Background(), "gc", 1, TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	const producers, each = 16, 20
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for range each {
				_, err := s.Append(context.Background(), "gc", 0, []Record{{Value: []byte("x")}})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	p, err := s.partition("gc", 0)
	require.NoError(t, err)
	commits := p.commits.Load()
	t.Logf("%d appends in %d commits", producers*each, commits)
	assert.Less(t, commits, int64(producers*each/2), "concurrent appends share writes and fsyncs")
	assert.Equal(t, int64(producers*each), p.hw.Load())
}
