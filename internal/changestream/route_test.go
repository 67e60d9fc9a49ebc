package changestream_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/changestream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// The topology of these tests: this instance and a peer "B", each a
// Manager over its own memory store holding topic t of 2 partitions;
// partition 0 is served here, 1 by B. Topic "orphan" has no owner.

type fakeOwners struct {
	mu    sync.Mutex
	holds int // holds taken and not released
}

func (o *fakeOwners) Owner(_ context.Context, topic string, part int32) (broker.Owner, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case topic == "orphan":
		return broker.Owner{}, nil
	case topic == "t" && part == 1:
		return broker.Owner{Peer: "B"}, nil
	}
	o.holds++
	return broker.Owner{Hold: fakeHold{o}}, nil
}

type fakeHold struct{ o *fakeOwners }

func (h fakeHold) Release(error) {
	h.o.mu.Lock()
	defer h.o.mu.Unlock()
	h.o.holds--
}

// fakePeers streams from the peers' Managers as the transport would:
// marked as forwarded by this instance, flushing after every event the
// peer flushed.
type fakePeers struct {
	managers map[string]*changestream.Manager
	mu       sync.Mutex
	calls    []string
}

func (p *fakePeers) Stream(ctx context.Context, peer string, req changestream.Request, send changestream.Sender) error {
	p.mu.Lock()
	p.calls = append(p.calls, peer)
	p.mu.Unlock()
	return p.managers[peer].Stream(broker.WithForwardedBy(ctx, "here"), req, send)
}

func routed(t *testing.T) (here *changestream.Manager, hereStore, bStore *logstore.MemStore, o *fakeOwners, p *fakePeers) {
	t.Helper()
	hereStore, bStore = newStore(t), newStore(t)
	for _, st := range []*logstore.MemStore{hereStore, bStore} {
		for _, name := range []string{"t", "orphan"} {
			_, err := st.CreateTopic(ctx, name, 2, logstore.TopicConfig{RetentionMs: -1})
			require.NoError(t, err)
		}
	}
	o = &fakeOwners{}
	bm, err := changestream.New(bStore, bStore, changestream.Config{}) // serves what it is asked
	require.NoError(t, err)
	p = &fakePeers{managers: map[string]*changestream.Manager{"B": bm}}
	here, err = changestream.New(hereStore, hereStore, changestream.Config{Owners: o, Peers: p, MaxStreams: 1})
	require.NoError(t, err)
	return here, hereStore, bStore, o, p
}

func appendTo(t *testing.T, s logstore.Store, part int32, kvs ...string) {
	t.Helper()
	var recs []logstore.Record
	for i := 0; i+1 < len(kvs); i += 2 {
		recs = append(recs, logstore.Record{Key: []byte(kvs[i]), Value: []byte(kvs[i+1])})
	}
	_, err := s.Append(ctx, "t", part, recs)
	require.NoError(t, err)
}

func TestStreamOfAPartitionServedElsewhereComesFromItsOwner(t *testing.T) {
	here, hereStore, bStore, o, p := routed(t)
	appendTo(t, bStore, 1, "k", "at B")
	appendTo(t, hereStore, 1, "k", "here", "k2", "here too")

	c := start(t, here, changestream.Request{Topic: "t", Partition: 1})
	assert.Equal(t, []string{"marker(0..0, DISK)", "mut(k@0)"}, c.take(t, 2), "the owner's events, started when the owner started")
	appendTo(t, bStore, 1, "j", "later")
	assert.Equal(t, []string{"marker(1..1, MEMORY)", "mut(j@1)"}, c.take(t, 2), "the owner's live tail")
	assert.Equal(t, []string{"B"}, p.calls)
	assert.Zero(t, here.Open(), "the owner runs the call: this Manager's limits do not count it")

	local := start(t, here, changestream.Request{Topic: "t", Partition: 0})
	assert.Equal(t, int64(1), here.Open(), "a partition served here is streamed here")
	local.cancel()
	assert.Len(t, p.calls, 1)
	o.mu.Lock()
	assert.Zero(t, o.holds, "a stream releases its hold at once")
	o.mu.Unlock()
}

func TestStreamErrorsAreTheOwners(t *testing.T) {
	here, _, bStore, _, p := routed(t)
	appendTo(t, bStore, 1, "k", "v", "k", "w", "k", "x")
	_, err := bStore.DeleteRecordsBefore(ctx, "t", 1, 2) // B's history starts at 2
	require.NoError(t, err)

	err = here.Stream(ctx, changestream.Request{Topic: "t", Partition: 1, StartOffset: 1}, changestream.SendFunc(func(*changestream.Event) error { return nil }))
	var e *apierr.Error
	require.True(t, errors.As(err, &e), "%v", err)
	assert.Equal(t, apierr.RollbackRequired, e.Reason)
	assert.Equal(t, changestream.CauseHistoryPurged, e.Metadata["cause"], "the owner's metadata")
	assert.Equal(t, []string{"B"}, p.calls)

	err = here.Stream(ctx, changestream.Request{Topic: "t", Partition: -1}, changestream.SendFunc(func(*changestream.Event) error { return nil }))
	assert.Equal(t, apierr.InvalidRequest, apierr.ReasonOf(err), "the request's own fields are checked here")
	assert.Len(t, p.calls, 1)
}

func TestStreamOfAPartitionWithoutOwner(t *testing.T) {
	here, _, _, _, p := routed(t)
	err := here.Stream(ctx, changestream.Request{Topic: "orphan"}, changestream.SendFunc(func(*changestream.Event) error { return nil }))
	assert.Equal(t, apierr.NotOwner, apierr.ReasonOf(err))

	err = here.Stream(broker.WithForwardedBy(ctx, "C"), changestream.Request{Topic: "t", Partition: 1},
		changestream.SendFunc(func(*changestream.Event) error { return nil }))
	assert.Equal(t, apierr.NotOwner, apierr.ReasonOf(err), "a forwarded stream is never forwarded again")
	assert.Empty(t, p.calls)
}

func TestOwnersWithoutPeersIsRefused(t *testing.T) {
	st := newStore(t)
	_, err := changestream.New(st, st, changestream.Config{Owners: &fakeOwners{}})
	assert.Error(t, err)
}
