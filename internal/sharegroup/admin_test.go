package sharegroup

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

func (e *env) offsets(topics ...TopicPartitions) []TopicOffsets {
	e.t.Helper()
	out, err := e.m.DescribeOffsets(context.Background(), testGroup, topics)
	require.NoError(e.t, err)
	return out
}

func po(p int32, start, lag int64) PartitionOffsets {
	return PartitionOffsets{Partition: p, StartOffset: start, Lag: lag}
}

func (e *env) alter(topic string, offs ...PartitionStartOffset) []TopicPartitionResults {
	e.t.Helper()
	out, err := e.m.AlterOffsets(context.Background(), testGroup, []TopicStartOffsets{{Topic: topic, Partitions: offs}})
	require.NoError(e.t, err)
	return out
}

// ListShareGroups: sorted, filtered by state.
func TestListGroups(t *testing.T) {
	e := newEnv(t, nil)
	for _, g := range []string{"c", "a", "b"} {
		_, err := e.m.UpdateConfig(context.Background(), g, GroupConfig{})
		require.NoError(t, err)
	}
	_, err := e.m.Heartbeat(context.Background(), HeartbeatRequest{GroupID: "b", MemberID: "m", SubscribedTopicNames: []string{"t"}})
	require.NoError(t, err)
	tests := []struct {
		filter GroupState
		want   []GroupListing
	}{
		{StateUnknown, []GroupListing{{"a", StateEmpty}, {"b", StateStable}, {"c", StateEmpty}}},
		{StateEmpty, []GroupListing{{"a", StateEmpty}, {"c", StateEmpty}}},
		{StateStable, []GroupListing{{"b", StateStable}}},
		{StateDead, nil},
	}
	for _, tt := range tests {
		t.Run(tt.filter.String(), func(t *testing.T) {
			got, err := e.m.ListGroups(context.Background(), tt.filter)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// DescribeShareGroupOffsets: start offset = SPSO, lag = high watermark
// - SPSO - terminal offsets >= SPSO; -1/-1 uninitialised; unknown topics
// and partitions flagged.
func TestDescribeOffsets(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.m.DescribeOffsets(context.Background(), "nope", nil)
	requireReason(t, err, apierr.GroupIDNotFound)

	e.topic("t", 2)
	e.topic("u", 1)
	x := tp("t", 0)
	e.produce("t", 0, 10, 1)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	assert.Empty(t, e.offsets(), "no share state yet")

	e.open("m", x)
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 2, AckAccept), batch(5, 6, AckReject))).Partitions[0].ErrorCode)
	// SPSO 3; 5 and 6 terminal: lag = 10 - 3 - 2 = 5 (3, 4, 7, 8, 9 still to deliver or settle).
	assert.Equal(t, []TopicOffsets{{Topic: "t", Partitions: []PartitionOffsets{po(0, 3, 5), po(1, -1, -1)}}}, e.offsets())
	e.produce("t", 0, 4, 1)
	assert.Equal(t, []TopicOffsets{{Topic: "t", Partitions: []PartitionOffsets{po(0, 3, 9)}}}, e.offsets(tps("t", 0)))

	unknown := func(p int32) PartitionOffsets {
		return PartitionOffsets{Partition: p, StartOffset: -1, Lag: -1, ErrorCode: apierr.UnknownTopicOrPartition}
	}
	got := e.offsets(tps("u"), tps("t", 1, 7, -1), tps("nope", 0), tps("gone"))
	for i := range got {
		for j := range got[i].Partitions {
			got[i].Partitions[j].ErrorMessage = ""
		}
	}
	assert.Equal(t, []TopicOffsets{
		{Topic: "u", Partitions: []PartitionOffsets{po(0, -1, -1)}},
		{Topic: "t", Partitions: []PartitionOffsets{po(1, -1, -1), unknown(7), unknown(-1)}},
		{Topic: "nope", Partitions: []PartitionOffsets{unknown(0)}},
		{Topic: "gone", Partitions: []PartitionOffsets{unknown(-1)}},
	}, got)

	// Everything settled: lag 0.
	e.fetch("m", FetchRequest{})
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(3, 4, AckAccept), batch(7, 13, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, []TopicOffsets{{Topic: "t", Partitions: []PartitionOffsets{po(0, 14, 0)}}}, e.offsets(tps("t", 0)))

	// Share state goes with its topic (TopicDeleted): the admin view too.
	id := e.sp(x).topicID
	require.NoError(t, e.store.DeleteTopic(context.Background(), "t"))
	e.m.TopicDeleted(id)
	assert.Empty(t, e.offsets())
	e.topic("t", 1)
	assert.Equal(t, []TopicOffsets{{Topic: "t", Partitions: []PartitionOffsets{po(0, -1, -1)}}}, e.offsets(tps("t")),
		"a re-created topic starts with no share state")
}

