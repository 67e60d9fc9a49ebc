package ownership

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/cluster"
	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

func TestGatesStopWaitsForHoldsAndEndsTheTermsCalls(t *testing.T) {
	gs := NewGates()
	assert.False(t, gs.Serves("p/x/0"))
	gs.Serve("p/x/0", 7)
	h, ok := gs.Hold("p/x/0")
	require.True(t, ok)
	assert.EqualValues(t, 7, h.Epoch)
	epoch, owned := gs.Term("p/x/0")
	assert.True(t, owned)
	assert.EqualValues(t, 7, epoch)

	assert.False(t, gs.Stop("p/x/0", 6), "another term's release changes nothing")
	stopped := make(chan bool)
	go func() { stopped <- gs.Stop("p/x/0", 7) }()
	select {
	case <-h.Calls.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not end the term's calls")
	}
	select {
	case <-stopped:
		t.Fatal("Stop returned while a hold was taken")
	case <-time.After(50 * time.Millisecond):
	}
	h.Release()
	assert.True(t, <-stopped)
	assert.False(t, gs.Serves("p/x/0"))
	_, ok = gs.Hold("p/x/0")
	assert.False(t, ok, "no hold starts after the gate closed")
	assert.False(t, gs.Stop("p/x/0", 7))
}

func TestPartitionsOwner(t *testing.T) {
	ctx := context.Background()
	store := logstore.NewMem()
	t.Cleanup(func() { _ = store.Close() })
	info, err := store.CreateTopic(ctx, "t", 2, logstore.TopicConfig{RetentionMs: -1, CleanupPolicy: logstore.CleanupDelete})
	require.NoError(t, err)
	gs := NewGates()
	p := &Partitions{Gates: gs, Topics: store, Leases: func() (*cluster.Items, string) { return nil, "a" }}

	for name, tc := range map[string]struct {
		topic string
		part  int32
	}{"unknown topic": {"nope", 0}, "partition past the end": {"t", 2}, "negative partition": {"t", -1}} {
		o, err := p.Owner(ctx, tc.topic, tc.part)
		require.NoError(t, err, name)
		require.NotNil(t, o.Hold, "%s: served here, the store answers", name)
		o.Hold.Release(nil)
	}

	o, err := p.Owner(ctx, "t", 1)
	require.NoError(t, err)
	assert.Equal(t, "", o.Peer)
	assert.Nil(t, o.Hold, "not served here and no lease known: nobody serves it")

	gs.Serve(cluster.PartitionItem(info.ID, 1), 3)
	o, err = p.Owner(ctx, "t", 1)
	require.NoError(t, err)
	require.NotNil(t, o.Hold)
	stopped := make(chan bool)
	go func() { stopped <- gs.Stop(cluster.PartitionItem(info.ID, 1), 3) }()
	select {
	case <-stopped:
		t.Fatal("the partition was given up during an append")
	case <-time.After(50 * time.Millisecond):
	}
	o.Hold.Release(sljs.ErrFenced) // without leases: nothing to give up but the hold
	assert.True(t, <-stopped)
}
