package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// The topology of these tests: this instance ("here") and peers, each a
// Log over its own memory store holding the same topics; owners says
// which instance serves each partition (a partition it does not name has
// no owner right now; a topic it does not name does not exist, and is
// answered here).

type tp struct {
	topic string
	part  int32
}

type fakeOwners struct {
	mu       sync.Mutex
	owners   map[tp]string // "" = this instance, else the peer's address
	released []error       // the outcomes the holds were released with
	holds    int           // holds taken and not released
}

func (o *fakeOwners) Owner(_ context.Context, topic string, part int32) (Owner, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	peer, ok := o.owners[tp{topic, part}]
	known := false
	for k := range o.owners {
		known = known || k.topic == topic
	}
	switch {
	case !ok && known:
		return Owner{}, apierr.New(apierr.NotOwner, "%s-%d has no owner right now", topic, part)
	case peer != "":
		return Owner{Peer: peer}, nil
	}
	o.holds++
	return Owner{Hold: fakeHold{o}}, nil
}

type fakeHold struct{ o *fakeOwners }

func (h fakeHold) Release(err error) {
	h.o.mu.Lock()
	defer h.o.mu.Unlock()
	h.o.holds--
	h.o.released = append(h.o.released, err)
}

// fakePeers calls the peers' Logs as the transport would: marked as
// forwarded by this instance.
type fakePeers struct {
	logs  map[string]*Log
	calls []string
}

func (p *fakePeers) peer(addr, call string) *Log {
	p.calls = append(p.calls, addr+" "+call)
	return p.logs[addr]
}

func fwd(ctx context.Context) context.Context { return WithForwardedBy(ctx, "here") }

func (p *fakePeers) Append(ctx context.Context, peer, topic string, part int32, recs []logstore.Record) (int64, error) {
	return p.peer(peer, "Append").AppendPartition(fwd(ctx), topic, part, recs)
}

func (p *fakePeers) Fetch(ctx context.Context, peer string, req FetchRequest) (Fetched, error) {
	return p.peer(peer, "Fetch").Fetch(fwd(ctx), req)
}

func (p *fakePeers) ListOffsets(ctx context.Context, peer, topic string, part int32, spec OffsetSpec, ts int64) (int64, int64, error) {
	return p.peer(peer, "ListOffsets").ListOffsets(fwd(ctx), topic, part, spec, ts)
}

func (p *fakePeers) Purge(ctx context.Context, peer string, topics []PurgeTopic) ([]PurgeTopicResult, error) {
	return p.peer(peer, "Purge").Purge(fwd(ctx), topics)
}

func (p *fakePeers) CreateTopic(ctx context.Context, peer, name string, partitions int32, s TopicSettings) (Topic, error) {
	return p.peer(peer, "CreateTopic").CreateTopic(fwd(ctx), name, partitions, s)
}

func (p *fakePeers) DeleteTopic(ctx context.Context, peer, name string) error {
	return p.peer(peer, "DeleteTopic").DeleteTopic(fwd(ctx), name)
}

func (p *fakePeers) CreatePartitions(ctx context.Context, peer, name string, count int32, validateOnly bool) (TopicInfo, error) {
	return p.peer(peer, "CreatePartitions").CreatePartitions(fwd(ctx), name, count, validateOnly)
}

// fakeController names the controller: "" here, else a peer's address;
// err says none is known.
type fakeController struct {
	peer string
	err  error
}

func (c fakeController) Controller(context.Context) (string, error) { return c.peer, c.err }

// cluster makes this instance's Log and one peer's ("B", a single node
// for the calls it receives), both with topic t of 4 partitions.
func cluster(t *testing.T, owners map[tp]string) (here, b *Log, o *fakeOwners, p *fakePeers) {
	t.Helper()
	ctx := context.Background()
	now := func() time.Time { return time.UnixMilli(1234) }
	b, _ = newLog(t, Config{Now: now})
	o = &fakeOwners{owners: owners}
	p = &fakePeers{logs: map[string]*Log{"B": b}}
	here, _ = newLog(t, Config{Now: now, Owners: o, Peers: p})
	for _, l := range []*Log{here, b} {
		_, err := l.store.CreateTopic(ctx, "t", 4, logstore.TopicConfig{RetentionMs: -1, CleanupPolicy: logstore.CleanupDelete})
		require.NoError(t, err)
	}
	return here, b, o, p
}