// AlterShareGroupOffsets.
func TestAlterOffsets(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 2)
	x := tp("t", 0)
	e.produce("t", 0, 10, 1)
	_, err := e.store.DeleteRecordsBefore(context.Background(), "t", 0, 2)
	require.NoError(t, err)

	// Creates the group.
	res := e.alter("t", PartitionStartOffset{0, 4}, PartitionStartOffset{1, 0}, PartitionStartOffset{0 + 5, 0})
	assert.Equal(t, apierr.None, res[0].Partitions[0].ErrorCode)
	assert.Equal(t, apierr.None, res[0].Partitions[1].ErrorCode)
	assert.Equal(t, apierr.UnknownTopicOrPartition, res[0].Partitions[2].ErrorCode)
	assert.Equal(t, []TopicOffsets{{Topic: "t", Partitions: []PartitionOffsets{po(0, 4, 6), po(1, 0, 0)}}}, e.offsets())

	// Out of range: below the log start, above the high watermark; bounds inclusive.
	res = e.alter("t", PartitionStartOffset{0, 1}, PartitionStartOffset{1, 1})
	assert.Equal(t, apierr.OffsetOutOfRange, res[0].Partitions[0].ErrorCode)
	assert.Contains(t, res[0].Partitions[0].ErrorMessage, "[2, 10]")
	assert.Equal(t, apierr.OffsetOutOfRange, res[0].Partitions[1].ErrorCode)
	res = e.alter("t", PartitionStartOffset{0, 10})
	assert.Equal(t, apierr.None, res[0].Partitions[0].ErrorCode)
	res = e.alter("nope", PartitionStartOffset{0, 0})
	assert.Equal(t, apierr.UnknownTopicOrPartition, res[0].Partitions[0].ErrorCode)

	_, err = e.m.AlterOffsets(context.Background(), testGroup, []TopicStartOffsets{{Topic: "t", Partitions: []PartitionStartOffset{{0, 2}, {0, 3}}}})
	requireReason(t, err, apierr.InvalidRequest)
	_, err = e.m.AlterOffsets(context.Background(), "", nil)
	requireReason(t, err, apierr.InvalidRequest)

	// The share-partition restarts with no in-flight state: records
	// acquired by an open session are its no more.
	e.alter("t", PartitionStartOffset{0, 2})
	e.open("m", x)
	assert.Equal(t, "spso=2 [2-9 ACQUIRED(1)]", e.state(x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(2, 3, AckRelease))).Partitions[0].ErrorCode)
	e.alter("t", PartitionStartOffset{0, 5})
	assert.Equal(t, "spso=5", e.state(x), "counts reset")
	assert.Equal(t, apierr.InvalidRecordState, e.ack("m", ackEntry(x, batch(6, 6, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(4, 4, AckAccept))).Partitions[0].ErrorCode, "below SPSO: no effect")
	assert.Equal(t, []AcquiredRange{rng(5, 9, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))

	// Members present: NON_EMPTY_GROUP, nothing changes.
	e.mustHB("a", 0, "t")
	_, err = e.m.AlterOffsets(context.Background(), testGroup, []TopicStartOffsets{{Topic: "t", Partitions: []PartitionStartOffset{{0, 2}}}})
	info := requireReason(t, err, apierr.NonEmptyGroup)
	assert.Equal(t, "1", info.Metadata["members"])
	assert.Equal(t, "spso=5 [5-9 ACQUIRED(1)]", e.state(x))

	// Durable: survives a restart.
	e.mustHB("a", -1)
	e.alter("t", PartitionStartOffset{0, 7})
	require.NoError(t, e.m.Close())
	e2 := newEnvOn(t, e.store, e.opts.Dir, nil)
	assert.Equal(t, []TopicOffsets{{Topic: "t", Partitions: []PartitionOffsets{po(0, 7, 3), po(1, 0, 0)}}}, e2.offsets())
}

// DeleteShareGroupOffsets.
func TestDeleteOffsets(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.m.DeleteOffsets(context.Background(), "nope", []string{"t"})
	requireReason(t, err, apierr.GroupIDNotFound)
	e.topic("t", 2)
	e.topic("u", 1)
	x := tp("t", 0)
	e.produce("t", 0, 10, 1)
	e.alter("t", PartitionStartOffset{0, 4}, PartitionStartOffset{1, 0})
	e.open("m", x)

	_, err = e.m.DeleteOffsets(context.Background(), testGroup, []string{"t", "t"})
	requireReason(t, err, apierr.InvalidRequest)
	e.mustHB("a", 0, "u")
	_, err = e.m.DeleteOffsets(context.Background(), testGroup, []string{"t"})
	requireReason(t, err, apierr.NonEmptyGroup)
	e.mustHB("a", -1)

	res, err := e.m.DeleteOffsets(context.Background(), testGroup, []string{"t", "u", "nope"})
	require.NoError(t, err)
	require.Len(t, res, 3)
	assert.Equal(t, TopicResult{Topic: "t"}, res[0])
	assert.Equal(t, apierr.None, res[1].ErrorCode, "u was initialised by a's assignment")
	assert.Equal(t, apierr.UnknownTopicOrPartition, res[2].ErrorCode)
	res, err = e.m.DeleteOffsets(context.Background(), testGroup, []string{"t"})
	require.NoError(t, err)
	assert.Equal(t, apierr.UnknownTopicOrPartition, res[0].ErrorCode, "no share state left")
	assert.Empty(t, e.offsets())
	assert.Equal(t, []TopicOffsets{{Topic: "t", Partitions: []PartitionOffsets{po(0, -1, -1), po(1, -1, -1)}}}, e.offsets(tps("t")))

	// Uninitialised again: the next fetch initialises from auto_offset_reset.
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	assert.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))

	// Durable.
	e.alter("t", PartitionStartOffset{1, 0})
	_, err = e.m.DeleteOffsets(context.Background(), testGroup, []string{"t"})
	require.NoError(t, err)
	crashed := copyDir(t, e.opts.Dir)
	e2 := newEnvOn(t, e.store, crashed, nil)
	assert.Empty(t, e2.offsets())
}

