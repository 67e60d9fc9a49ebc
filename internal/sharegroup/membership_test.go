package sharegroup

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hb sends a heartbeat of member in the test group. Every topic of the
// assignment must carry its topic's current ID; hb checks that and clears
// the IDs, so tests compare assignments by name (assign, tps).
func (e *env) hb(member string, epoch int32, subs ...string) (HeartbeatResponse, error) {
	r, err := e.m.Heartbeat(context.Background(), HeartbeatRequest{GroupID: testGroup, MemberID: member, MemberEpoch: epoch, SubscribedTopicNames: subs})
	if r.Assignment != nil {
		e.checkIDs(r.Assignment)
	}
	return r, err
}

// checkIDs requires each topic of a to carry the topic's current ID, then
// clears them.
func (e *env) checkIDs(a *Assignment) {
	e.t.Helper()
	for i := range a.Topics {
		tp := &a.Topics[i]
		info, err := e.store.TopicInfo(context.Background(), tp.Topic)
		require.NoError(e.t, err, "assigned topic %q", tp.Topic)
		require.Equal(e.t, info.ID, tp.TopicID, "assigned topic %q carries its ID", tp.Topic)
		tp.TopicID = ""
	}
}

func (e *env) mustHB(member string, epoch int32, subs ...string) HeartbeatResponse {
	e.t.Helper()
	r, err := e.hb(member, epoch, subs...)
	require.NoError(e.t, err)
	return r
}

func (e *env) describe() GroupDescription {
	e.t.Helper()
	d, err := e.m.DescribeGroup(context.Background(), testGroup)
	require.NoError(e.t, err)
	for i := range d.Members {
		e.checkIDs(&d.Members[i].Assignment)
	}
	return d
}

func assign(tps ...TopicPartitions) *Assignment {
	if tps == nil {
		tps = []TopicPartitions{}
	}
	return &Assignment{Topics: tps}
}

func tps(topic string, parts ...int32) TopicPartitions {
	return TopicPartitions{Topic: topic, Partitions: parts}
}

func requireReason(t *testing.T, err error, reason apierr.Reason) *apierr.Error {
	t.Helper()
	e := reqErr(err)
	require.NotNil(t, e, "want %s, got %v", reason, err)
	require.Equal(t, reason, e.Reason, e.Message)
	return e
}

// Validation.
func TestHeartbeatValidation(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name string
		req  HeartbeatRequest
	}{
		{"empty group id", HeartbeatRequest{MemberID: "m", MemberEpoch: 0, SubscribedTopicNames: []string{"t"}}},
		{"group id too long", HeartbeatRequest{GroupID: strings.Repeat("g", 250), MemberID: "m", SubscribedTopicNames: []string{"t"}}},
		{"empty member id", HeartbeatRequest{GroupID: "g", SubscribedTopicNames: []string{"t"}}},
		{"member id too long", HeartbeatRequest{GroupID: "g", MemberID: strings.Repeat("m", 37), SubscribedTopicNames: []string{"t"}}},
		{"epoch below -1", HeartbeatRequest{GroupID: "g", MemberID: "m", MemberEpoch: -2}},
		{"join without subscriptions", HeartbeatRequest{GroupID: "g", MemberID: "m", MemberEpoch: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.m.Heartbeat(context.Background(), tt.req)
			requireReason(t, err, apierr.InvalidRequest)
			groups, err := e.m.ListGroups(context.Background(), StateUnknown)
			require.NoError(t, err)
			assert.Empty(t, groups, "a refused join creates no group")
		})
	}
}