// keysFor returns two keys whose records go to different partitions of 4.
func keysFor(t *testing.T) (a, b []byte) {
	a = []byte("a")
	for i := range 100 {
		if k := []byte(fmt.Sprint("b", i)); Partition(k, 4) != Partition(a, 4) {
			return a, k
		}
	}
	t.Fatal("no second key")
	return nil, nil
}

func TestProduceSpansLocalAndRemotePartitions(t *testing.T) {
	ctx := context.Background()
	ka, kb := keysFor(t)
	pa, pb := Partition(ka, 4), Partition(kb, 4)
	here, b, o, p := cluster(t, map[tp]string{{"t", pa}: "", {"t", pb}: "B"})

	res, err := here.Produce(ctx, "t", nil, []logstore.Record{
		{Key: ka, Value: []byte("1")}, {Key: kb, Value: []byte("2")}, {Key: ka, Value: []byte("3")}, {Key: kb, Value: []byte("4")},
	})
	require.NoError(t, err)
	assert.Equal(t, []int32{pa, pb, pa, pb}, res.Partitions, "in request order")
	assert.Equal(t, []int64{0, 0, 1, 1}, res.Offsets, "each partition's records contiguous, in request order")
	assert.Equal(t, []string{"B Append"}, p.calls, "the remote partition's batch went to its owner in one call")
	assert.Equal(t, []error{nil}, o.released, "the local append ran under the partition's hold")
	assert.Zero(t, o.holds)

	local, err := here.store.Read(ctx, "t", pa, 0, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, local, 2)
	assert.Equal(t, "3", string(local[1].Value))
	remote, err := b.store.Read(ctx, "t", pb, 0, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, remote, 2)
	assert.Equal(t, "4", string(remote[1].Value))
	assert.EqualValues(t, 1234, remote[0].Timestamp, "the log append time is set once, here")
	_, hw, err := here.store.Bounds("t", pb)
	require.NoError(t, err)
	assert.Zero(t, hw, "nothing of the remote partition was appended here")
}

func TestFetchAndListOffsetsAtTheOwner(t *testing.T) {
	ctx := context.Background()
	here, b, o, p := cluster(t, map[tp]string{{"t", 0}: "", {"t", 1}: "B"})
	one := int32(1)
	_, err := b.Produce(ctx, "t", &one, []logstore.Record{{Value: []byte("x")}, {Value: []byte("y")}})
	require.NoError(t, err)

	got, err := here.Fetch(ctx, FetchRequest{Topic: "t", Partition: 1, Offset: 1})
	require.NoError(t, err)
	require.Len(t, got.Records, 1)
	assert.Equal(t, "y", string(got.Records[0].Value))
	assert.EqualValues(t, 2, got.HighWatermark)
	off, _, err := here.ListOffsets(ctx, "t", 1, Latest, 0)
	require.NoError(t, err)
	assert.EqualValues(t, 2, off)
	assert.Equal(t, []string{"B Fetch", "B ListOffsets"}, p.calls)

	got, err = here.Fetch(ctx, FetchRequest{Topic: "t", Partition: 0, Offset: 0})
	require.NoError(t, err)
	assert.Empty(t, got.Records)
	assert.Len(t, p.calls, 2, "a local partition is read here")
	assert.Zero(t, o.holds, "a read releases its hold at once")
}

func TestPurgeSplitOverTwoOwners(t *testing.T) {
	ctx := context.Background()
	here, b, _, p := cluster(t, map[tp]string{{"t", 0}: "", {"t", 1}: "B", {"t", 2}: "", {"t", 3}: "B"})
	ten := make([]logstore.Record, 10)
	for part := range int32(4) {
		l := here
		if part%2 == 1 {
			l = b
		}
		_, err := l.Produce(ctx, "t", &part, ten)
		require.NoError(t, err)
	}

	res, err := here.Purge(ctx, []PurgeTopic{
		{Topic: "t", Partitions: []PurgePartition{{3, 3}, {0, 4}, {1, 5}}},
		{Topic: "nope", Partitions: []PurgePartition{{0, 1}}},
		{Topic: "t", Partitions: []PurgePartition{{2, 99}}},
	})
	require.NoError(t, err)
	require.Len(t, res, 3)
	assert.Equal(t, "t", res[0].Topic)
	assert.Equal(t, []PurgePartitionResult{{Partition: 3, LowWatermark: 3}, {Partition: 0, LowWatermark: 4}, {Partition: 1, LowWatermark: 5}},
		res[0].Partitions, "the answers of both owners, in request order")
	assert.Equal(t, "nope", res[1].Topic)
	assert.Equal(t, apierr.UnknownTopicOrPartition, res[1].Partitions[0].Code, "an unknown topic is answered here")
	assert.Equal(t, apierr.OffsetOutOfRange, res[2].Partitions[0].Code)
	assert.Equal(t, []string{"B Purge"}, p.calls, "one call per owner")

	for part, want := range map[int32]int64{0: 4, 1: 0, 2: 0, 3: 0} {
		start, _, err := here.store.Bounds("t", part)
		require.NoError(t, err)
		assert.Equal(t, want, start, "partition %d here", part)
	}
	for part, want := range map[int32]int64{1: 5, 3: 3} {
		start, _, err := b.store.Bounds("t", part)
		require.NoError(t, err)
		assert.Equal(t, want, start, "partition %d at B", part)
	}
}

