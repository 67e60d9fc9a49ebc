package jsstate_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsstate"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

func openOwners(t *testing.T, m medium) *jsstate.Store {
	t.Helper()
	s, err := jsstate.Open(context.Background(), m.nc, jsstate.Options{Prefix: m.prefix, Replicas: 3, Scoped: true, PartitionOwners: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// bucket is the medium's share state bucket, for reading its keys as
// they are.
func bucket(t *testing.T, m medium) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(m.nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(context.Background(), sljs.ShareBucket(m.prefix))
	require.NoError(t, err)
	return kv
}

func gKey(g string) string { return "g." + sljs.HexKey(g) }

func pKey(g, tid, part string) string {
	return "p." + sljs.HexKey(g) + "." + sljs.HexKey(tid) + "." + part
}

// keys lists the bucket's snapshot keys, sorted: every key but "sync",
// which each read writes (package documentation, "Reads").
func keys(t *testing.T, m medium) []string {
	t.Helper()
	ks, err := bucket(t, m).Keys(context.Background())
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	require.NoError(t, err)
	ks = slices.DeleteFunc(ks, func(k string) bool { return k == "sync" })
	slices.Sort(ks)
	return ks
}

// onlyPartition is gs with only the share-partition tid/part, and no
// config or epoch: what AdoptPartition returns of a group.
func onlyPartition(gs sharestate.GroupState, tid string, part int32) sharestate.GroupState {
	out := sharestate.GroupState{ID: gs.ID}
	for _, p := range gs.Partitions {
		if p.TopicID == tid && p.Partition == part {
			out.Partitions = append(out.Partitions, p)
		}
	}
	return out
}

// AdoptPartition returns exactly the state an unscoped open recovers of
// that partition in every group — an undecodable snapshot offline as
// there — and nothing of other partitions, those whose key starts like
// its own included; AdoptGroup returns a group's key only.
func TestAdoptPartitionReadsOnlyItsPartition(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	u := openStarted(t, m)
	dlq := "dlq"
	write(t, u,
		sharestate.Entry{Kind: sharestate.KindGroup, Group: "g", GroupEpoch: 3, Config: sharestate.GroupConfig{DeadLetterTopic: &dlq}},
		partDelta("g", "tid", 0, 5, ack(7, 9)),
		partDelta("g", "tid", 1, 2),
		partDelta("g", "tid", 10, 2), // key ends ".10", not ".0"
		partDelta("g", "tid2", 0, 3), // hex("tid2") starts with hex("tid")
		partDelta("g", "other", 0, 1),
		groupEntry("g2", 1), partDelta("g2", "tid", 0, 50),
		groupEntry("h", 1), partDelta("h", "tid", 0, 60),
		groupEntry("x", 1), partDelta("x", "other", 0, 70)) // no share-partition of tid/0
	require.NoError(t, u.Close())
	_, err := bucket(t, m).Put(context.Background(), pKey("h", "tid", "0"), []byte("{not json"))
	require.NoError(t, err)

	rec := recoveredGroups(t, m)
	want := []sharestate.GroupState{onlyPartition(rec["g"], "tid", 0), onlyPartition(rec["g2"], "tid", 0), onlyPartition(rec["h"], "tid", 0)}
	require.Equal(t, int64(5), want[0].Partitions[0].SPSO)
	require.Contains(t, want[2].Partitions[0].Offline, "undecodable")

	s := openOwners(t, m)
	got, err := s.AdoptPartition(context.Background(), "tid", 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
	none, err := s.AdoptPartition(context.Background(), "tid", 5)
	require.NoError(t, err)
	require.Empty(t, none, "a partition without keys")

	gs, err := s.AdoptGroup(context.Background(), "g")
	require.NoError(t, err)
	require.Equal(t, &sharestate.GroupState{ID: "g", GroupEpoch: 3, Config: sharestate.GroupConfig{DeadLetterTopic: &dlq}}, gs,
		"the group's key, none of its share-partitions")

	// The adopted revisions are this store's: its next write of tid/0
	// updates the snapshot instead of failing as a create would.
	write(t, s, partDelta("g", "tid", 0, 10))
	require.Equal(t, int64(10), onlyPartition(recoveredGroups(t, m)["g"], "tid", 0).Partitions[0].SPSO)
}

// A group's coordinator and the owner of one of its partitions write side
// by side: the coordinator's config writes and the owner's share-partition
// writes all succeed, and neither touches the other's keys — the owner's
// rounds write no group key, not even for a group with none.
func TestPartitionOwnerBesideCoordinator(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	coord, owner := openOwners(t, m), openOwners(t, m)
	require.NoError(t, coord.Start(func() error { return nil }))
	require.NoError(t, owner.Start(func() error { return nil }))
	_, err := coord.AdoptGroup(context.Background(), "g")
	require.NoError(t, err)
	got, err := owner.AdoptPartition(context.Background(), "tid", 0)
	require.NoError(t, err)
	require.Empty(t, got)

	dlq := "dlq"
	write(t, coord, sharestate.Entry{Kind: sharestate.KindGroup, Group: "g", GroupEpoch: 1, Config: sharestate.GroupConfig{DeadLetterTopic: &dlq}})
	kv := bucket(t, m)
	before, err := kv.Get(context.Background(), gKey("g"))
	require.NoError(t, err)
	for i := range int64(5) {
		write(t, owner, partDelta("g", "tid", 0, 0, ack(0, i)))
	}
	write(t, owner, partDelta("h", "tid", 0, 0, ack(0, 0))) // h has no group key
	after, err := kv.Get(context.Background(), gKey("g"))
	require.NoError(t, err)
	require.Equal(t, before.Revision(), after.Revision(), "the owner's rounds do not write the group key")
	_, err = kv.Get(context.Background(), gKey("h"))
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "nor create one")

	limit := int32(7)
	write(t, coord, sharestate.Entry{Kind: sharestate.KindGroup, Group: "g", GroupEpoch: 2,
		Config: sharestate.GroupConfig{DeadLetterTopic: &dlq, DeliveryCountLimit: &limit}})
	write(t, owner, partDelta("g", "tid", 0, 5, ack(5, 5)))

	g := recoveredGroups(t, m)["g"]
	require.Equal(t, int32(2), g.GroupEpoch)
	require.Equal(t, sharestate.GroupConfig{DeadLetterTopic: &dlq, DeliveryCountLimit: &limit}, g.Config, "the coordinator's config")
	require.Len(t, g.Partitions, 1)
	require.Equal(t, int64(6), g.Partitions[0].SPSO, "the owner's acknowledgements")
	require.NoError(t, coord.DropGroup("g"))
	require.NoError(t, owner.DropPartition("tid", 0))
}

// Handover: A owns tid/0 and tid/1, drops tid/0; B adopts it and sees all
// A wrote of it, in every group; a late write of A to tid/0 is fenced
// (ErrConflict) and changes nothing, and DropPartition reports it; A's
// other partition stays A's.
func TestPartitionHandover(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	a := openOwners(t, m)
	require.NoError(t, a.Start(func() error { return nil }))
	for _, p := range []int32{0, 1} {
		_, err := a.AdoptPartition(context.Background(), "tid", p)
		require.NoError(t, err)
	}
	for i := range int64(20) {
		write(t, a, partDelta("g", "tid", 0, 0, ack(0, i)), partDelta("h", "tid", 0, 0, ack(0, 2*i)))
	}
	write(t, a, partDelta("g", "tid", 1, 3, ack(5, 5)))
	require.NoError(t, a.DropPartition("tid", 0))

	b := openOwners(t, m)
	require.NoError(t, b.Start(func() error { return nil }))
	got, err := b.AdoptPartition(context.Background(), "tid", 0)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "g", got[0].ID)
	require.Equal(t, int64(20), got[0].Partitions[0].SPSO, "every acknowledgement A waited for")
	require.Equal(t, "h", got[1].ID)
	require.Equal(t, int64(39), got[1].Partitions[0].SPSO)
	write(t, b, partDelta("g", "tid", 0, 20, ack(20, 29)))

	before := keys(t, m)
	for _, e := range []sharestate.Entry{
		partDelta("g", "tid", 0, 20, ack(20, 99)), // a key B holds and wrote
		partDelta("h", "tid", 0, 39, ack(39, 99)), // one B holds and did not write
	} {
		tk, err := a.Write(e)
		require.NoError(t, err)
		err = a.Wait(tk)
		require.ErrorIs(t, err, jsstate.ErrConflict, "%s", e.Group)
		require.True(t, a.Lost(tk))
	}
	require.ErrorIs(t, a.DropPartition("tid", 0), jsstate.ErrConflict, "DropPartition reports the partition's lost entries")
	require.NoError(t, a.DropPartition("tid", 0), "the loss was reported once")
	require.Equal(t, before, keys(t, m))

	rec := recoveredGroups(t, m)
	require.Equal(t, int64(30), onlyPartition(rec["g"], "tid", 0).Partitions[0].SPSO, "B's write, not A's")
	require.Equal(t, int64(39), onlyPartition(rec["h"], "tid", 0).Partitions[0].SPSO)

	// Each still holds its own: B tid/0, A tid/1.
	write(t, b, partDelta("g", "tid", 0, 30, ack(30, 30)))
	write(t, a, partDelta("g", "tid", 1, 3, ack(3, 4)))
	require.Equal(t, int64(6), onlyPartition(recoveredGroups(t, m)["g"], "tid", 1).Partitions[0].SPSO, "3..4 acknowledged next to 5")
	require.NoError(t, a.DropPartition("tid", 1))
	require.NoError(t, b.DropPartition("tid", 0))
}

// Adopting a partition fences its previous owner even when that one never
// dropped it: the new owner reads everything the old one confirmed, and
// the old one's next write is refused.
func TestAdoptPartitionFencesAnOwnerThatDidNotDrop(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	a, b := openOwners(t, m), openOwners(t, m)
	_, err := a.AdoptPartition(context.Background(), "tid", 0)
	require.NoError(t, err)
	write(t, a, partDelta("g", "tid", 0, 0, ack(0, 4)), partDelta("h", "tid", 0, 0, ack(0, 1)))

	got, err := b.AdoptPartition(context.Background(), "tid", 0) // a did not DropPartition
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, int64(5), got[0].Partitions[0].SPSO, "what a confirmed is read")
	require.Equal(t, int64(2), got[1].Partitions[0].SPSO)

	for _, g := range []string{"g", "h"} {
		tk, err := a.Write(partDelta(g, "tid", 0, 5, ack(5, 9)))
		require.NoError(t, err)
		require.ErrorIs(t, a.Wait(tk), jsstate.ErrConflict, "a late write of the old owner is refused")
	}
	write(t, b, partDelta("g", "tid", 0, 5, ack(5, 6)))
	rec := recoveredGroups(t, m)
	require.Equal(t, int64(7), rec["g"].Partitions[0].SPSO)
	require.Equal(t, int64(2), rec["h"].Partitions[0].SPSO)
}

// DropPartition reports the losses of its own partition's entries only,
// and DropGroup those of its group's group-level entries only.
func TestDropPartitionReportsItsPartitionsLoss(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	s := openOwners(t, m)
	require.NoError(t, s.Start(func() error { return nil }))
	for _, g := range []string{"g", "h"} {
		_, err := s.AdoptGroup(context.Background(), g)
		require.NoError(t, err)
		write(t, s, groupEntry(g, 1))
	}
	for _, p := range []int32{0, 1} {
		_, err := s.AdoptPartition(context.Background(), "tid", p)
		require.NoError(t, err)
	}
	m.SetFailing(true)
	for _, e := range []sharestate.Entry{partDelta("g", "tid", 1, 1), groupEntry("h", 2)} {
		tk, err := s.Write(e)
		require.NoError(t, err)
		require.ErrorIs(t, s.Wait(tk), jsstate.ErrStorage)
	}
	m.SetFailing(false)
	write(t, s, partDelta("g", "tid", 0, 1), partDelta("h", "tid", 0, 1))

	require.NoError(t, s.DropPartition("tid", 0))
	require.NoError(t, s.DropGroup("g"), "a share-partition entry's loss is its partition's")
	require.ErrorIs(t, s.DropPartition("tid", 1), jsstate.ErrStorage)
	require.ErrorIs(t, s.DropGroup("h"), jsstate.ErrStorage)
}

// Start of a partition-owners store deletes only the keys it holds: the
// adopted groups' keys and the adopted partitions' share-partition keys,
// not a key it wrote of a partition it did not adopt.
func TestPartitionOwnersStartDeletesOnlyHeldKeys(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	u := openStarted(t, m)
	write(t, u, groupEntry("g", 1), partDelta("g", "tid", 0, 1), partDelta("g", "tid", 1, 2),
		groupEntry("h", 1), partDelta("h", "tid", 0, 3))
	require.NoError(t, u.Close())

	s := openOwners(t, m)
	_, err := s.AdoptGroup(context.Background(), "g")
	require.NoError(t, err)
	_, err = s.AdoptPartition(context.Background(), "tid", 0)
	require.NoError(t, err)
	// A partition not adopted: its key is created, not held — a second
	// write is a create again, refused.
	write(t, s, partDelta("x", "tid", 5, 1))
	tk, err := s.Write(partDelta("x", "tid", 5, 2))
	require.NoError(t, err)
	require.ErrorIs(t, s.Wait(tk), jsstate.ErrConflict)
	require.NoError(t, s.Start(func() error { return nil }))
	require.Equal(t, []string{gKey("h"), pKey("g", "tid", "1"), pKey("x", "tid", "5")}, keys(t, m))
}

// The partition-owners API's misuses fail, and a failed adopt leaves the
// partition adoptable.
func TestAdoptPartitionRules(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	_, err := jsstate.Open(context.Background(), m.nc, jsstate.Options{Prefix: m.prefix, Replicas: 3, PartitionOwners: true})
	require.ErrorContains(t, err, "Scoped")

	sc := openScoped(t, m)
	_, err = sc.AdoptPartition(context.Background(), "tid", 0)
	require.ErrorContains(t, err, "PartitionOwners")
	require.ErrorContains(t, sc.DropPartition("tid", 0), "PartitionOwners")

	s := openOwners(t, m)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.AdoptPartition(cancelled, "tid", 0)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.AdoptPartition(context.Background(), "tid", 0)
	require.NoError(t, err, "a failed adopt leaves the partition adoptable")
	_, err = s.AdoptPartition(context.Background(), "tid", 0)
	require.ErrorContains(t, err, "adopted already")
	_, err = s.AdoptPartition(context.Background(), "tid", 1)
	require.NoError(t, err, "another partition of the topic")
	require.NoError(t, s.DropPartition("tid", 0))
	_, err = s.AdoptPartition(context.Background(), "tid", 0)
	require.NoError(t, err, "adoptable again after DropPartition")

	require.NoError(t, s.Close())
	_, err = s.AdoptPartition(context.Background(), "tid", 2)
	require.ErrorIs(t, err, sharestate.ErrClosed)
	require.ErrorIs(t, s.DropPartition("tid", 0), sharestate.ErrClosed)
}

// A write refused because another instance wrote the key is reported
// through Options.OnFenced, for an adopted partition — here a key created
// behind the owner's back after its read (a previous owner's late write) —
// and for an adopted group's key that another coordinator took; a refused
// key the store does not hold is not.
func TestOnFencedReportsRefusedWrites(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	fenced := make(chan jsstate.Fenced, 10)
	a, err := jsstate.Open(context.Background(), m.nc, jsstate.Options{Prefix: m.prefix, Replicas: 3, Scoped: true, PartitionOwners: true,
		OnFenced: func(f jsstate.Fenced) { fenced <- f }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	late := openOwners(t, m)
	_, err = a.AdoptPartition(context.Background(), "tid", 0)
	require.NoError(t, err)
	_, err = a.AdoptGroup(context.Background(), "g")
	require.NoError(t, err)

	write(t, late, partDelta("g", "tid", 0, 0, ack(0, 4))) // created after a's read: a does not know it
	tk, err := a.Write(partDelta("g", "tid", 0, 0, ack(0, 1)))
	require.NoError(t, err)
	require.ErrorIs(t, a.Wait(tk), jsstate.ErrConflict)
	select {
	case f := <-fenced:
		require.Equal(t, jsstate.Fenced{Group: "g", TopicID: "tid", Partition: 0}, f)
	case <-time.After(5 * time.Second):
		t.Fatal("the refused write of an adopted partition was not reported")
	}

	_, err = late.AdoptGroup(context.Background(), "g") // another coordinator took the group: a did not notice
	require.NoError(t, err)
	tk, err = a.Write(sharestate.Entry{Kind: sharestate.KindGroup, Group: "g", GroupEpoch: 1})
	require.NoError(t, err)
	require.ErrorIs(t, a.Wait(tk), jsstate.ErrConflict)
	select {
	case f := <-fenced:
		require.Equal(t, jsstate.Fenced{Group: "g", GroupKey: true}, f)
	case <-time.After(5 * time.Second):
		t.Fatal("the refused write of an adopted group's key was not reported")
	}

	// A partition a does not hold: refused, not reported.
	write(t, late, partDelta("g", "tid", 1, 0, ack(0, 4)))
	tk, err = a.Write(partDelta("g", "tid", 1, 0, ack(0, 1)))
	require.NoError(t, err)
	require.ErrorIs(t, a.Wait(tk), jsstate.ErrConflict)
	select {
	case f := <-fenced:
		t.Fatalf("reported %v, which a does not hold", f)
	case <-time.After(300 * time.Millisecond):
	}
}
