package jsstate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
)

// A read's filter is the caller's, unchanged: readFenced reads again with
// the same filter after a conflict, and that read must see the same keys.
func TestReadAgainWithTheSameFilter(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	a, b := openOwners(t, m), openOwners(t, m)
	_, err := a.AdoptPartition(context.Background(), "tid", 0)
	require.NoError(t, err)
	write(t, a, partDelta("g", "tid", 0, 0, ack(0, 4)), partDelta("h", "tid", 0, 0, ack(0, 1)))

	filter := []string{"p.*." + sljs.HexKey("tid") + ".0"}
	first, err := b.ReadKeys(context.Background(), filter)
	require.NoError(t, err)
	require.Len(t, first, 2)
	again, err := b.ReadKeys(context.Background(), filter)
	require.NoError(t, err)
	require.Equal(t, first, again, "the second read with the same filter")
}