// Join, heartbeat at the current or previous epoch, leave; the errors.
func TestHeartbeatLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 4)

	_, err := e.hb("a", 1)
	requireReason(t, err, apierr.GroupIDNotFound)
	_, err = e.hb("a", -1)
	requireReason(t, err, apierr.GroupIDNotFound)

	r := e.mustHB("a", 0, "t")
	assert.Equal(t, HeartbeatResponse{MemberID: "a", MemberEpoch: 1, HeartbeatIntervalMs: 5000, Assignment: assign(tps("t", 0, 1, 2, 3))}, r)
	d := e.describe()
	assert.Equal(t, StateStable, d.State)
	assert.Equal(t, int32(1), d.GroupEpoch)
	assert.Equal(t, int32(1), d.AssignmentEpoch)

	// Unchanged: no assignment.
	r = e.mustHB("a", 1)
	assert.Equal(t, HeartbeatResponse{MemberID: "a", MemberEpoch: 1, HeartbeatIntervalMs: 5000}, r)
	_, err = e.hb("x", 1)
	requireReason(t, err, apierr.UnknownMemberID)
	_, err = e.hb("x", -1)
	requireReason(t, err, apierr.UnknownMemberID)

	// b joins: group epoch 2; a moves to it and gets its new assignment.
	r = e.mustHB("b", 0, "t")
	assert.Equal(t, int32(2), r.MemberEpoch)
	assert.Equal(t, assign(tps("t", 2, 3)), r.Assignment)
	r = e.mustHB("a", 1)
	assert.Equal(t, int32(2), r.MemberEpoch)
	assert.Equal(t, assign(tps("t", 0, 1)), r.Assignment, "changed: sent")
	r = e.mustHB("a", 2)
	assert.Nil(t, r.Assignment, "unchanged: not sent")
	r = e.mustHB("a", 1)
	assert.Equal(t, int32(2), r.MemberEpoch)
	assert.Equal(t, assign(tps("t", 0, 1)), r.Assignment, "the previous epoch was used: sent")
	r = e.mustHB("a", 2, "t")
	assert.Equal(t, assign(tps("t", 0, 1)), r.Assignment, "subscriptions were sent: sent")
	assert.Equal(t, int32(2), e.describe().GroupEpoch, "the same subscription is no change")

	// Neither current nor previous: fenced.
	_, err = e.hb("a", 3)
	info := requireReason(t, err, apierr.FencedMemberEpoch)
	assert.Equal(t, "2", info.Metadata["expected_epoch"])
	r = e.mustHB("b", 2)
	assert.Nil(t, r.Assignment)

	// b leaves: epoch 3, a takes everything back.
	r = e.mustHB("b", -1)
	assert.Equal(t, HeartbeatResponse{MemberID: "b", MemberEpoch: -1, HeartbeatIntervalMs: 5000}, r)
	_, err = e.hb("b", 2)
	requireReason(t, err, apierr.UnknownMemberID)
	r = e.mustHB("a", 2)
	assert.Equal(t, int32(3), r.MemberEpoch)
	assert.Equal(t, assign(tps("t", 0, 1, 2, 3)), r.Assignment)
	_, err = e.hb("a", 1)
	requireReason(t, err, apierr.FencedMemberEpoch)

	// The last member leaves: EMPTY, the epoch survives.
	e.mustHB("a", -1)
	d = e.describe()
	assert.Equal(t, StateEmpty, d.State)
	assert.Equal(t, int32(4), d.GroupEpoch)
	assert.Empty(t, d.Members)
	// A left member may join again.
	r = e.mustHB("a", 0, "t")
	assert.Equal(t, int32(5), r.MemberEpoch)
}

// Epoch 0 from a present member is a rejoin: no size check, the
// subscription is replaced, the full assignment is sent.
func TestHeartbeatRejoinAndMaxSize(t *testing.T) {
	e := newEnv(t, func(o *testOpts) { o.GroupMaxSize = 2 })
	e.topic("t", 2)
	e.topic("u", 1)
	e.mustHB("a", 0, "t")
	e.mustHB("b", 0, "t")
	_, err := e.hb("c", 0, "t")
	info := requireReason(t, err, apierr.GroupMaxSizeReached)
	assert.Equal(t, "2", info.Metadata["max_size"])
	assert.Len(t, e.describe().Members, 2, "nothing changed")
	assert.Equal(t, int32(2), e.describe().GroupEpoch)

	r := e.mustHB("a", 0, "t")
	assert.Equal(t, int32(2), r.MemberEpoch, "rejoin with the same subscription: no change")
	assert.Equal(t, assign(tps("t", 0)), r.Assignment)
	r = e.mustHB("b", 0, "u", "t", "u")
	assert.Equal(t, int32(3), r.MemberEpoch, "subscription replaced")
	assert.Equal(t, assign(tps("t", 1), tps("u", 0)), r.Assignment)
	assert.Equal(t, []string{"t", "u"}, e.describe().Members[1].SubscribedTopicNames)

	e.mustHB("b", -1)
	r = e.mustHB("c", 0, "t")
	assert.Equal(t, int32(5), r.MemberEpoch, "room again after a leave")
}