// DeleteShareGroup.
func TestDeleteGroup(t *testing.T) {
	e := newEnv(t, nil)
	requireReason(t, e.m.DeleteGroup(context.Background(), "nope"), apierr.GroupIDNotFound)
	e.topic("t", 1)
	x := tp("t", 0)
	e.produce("t", 0, 10, 1)
	e.update(GroupConfig{AutoOffsetReset: str("earliest"), DeliveryCountLimit: i32(3)})
	e.open("m", x)
	e.mustHB("a", 0, "t")
	err := e.m.DeleteGroup(context.Background(), testGroup)
	requireReason(t, err, apierr.NonEmptyGroup)
	e.mustHB("a", -1)

	require.NoError(t, e.m.DeleteGroup(context.Background(), testGroup))
	// Gone: config, state and sessions (whose records are released).
	_, err = e.m.GetConfig(context.Background(), testGroup)
	requireReason(t, err, apierr.GroupIDNotFound)
	_, err = e.m.DescribeGroup(context.Background(), testGroup)
	requireReason(t, err, apierr.GroupIDNotFound)
	groups, _ := e.m.ListGroups(context.Background(), StateUnknown)
	assert.Empty(t, groups)
	_, err = e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 1})
	requireReason(t, err, apierr.ShareSessionNotFound)
	assert.Equal(t, 0, e.m.sessions.Len())

	// The ID may be reused: a new group with the defaults.
	cfg, err := e.m.UpdateConfig(context.Background(), testGroup, GroupConfig{})
	require.NoError(t, err)
	assert.Equal(t, "latest", *cfg.AutoOffsetReset)
	assert.Equal(t, int32(5), *cfg.DeliveryCountLimit)
	require.NoError(t, e.m.DeleteGroup(context.Background(), testGroup))

	// Durable: not back after a crash.
	crashed := copyDir(t, e.opts.Dir)
	e2 := newEnvOn(t, e.store, crashed, nil)
	groups, _ = e2.m.ListGroups(context.Background(), StateUnknown)
	assert.Empty(t, groups)
}

