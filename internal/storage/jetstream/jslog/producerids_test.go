package jslog

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReserveProducerIDsAcrossInstances: two instances of one cluster
// reserving blocks at the same time never get overlapping ones, and a
// store opened later continues after every block.
func TestReserveProducerIDsAcrossInstances(t *testing.T) {
	a := newStore(t)
	b := openStore(t, cluster.Connect(t), Options{Prefix: a.prefix, Replicas: 3})
	const n, each = 10, 8
	var mu sync.Mutex
	var firsts []int64
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b} {
		wg.Go(func() {
			for range each {
				first, err := s.ReserveProducerIDs(context.Background(), n)
				assert.NoError(t, err)
				mu.Lock()
				firsts = append(firsts, first)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, firsts, 2*each)
	seen := map[int64]bool{}
	var highest int64
	for _, f := range firsts {
		require.Positive(t, f)
		for id := f; id < f+n; id++ {
			require.False(t, seen[id], "id %d handed out twice", id)
			seen[id] = true
		}
		highest = max(highest, f+n-1)
	}
	c := openStore(t, cluster.Connect(t), Options{Prefix: a.prefix, Replicas: 3})
	next, err := c.ReserveProducerIDs(context.Background(), 1)
	require.NoError(t, err)
	assert.Equal(t, highest+1, next)
}