// Topics that do not exist yet may be subscribed; their creation (and
// deletion) increments the group epoch; partitions are initialised before
// they first appear in an assignment.
func TestHeartbeatTopicLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	r := e.mustHB("a", 0, "later")
	assert.Equal(t, HeartbeatResponse{MemberID: "a", MemberEpoch: 1, HeartbeatIntervalMs: 5000, Assignment: assign()}, r)
	assert.Nil(t, e.mustHB("a", 1).Assignment)

	e.topic("later", 2)
	e.produce("later", 0, 5, 1)
	r = e.mustHB("a", 1)
	assert.Equal(t, int32(2), r.MemberEpoch, "topic created")
	assert.Equal(t, assign(tps("later", 0, 1)), r.Assignment)
	// Initialised at the assignment (auto_offset_reset latest): records
	// produced before it are not delivered, those after are.
	assert.Equal(t, "spso=5", e.state(tp("later", 0)))
	e.produce("later", 0, 3, 1)
	assert.Equal(t, []AcquiredRange{rng(5, 7, 1)}, acquired(t, e.open("a", tp("later", 0)), tp("later", 0)))

	id := e.sp(tp("later", 0)).topicID
	require.NoError(t, e.store.DeleteTopic(context.Background(), "later"))
	e.m.TopicDeleted(id)
	r = e.mustHB("a", 2)
	assert.Equal(t, int32(3), r.MemberEpoch, "topic deleted")
	assert.Equal(t, assign(), r.Assignment)

	// Re-created with more partitions: a new topic, assigned again.
	e.topic("later", 3)
	r = e.mustHB("a", 3)
	assert.Equal(t, int32(4), r.MemberEpoch)
	assert.Equal(t, assign(tps("later", 0, 1, 2)), r.Assignment)
}

// Session timeout: a member without an accepted heartbeat for
// session_timeout_ms is removed, by the timer and without any call.
func TestMemberExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 2)
		e.update(GroupConfig{SessionTimeoutMs: i32(1000), HeartbeatIntervalMs: i32(200)})
		r := e.mustHB("a", 0, "t")
		assert.Equal(t, int32(200), r.HeartbeatIntervalMs)
		e.mustHB("b", 0, "t")
		var got []*Assignment
		for range 5 { // a keeps heartbeating, b does not
			time.Sleep(400 * time.Millisecond)
			r = e.mustHB("a", r.MemberEpoch)
			got = append(got, r.Assignment)
		}
		synctest.Wait()
		d := e.describe()
		require.Len(t, d.Members, 1, "b expired 1s after its last heartbeat")
		assert.Equal(t, "a", d.Members[0].MemberID)
		assert.Equal(t, int32(3), d.GroupEpoch)
		assert.Equal(t, int32(3), r.MemberEpoch)
		assert.Equal(t, []*Assignment{assign(tps("t", 0)), nil, assign(tps("t", 0, 1)), nil, nil}, got,
			"at 0.4s a moves to epoch 2 (b joined); at 1.2s it takes b's partition (b expired at 1s)")
		_, err := e.hb("b", 2)
		requireReason(t, err, apierr.UnknownMemberID)

		// The timer removes the last member without any call: EMPTY.
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		groups, _ := e.m.ListGroups(context.Background(), StateStable)
		assert.Len(t, groups, 1)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		groups, _ = e.m.ListGroups(context.Background(), StateEmpty)
		assert.Equal(t, []GroupListing{{GroupID: testGroup, State: StateEmpty}}, groups)
		assert.Equal(t, int32(4), e.describe().GroupEpoch)
	})
}

// A changed session timeout applies at the next heartbeat.
func TestSessionTimeoutAppliesAtNextHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.update(GroupConfig{SessionTimeoutMs: i32(2000), HeartbeatIntervalMs: i32(100)})
		r := e.mustHB("a", 0, "t")
		e.update(GroupConfig{SessionTimeoutMs: i32(10000)})
		time.Sleep(1500 * time.Millisecond)
		e.mustHB("a", r.MemberEpoch) // deadline now 11.5s
		time.Sleep(9 * time.Second)
		synctest.Wait()
		assert.Len(t, e.describe().Members, 1)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Empty(t, e.describe().Members)
	})
}

// Rack, client id and host are stored and described.
func TestMemberDescription(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 3)
	rack := "r1"
	_, err := e.m.Heartbeat(context.Background(), HeartbeatRequest{GroupID: testGroup, MemberID: "b", MemberEpoch: 0,
		RackID: &rack, SubscribedTopicNames: []string{"t", "missing"}, ClientID: "app-1", ClientHost: "10.0.0.7"})
	require.NoError(t, err)
	e.mustHB("a", 0, "t")
	d := e.describe()
	assert.Equal(t, int32(2), d.GroupEpoch)
	assert.Equal(t, int32(2), d.AssignmentEpoch)
	assert.Equal(t, int32(5), *d.Config.DeliveryCountLimit, "effective config")
	require.Len(t, d.Members, 2)
	assert.Equal(t, "a", d.Members[0].MemberID, "sorted by member id")
	assert.Equal(t, MemberDescription{MemberID: "b", MemberEpoch: 1, RackID: "r1", ClientID: "app-1", ClientHost: "10.0.0.7",
		SubscribedTopicNames: []string{"missing", "t"}, Assignment: *assign(tps("t", 0, 1, 2))}, d.Members[1],
		"b has not heartbeated since a joined: its current assignment and epoch")
	// Absent rack keeps the stored one; client fields follow each heartbeat.
	_, err = e.m.Heartbeat(context.Background(), HeartbeatRequest{GroupID: testGroup, MemberID: "b", MemberEpoch: 1, ClientID: "app-2", ClientHost: "10.0.0.8"})
	require.NoError(t, err)
	d = e.describe()
	assert.Equal(t, "r1", d.Members[1].RackID)
	assert.Equal(t, "app-2", d.Members[1].ClientID)
	assert.Equal(t, int32(2), d.Members[1].MemberEpoch)
	assert.Equal(t, *assign(tps("t", 0, 1)), d.Members[1].Assignment, "b held most: it keeps the larger quota")
}