// A group is DEAD while its deletion is being made durable; a failed
// deletion changes nothing.
func TestDeleteGroupDeadAndFailure(t *testing.T) {
	var f faultHooks
	block := make(chan struct{})
	var blocking sync.Mutex
	blockNext := false
	hooks := f.hooks()
	sync0 := hooks.Sync
	entered := make(chan struct{}, 1)
	hooks.Sync = func(file *os.File) error {
		blocking.Lock()
		b := blockNext
		blockNext = false
		blocking.Unlock()
		if b {
			entered <- struct{}{}
			<-block
		}
		return sync0(file)
	}
	e := newEnv(t, func(o *testOpts) { o.testHooks = hooks })
	e.topic("t", 1)
	e.alter("t", PartitionStartOffset{0, 0})

	blocking.Lock()
	blockNext = true
	blocking.Unlock()
	done := make(chan error)
	go func() { done <- e.m.DeleteGroup(context.Background(), testGroup) }()
	<-entered
	groups, err := e.m.ListGroups(context.Background(), StateDead)
	require.NoError(t, err)
	assert.Equal(t, []GroupListing{{testGroup, StateDead}}, groups)
	close(block)
	require.NoError(t, <-done)

	e.alter("t", PartitionStartOffset{0, 0})
	f.failSync.Store(true)
	err = e.m.DeleteGroup(context.Background(), testGroup)
	require.Error(t, err)
	require.NotNil(t, reqErr(err))
	assert.Equal(t, apierr.KafkaStorageError, reqErr(err).Reason, "a storage failure: retryable KAFKA_STORAGE_ERROR")
	groups, _ = e.m.ListGroups(context.Background(), StateUnknown)
	assert.Equal(t, []GroupListing{{testGroup, StateEmpty}}, groups, "nothing changed")
	assert.Equal(t, []TopicOffsets{{Topic: "t", Partitions: []PartitionOffsets{po(0, 0, 0)}}}, e.offsets())
	assert.Error(t, e.m.Close())
}

// A ShareFetch opening a session races a DeleteShareGroup: the session
// ends with the group or belongs to the group created after it, never to
// a deleted one.
func TestDeleteGroupRacesOpen(t *testing.T) {
	e := newEnv(t, func(o *testOpts) { o.Fsync = logstore.FsyncNever })
	e.topic("t", 1)
	x := tp("t", 0)
	for range 50 {
		_, err := e.m.UpdateConfig(context.Background(), testGroup, GroupConfig{})
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "m", Partitions: entries(x)})
			assert.NoError(t, err)
		})
		wg.Go(func() {
			if err := e.m.DeleteGroup(context.Background(), testGroup); err != nil {
				assert.True(t, reqErr(err) != nil && reqErr(err).Reason == apierr.GroupIDNotFound, "%v", err)
			}
		})
		wg.Wait()
		if s, _, ok := e.m.sessions.Lookup(keyOf("m")); ok {
			s.Mu.Lock()
			g := s.State.g
			s.Mu.Unlock()
			assert.False(t, g.isDeleted(), "a live session is bound to a live group")
			assert.Same(t, g, e.m.groupFor(testGroup, false))
		}
	}
}