func TestForwardedCallForAPartitionNotOwnedIsNotOwner(t *testing.T) {
	ctx := WithForwardedBy(context.Background(), "C")
	here, _, _, p := cluster(t, map[tp]string{{"t", 0}: "", {"t", 1}: "B"})
	one := int32(1)
	_, err := here.Produce(ctx, "t", &one, []logstore.Record{{Value: []byte("x")}})
	assert.Equal(t, apierr.NotOwner, reason(t, err))
	_, err = here.Fetch(ctx, FetchRequest{Topic: "t", Partition: 1})
	assert.Equal(t, apierr.NotOwner, reason(t, err))
	_, _, err = here.ListOffsets(ctx, "t", 1, Earliest, 0)
	assert.Equal(t, apierr.NotOwner, reason(t, err))
	_, err = here.Purge(ctx, []PurgeTopic{{Topic: "t", Partitions: []PurgePartition{{0, 0}, {1, 0}}}})
	assert.Equal(t, apierr.NotOwner, reason(t, err))
	assert.Empty(t, p.calls, "a forwarded call is never forwarded again")

	_, err = here.Fetch(ctx, FetchRequest{Topic: "t", Partition: 0})
	assert.NoError(t, err, "a forwarded call for a partition owned here is served")
}

func TestNoOwnerRightNow(t *testing.T) {
	ctx := context.Background()
	here, _, _, p := cluster(t, map[tp]string{{"t", 0}: ""})
	two := int32(2)
	_, err := here.Produce(ctx, "t", &two, []logstore.Record{{Value: []byte("x")}})
	assert.Equal(t, apierr.NotOwner, reason(t, err))
	_, err = here.Purge(ctx, []PurgeTopic{{Topic: "t", Partitions: []PurgePartition{{0, 0}, {2, 0}}}})
	assert.Equal(t, apierr.NotOwner, reason(t, err), "the whole purge is refused, nothing purged")
	assert.Empty(t, p.calls)
}

func TestHoldReleasedWithTheAppendOutcome(t *testing.T) {
	ctx := context.Background()
	here, _, o, _ := cluster(t, map[tp]string{{"t", 0}: ""})
	_, err := here.AppendPartition(ctx, "t", 0, []logstore.Record{{Timestamp: 5, Value: []byte("x")}})
	require.NoError(t, err)
	_, err = here.AppendPartition(ctx, "gone", 0, []logstore.Record{{Timestamp: 5}})
	require.Error(t, err)
	require.Len(t, o.released, 2)
	assert.NoError(t, o.released[0])
	assert.ErrorIs(t, o.released[1], err, "the store's refusal reaches the owner (a fenced write gives the partition up)")
	assert.Zero(t, o.holds)
}

// controlled makes this instance's Log, whose controller is c, and the
// controller B's, a single node for the calls it receives; the events
// each one's subscribers heard are in the slices.
func controlled(t *testing.T, c fakeController) (here, b *Log, p *fakePeers, hereEvents, bEvents *[]TopicEvent) {
	t.Helper()
	b, _ = newLog(t, Config{})
	p = &fakePeers{logs: map[string]*Log{"B": b}}
	here, _ = newLog(t, Config{Controller: c, Peers: p})
	hereEvents, bEvents = &[]TopicEvent{}, &[]TopicEvent{}
	here.Subscribe(func(ev TopicEvent) { *hereEvents = append(*hereEvents, ev) })
	b.Subscribe(func(ev TopicEvent) { *bEvents = append(*bEvents, ev) })
	return here, b, p, hereEvents, bEvents
}