// The group_epoch survives a restart; members do not.
func TestGroupEpochDurable(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	e.mustHB("a", 0, "t")
	e.mustHB("b", 0, "t")
	require.Equal(t, int32(2), e.describe().GroupEpoch)
	require.NoError(t, e.m.Close())
	e2 := newEnvOn(t, e.store, e.opts.Dir, nil)
	d := e2.describe()
	assert.Equal(t, int32(2), d.GroupEpoch)
	assert.Equal(t, StateEmpty, d.State)
	_, err := e2.hb("a", 2)
	requireReason(t, err, apierr.UnknownMemberID)
	assert.Equal(t, int32(3), e2.mustHB("a", 0, "t").MemberEpoch, "epochs never go back")
}

// Many members joining and heartbeating concurrently: every member ends
// with the final epoch and the assignment is balanced.
func TestHeartbeatConcurrent(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 8)
	const n = 12
	epochs := make([]int32, n)
	var joined, done sync.WaitGroup
	joined.Add(n)
	for i := range n {
		done.Go(func() {
			id := string(rune('a' + i))
			r, err := e.hb(id, 0, "t")
			joined.Done()
			assert.NoError(t, err)
			ep := r.MemberEpoch
			for range 20 {
				r, err = e.hb(id, ep)
				if !assert.NoError(t, err) {
					break
				}
				ep = r.MemberEpoch
			}
			joined.Wait()
			r, err = e.hb(id, ep)
			assert.NoError(t, err)
			epochs[i] = r.MemberEpoch
		})
	}
	done.Wait()
	d := e.describe()
	require.Len(t, d.Members, n)
	assert.Equal(t, int32(n), d.GroupEpoch)
	counts := map[int32]int{}
	for i, mem := range d.Members {
		assert.Equal(t, int32(n), mem.MemberEpoch)
		assert.Equal(t, int32(n), epochs[i])
		require.Len(t, mem.Assignment.Topics, 1)
		require.Len(t, mem.Assignment.Topics[0].Partitions, 1, "12 members on 8 partitions: one each")
		counts[mem.Assignment.Topics[0].Partitions[0]]++
	}
	for p, c := range counts {
		assert.True(t, c == 1 || c == 2, "partition %d shared by %d", p, c)
	}
	assert.Len(t, counts, 8)
}

// As Kafka's simple assignor: members with identical subscriptions share
// one pool of the topics' partitions, so two members on topics a and b (one
// partition each) get one partition each, not both; with different
// subscriptions each topic is assigned among its own subscribers.
func TestAssignorPoolsTopics(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("a", 1)
	e.topic("b", 1)
	e.mustHB("m1", 0, "a", "b")
	r2 := e.mustHB("m2", 0, "a", "b")
	r1 := e.mustHB("m1", 1)
	assert.Equal(t, assign(tps("a", 0)), r1.Assignment)
	assert.Equal(t, assign(tps("b", 0)), r2.Assignment)

	// A third topic, subscribed by both: 4 partitions, 2 each, disjoint.
	e.topic("c", 2)
	r1 = e.mustHB("m1", r1.MemberEpoch, "a", "b", "c")
	r2 = e.mustHB("m2", r2.MemberEpoch, "a", "b", "c")
	r1 = e.mustHB("m1", r1.MemberEpoch)
	require.Equal(t, r1.MemberEpoch, r2.MemberEpoch)
	seen := map[string]int{}
	for _, a := range []*Assignment{r1.Assignment, r2.Assignment} {
		n := 0
		for _, x := range a.Topics {
			for _, p := range x.Partitions {
				seen[fmt.Sprintf("%s/%d", x.Topic, p)]++
				n++
			}
		}
		assert.Equal(t, 2, n, "balanced: %+v", a)
	}
	assert.Equal(t, map[string]int{"a/0": 1, "b/0": 1, "c/0": 1, "c/1": 1}, seen)

	// Different subscriptions: each topic among its own subscribers (a's
	// one partition is shared by its three subscribers).
	r3 := e.mustHB("m3", 0, "a")
	assert.Equal(t, assign(tps("a", 0)), r3.Assignment)
}
