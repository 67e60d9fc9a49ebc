package sharegroup

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// durableGroup is group id's state as st holds it durably (what another
// instance's scoped store would read).
func durableGroup(t *testing.T, st sharestate.Store, id string) *sharestate.GroupState {
	t.Helper()
	rec := sharestate.OpenMem(st.(*sharestate.Mem).Medium().Crash()).Recovered()
	for i := range rec.Groups {
		if rec.Groups[i].ID == id {
			return &rec.Groups[i]
		}
	}
	return nil
}

// A group released by one manager and adopted by another keeps every
// acknowledgement, its delivery counts and its config; the releasing
// manager writes nothing and forgets the group and its sessions.
func TestReleaseAndAdoptMoveAGroup(t *testing.T) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	stA, stB := sharestate.NewMem(), sharestate.NewMem()
	a, b := newEnvState(t, store, stA), newEnvState(t, store, stB)
	a.topic("t", 1)
	x := tp("t", 0)
	a.update(GroupConfig{DeliveryCountLimit: i32(3)})
	a.open("a", x)
	a.produce("t", 0, 100, 10)
	require.Equal(t, []AcquiredRange{rng(0, 99, 1)}, acquired(t, a.fetch("a", FetchRequest{}), x))
	resp := a.ack("a", ackEntry(x, batch(0, 49, AckAccept), batch(50, 59, AckRelease)))
	require.Equal(t, apierr.None, resp.Partitions[0].ErrorCode)

	before := durableGroup(t, stA, testGroup)
	require.NotNil(t, before)
	a.m.ReleaseGroup(testGroup)
	require.Equal(t, before, durableGroup(t, stA, testGroup), "releasing writes nothing")
	require.Nil(t, a.m.groupFor(testGroup, false))
	_, err := a.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "a", Epoch: a.next("a"), Partitions: entries(x)})
	require.Equal(t, apierr.ShareSessionNotFound, reqErr(err).Reason, "the session ended with the release")
	a.m.ReleaseGroup(testGroup) // twice: nothing to do

	require.NoError(t, b.m.AdoptGroup(before))
	require.Error(t, b.m.AdoptGroup(before), "adopting a live group")
	cfg, err := b.m.GetConfig(context.Background(), testGroup)
	require.NoError(t, err)
	require.Equal(t, int32(3), *cfg.DeliveryCountLimit)
	// As after a crash: 60..99 were never acknowledged nor released, so
	// the durable state holds no count for them.
	require.Equal(t, "spso=50 [50-59 AVAILABLE(1)]", b.state(x))
	require.Equal(t, []AcquiredRange{rng(50, 59, 2), rng(60, 99, 1)}, acquired(t, b.open("b", x), x))
	require.NoError(t, b.m.AdoptGroup(nil))
}

// Share-partitions of a topic deleted while nobody coordinated the group
// are dropped at adoption, and their deletion is written.
func TestAdoptDropsDeletedTopics(t *testing.T) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	stA, stB := sharestate.NewMem(), &recordingState{Store: sharestate.NewMem()}
	a, b := newEnvState(t, store, stA), newEnvState(t, store, stB)
	a.topic("t", 1)
	a.topic("u", 1)
	x, y := tp("t", 0), tp("u", 0)
	a.open("a", x, y)
	a.produce("t", 0, 10, 10)
	a.produce("u", 0, 10, 10)
	a.fetch("a", FetchRequest{})
	a.m.ReleaseGroup(testGroup)
	g := durableGroup(t, stA, testGroup)
	require.Len(t, g.Partitions, 2)
	require.NoError(t, store.DeleteTopic(context.Background(), "u"))

	require.NoError(t, b.m.AdoptGroup(g))
	require.Len(t, b.m.groupFor(testGroup, false).partitions(), 1)
	stB.mu.Lock()
	defer stB.mu.Unlock()
	require.Len(t, stB.written, 1)
	require.Equal(t, sharestate.KindPartDelete, stB.written[0].Kind)
	require.Equal(t, "u", stB.written[0].Topic)
}

// recordingState records the entries written after Start.
type recordingState struct {
	sharestate.Store
	mu      sync.Mutex
	started bool
	written []sharestate.Entry
}

func (r *recordingState) Start(snap func() error) error {
	err := r.Store.Start(snap)
	r.mu.Lock()
	r.started = true
	r.mu.Unlock()
	return err
}

func (r *recordingState) Write(e sharestate.Entry) (uint64, error) {
	r.mu.Lock()
	if r.started {
		r.written = append(r.written, e)
	}
	r.mu.Unlock()
	return r.Store.Write(e)
}