// Heartbeats, fetches, acknowledgements, config updates and every admin
// call of one group, concurrently: no deadlock (several share-partition
// locks are held at once by admin calls and the assignor), no race, only
// the request-level errors the rules allow, and consistent share-partitions.
func TestGroupOpsConcurrent(t *testing.T) {
	e := newEnv(t, func(o *testOpts) { o.Fsync = logstore.FsyncNever })
	e.topic("t", 4)
	for p := range int32(4) {
		e.produce("t", p, 50, 10)
	}
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	ctx := context.Background()
	allowed := func(err error, reasons ...apierr.Reason) {
		if err == nil {
			return
		}
		re := reqErr(err)
		if assert.NotNil(t, re, "unexpected error %v", err) {
			assert.Contains(t, reasons, re.Reason, re.Message)
		}
	}
	var wg sync.WaitGroup
	for i := range 4 { // members
		wg.Go(func() {
			id := string(rune('a' + i))
			for range 20 {
				r, err := e.m.Heartbeat(ctx, HeartbeatRequest{GroupID: testGroup, MemberID: id, SubscribedTopicNames: []string{"t"}})
				allowed(err)
				if err != nil {
					continue
				}
				for range 3 {
					r2, err := e.m.Heartbeat(ctx, HeartbeatRequest{GroupID: testGroup, MemberID: id, MemberEpoch: r.MemberEpoch})
					allowed(err, apierr.UnknownMemberID, apierr.GroupIDNotFound)
					if err == nil {
						r = r2
					}
				}
				_, err = e.m.Heartbeat(ctx, HeartbeatRequest{GroupID: testGroup, MemberID: id, MemberEpoch: -1})
				allowed(err, apierr.UnknownMemberID, apierr.GroupIDNotFound)
			}
		})
	}
	for i := range 2 { // consumers
		wg.Go(func() {
			id := string(rune('x' + i))
			for range 20 {
				resp, err := e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: id, MaxRecords: i32(20),
					Partitions: entries(tp("t", 0), tp("t", 1), tp("t", 2), tp("t", 3))})
				allowed(err)
				if err != nil {
					continue
				}
				var acks []PartitionEntry
				for _, p := range resp.Partitions {
					for _, a := range p.Acquired {
						acks = append(acks, ackEntry(p.TopicPartition, batch(a.FirstOffset, a.LastOffset, AckAccept)))
						break
					}
				}
				_, err = e.m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: id, Epoch: -1, Partitions: acks})
				allowed(err, apierr.ShareSessionNotFound)
			}
		})
	}
	wg.Go(func() { // admin
		for i := range 40 {
			_, err := e.m.DescribeGroup(ctx, testGroup)
			allowed(err, apierr.GroupIDNotFound)
			_, err = e.m.ListGroups(context.Background(), StateUnknown)
			allowed(err)
			_, err = e.m.DescribeOffsets(ctx, testGroup, nil)
			allowed(err, apierr.GroupIDNotFound)
			_, err = e.m.AlterOffsets(ctx, testGroup, []TopicStartOffsets{{Topic: "t", Partitions: []PartitionStartOffset{{0, 10}, {3, 0}}}})
			allowed(err, apierr.NonEmptyGroup)
			_, err = e.m.DeleteOffsets(ctx, testGroup, []string{"t"})
			allowed(err, apierr.NonEmptyGroup, apierr.GroupIDNotFound)
			_, err = e.m.UpdateConfig(context.Background(), testGroup, GroupConfig{DeliveryCountLimit: i32(int32(2 + i%5))})
			allowed(err)
			if i%10 == 9 {
				allowed(e.m.DeleteGroup(ctx, testGroup), apierr.NonEmptyGroup, apierr.GroupIDNotFound)
			}
		}
	})
	wg.Wait()
	if g := e.m.groupFor(testGroup, false); g != nil {
		for _, sp := range g.partitions() {
			sp.mu.Lock()
			assert.NoError(t, sp.invariants())
			sp.mu.Unlock()
		}
	}
}