func TestTopicLifecycleAtTheController(t *testing.T) {
	ctx := context.Background()
	here, b, p, hereEvents, bEvents := controlled(t, fakeController{peer: "B"})

	created, err := here.CreateTopic(ctx, "t", 3, TopicSettings{})
	require.NoError(t, err)
	assert.Equal(t, "t", created.Info.Name)
	assert.Len(t, created.Partitions, 3, "the controller's answer")
	_, err = b.store.TopicInfo(ctx, "t")
	require.NoError(t, err, "the controller created it")
	_, err = here.store.TopicInfo(ctx, "t")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic, "nothing was created here")

	_, err = here.CreateTopic(ctx, "t", 3, TopicSettings{})
	require.Error(t, err)
	assert.Equal(t, apierr.TopicAlreadyExists, ErrorOf(err).Reason, "the controller's refusal, as it gave it")
	_, err = here.CreateTopic(ctx, "bad name!", 1, TopicSettings{})
	assert.Equal(t, apierr.InvalidRequest, reason(t, err))

	info, created2, err := here.EnsureTopic(ctx, "auto", 2)
	require.NoError(t, err)
	assert.True(t, created2)
	assert.Equal(t, "auto", info.Name)

	require.NoError(t, here.DeleteTopic(ctx, "t"))
	_, err = b.store.TopicInfo(ctx, "t")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic, "the controller deleted it")
	err = here.DeleteTopic(ctx, "t")
	require.Error(t, err)
	assert.Equal(t, apierr.UnknownTopicOrPartition, ErrorOf(err).Reason)

	assert.Equal(t, []string{"B CreateTopic", "B CreateTopic", "B CreateTopic", "B CreateTopic", "B DeleteTopic", "B DeleteTopic"}, p.calls)
	assert.Empty(t, *hereEvents, "the controller's subscribers hear of its changes, not this instance's")
	kinds := []TopicEventKind{}
	for _, ev := range *bEvents {
		kinds = append(kinds, ev.Kind)
	}
	assert.Equal(t, []TopicEventKind{TopicCreated, TopicCreated, TopicDeleted}, kinds)
}

func TestTopicLifecycleHereWhenThisInstanceIsTheController(t *testing.T) {
	ctx := context.Background()
	here, _, p, hereEvents, _ := controlled(t, fakeController{})
	_, err := here.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	_, err = here.RemoveTopic(WithForwardedBy(ctx, "C"), "t")
	require.NoError(t, err, "a forwarded call is served by the controller")
	assert.Empty(t, p.calls)
	assert.Len(t, *hereEvents, 2)
}

func TestTopicLifecycleWithoutAController(t *testing.T) {
	ctx := context.Background()
	noneKnown := apierr.New(apierr.NotOwner, "no instance holds the lease yet; retry")
	here, _, p, _, _ := controlled(t, fakeController{err: noneKnown})
	_, err := here.CreateTopic(ctx, "t", 1, TopicSettings{})
	assert.Equal(t, noneKnown, err, "the controller's error, as the Controller gave it")
	assert.Equal(t, noneKnown, here.DeleteTopic(ctx, "t"))
	assert.Empty(t, p.calls)

	// One hop only: a forwarded call that does not find the controller
	// here is refused rather than sent on.
	here, _, p, _, _ = controlled(t, fakeController{peer: "B"})
	fctx := WithForwardedBy(ctx, "C")
	_, err = here.CreateTopic(fctx, "t", 1, TopicSettings{})
	assert.Equal(t, apierr.NotOwner, reason(t, err))
	assert.Equal(t, apierr.NotOwner, reason(t, here.DeleteTopic(fctx, "t")))
	assert.Empty(t, p.calls)
}

func TestRemoveTopicAtTheControllerAnswersTheInfoKnownHere(t *testing.T) {
	ctx := context.Background()
	here, b, _, _, _ := controlled(t, fakeController{peer: "B"})
	// The stores of a cluster are one (here: two copies of the topic).
	orig, err := b.store.CreateTopic(ctx, "t", 2, logstore.TopicConfig{RetentionMs: -1, CleanupPolicy: logstore.CleanupDelete})
	require.NoError(t, err)
	_, err = here.store.CreateTopic(ctx, "t", 2, logstore.TopicConfig{RetentionMs: -1, CleanupPolicy: logstore.CleanupDelete})
	require.NoError(t, err)
	info, err := here.RemoveTopic(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, "t", info.Name)
	assert.EqualValues(t, 2, info.Partitions)
	_, err = b.store.TopicInfo(ctx, "t")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	assert.NotEmpty(t, orig.ID)
}
