package jsstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// LiveGroup answers a group's config and epoch, first by reading its key,
// then from the watch: it follows a config change and a delete.
func TestLiveGroup(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	u := openStarted(t, m)
	dlq := "dlq"
	write(t, u, sharestate.Entry{Kind: sharestate.KindGroup, Group: "a", GroupEpoch: 1, Config: sharestate.GroupConfig{DeadLetterTopic: &dlq}})
	s := openScoped(t, m)
	cfg, epoch, ok, err := s.LiveGroup(context.Background(), "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int32(1), epoch)
	require.Equal(t, sharestate.GroupConfig{DeadLetterTopic: &dlq}, cfg)
	_, _, ok, err = s.LiveGroup(context.Background(), "none")
	require.NoError(t, err)
	require.False(t, ok)
	require.Eventually(t, s.GroupWatchReady, 5*time.Second, 10*time.Millisecond, "the watch delivers the bucket's keys")

	limit := int32(3)
	write(t, u, sharestate.Entry{Kind: sharestate.KindGroup, Group: "a", GroupEpoch: 2, Config: sharestate.GroupConfig{DeliveryCountLimit: &limit}})
	require.Eventually(t, func() bool {
		cfg, epoch, ok, err = s.LiveGroup(context.Background(), "a")
		return err == nil && ok && epoch == 2
	}, 5*time.Second, 10*time.Millisecond, "%v %v %v", epoch, ok, err)
	require.Equal(t, sharestate.GroupConfig{DeliveryCountLimit: &limit}, cfg)
	_, _, ok, err = s.LiveGroup(context.Background(), "none")
	require.NoError(t, err)
	require.False(t, ok)

	write(t, u, sharestate.Entry{Kind: sharestate.KindGroupDelete, Group: "a"})
	require.Eventually(t, func() bool {
		_, _, ok, err = s.LiveGroup(context.Background(), "a")
		return err == nil && !ok
	}, 5*time.Second, 10*time.Millisecond, "%v %v", ok, err)
	require.True(t, s.GroupWatchReady(), "answered from the watch")
	ids, err := s.LiveGroupIDs(context.Background())
	require.NoError(t, err)
	require.Empty(t, ids)
}

// ReadGroup sees every write acknowledged before it, at once (no
// Eventually), and a deleted group as absent.
func TestReadGroup(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	u := openStarted(t, m)
	s := openScoped(t, m)
	_, _, ok, err := s.ReadGroup(context.Background(), "a")
	require.NoError(t, err)
	require.False(t, ok)
	for epoch := range int32(5) {
		limit := epoch + 2
		write(t, u, sharestate.Entry{Kind: sharestate.KindGroup, Group: "a", GroupEpoch: epoch, Config: sharestate.GroupConfig{DeliveryCountLimit: &limit}})
		cfg, got, ok, err := s.ReadGroup(context.Background(), "a")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, epoch, got)
		require.Equal(t, sharestate.GroupConfig{DeliveryCountLimit: &limit}, cfg)
	}
	write(t, u, sharestate.Entry{Kind: sharestate.KindGroupDelete, Group: "a"})
	_, _, ok, err = s.ReadGroup(context.Background(), "a")
	require.NoError(t, err)
	require.False(t, ok)
}
