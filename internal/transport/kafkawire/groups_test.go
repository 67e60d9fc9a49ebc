package kafkawire

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

// newGroupsFixture is a fixture whose listener serves classic consumer
// groups over a coordinator with a memory offsets store.
func newGroupsFixture(t *testing.T) *fixture {
	t.Helper()
	return withGroups(newFixture(t))
}

// withGroups restarts f's listener with a consumer-group coordinator.
func withGroups(f *fixture) *fixture {
	t := f.t
	t.Helper()
	c, err := consumergroup.Open(consumergroup.Options{Store: groupoffsets.NewMem(), Logger: slog.New(slog.DiscardHandler),
		MinSessionTimeout: 100 * time.Millisecond,
		Partitions: func(ctx context.Context, topic string) (int32, error) {
			info, err := f.log.TopicInfo(ctx, topic)
			if err != nil {
				return 0, apierr.New(apierr.UnknownTopicOrPartition, "no topic %q", topic)
			}
			return info.Partitions, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Restart the listener with consumer groups on (the handler table is built at Listen).
	if err := f.l.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := f.l.cfg
	cfg.Groups = c
	l, err := Listen(cfg, f.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		c.Close()
	})
	f.l, f.addr = l, l.Addr().String()
	return f
}

func produce(t *testing.T, cl *kgo.Client, topic string, n int) {
	t.Helper()
	for i := range n {
		if err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Partition: int32(i % 4), Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// A kgo consumer group consumes everything, commits, and a second group
// member run resumes from the commits.
func TestKgoConsumerGroupCommitsAndResumes(t *testing.T) {
	f := newGroupsFixture(t)
	f.createTopic("t", 4)
	produce(t, f.client(kgo.RecordPartitioner(kgo.ManualPartitioner())), "t", 40)

	consume := func(want int) {
		cl := f.client(kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := 0
		ctx := testCtx(t)
		for got < want {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d", got, want)
			}
			fs.EachRecord(func(*kgo.Record) { got++ })
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatal(err)
			}
		}
		cl.Close()
	}
	consume(40)
	adm := f.admin()
	offs, err := adm.FetchOffsets(testCtx(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	offs.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != 40 {
		t.Fatalf("committed offsets sum to %d, want 40", total)
	}
	produce(t, f.client(kgo.RecordPartitioner(kgo.ManualPartitioner())), "t", 8)
	consume(8) // from the commits: only the new ones
}

// ListGroups v0–3 (kafkajs sends v2) is answered, not a closed connection.
func TestListGroupsOldVersions(t *testing.T) {
	f := newGroupsFixture(t)
	cl := f.client()
	for v := int16(0); v <= 5; v++ {
		req := kmsg.NewPtrListGroupsRequest()
		req.SetVersion(v)
		resp, err := req.RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if resp.ErrorCode != 0 {
			t.Fatalf("v%d: %v", v, kerr.ErrorForCode(resp.ErrorCode))
		}
	}
}

// groupMember is a kgo group consumer polling in the background, with the
// partitions it owns and a count of its assignment changes.
type groupMember struct {
	cl      *kgo.Client
	mu      sync.Mutex
	owns    map[int32]bool
	changes int
	done    chan struct{}
}

func (m *groupMember) owned() (parts []int32, changes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.owns {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	return parts, m.changes
}

func (f *fixture) groupMember(group, topic string, opts ...kgo.Opt) *groupMember {
	m := &groupMember{owns: map[int32]bool{}, done: make(chan struct{})}
	set := func(ps map[string][]int32, own bool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(ps[topic]) > 0 {
			m.changes++
		}
		for _, p := range ps[topic] {
			if own {
				m.owns[p] = true
			} else {
				delete(m.owns, p)
			}
		}
	}
	m.cl = f.client(append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { set(ps, true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { set(ps, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { set(ps, false) }),
	}, opts...)...)
	go func() {
		defer close(m.done)
		for !m.cl.PollFetches(context.Background()).IsClientClosed() {
		}
	}()
	return m
}

// Static members (kgo.InstanceID): a member that restarts within its
// session timeout takes its place back without a rebalance (the other
// member's assignment never changes); one that does not come back is
// removed at its session timeout and the other takes every partition.
func TestKgoStaticMembers(t *testing.T) {
	f := newGroupsFixture(t)
	f.createTopic("st", 4)
	opts := func(id string) []kgo.Opt {
		return []kgo.Opt{kgo.InstanceID(id), kgo.SessionTimeout(3 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond),
			kgo.Balancers(kgo.RangeBalancer())}
	}
	a := f.groupMember("sg", "st", opts("a")...)
	b := f.groupMember("sg", "st", opts("b")...)
	waitFor(t, func() bool {
		pa, _ := a.owned()
		pb, _ := b.owned()
		return len(pa) == 2 && len(pb) == 2
	})
	pa, changes := a.owned()
	pb, _ := b.owned()

	b.cl.Close() // a static member does not leave the group
	<-b.done
	b = f.groupMember("sg", "st", opts("b")...)
	waitFor(t, func() bool { p, _ := b.owned(); return slices.Equal(p, pb) })
	time.Sleep(500 * time.Millisecond) // several heartbeats of a: no rebalance is announced
	if p, c := a.owned(); !slices.Equal(p, pa) || c != changes {
		t.Fatalf("a's assignment changed when b came back: %v (changes %d), was %v (changes %d)", p, c, pa, changes)
	}

	b.cl.Close()
	<-b.done
	waitFor(t, func() bool { p, _ := a.owned(); return len(p) == 4 }) // b's session ends
}

// DeleteGroups deletes share groups too, and ListGroups lists both kinds
// with their types.
func TestDeleteGroupsShareAndClassic(t *testing.T) {
	f := withGroups(newShareFixture(t))
	f.createTopic("dt", 1)
	f.setGroupConfig("share-g", "share.auto.offset.reset", "earliest")
	adm := f.admin()
	ctx := testCtx(t)
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "dt", Partition: 0, At: 1, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, "classic-g", os); err != nil {
		t.Fatal(err)
	}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, g := range listed {
		types[g.Group] = g.GroupType
	}
	if types["share-g"] != "share" || types["classic-g"] != "classic" {
		t.Fatalf("listed %v", types)
	}
	res, err := adm.DeleteGroups(ctx, "share-g", "classic-g", "nope")
	if err != nil {
		t.Fatal(err)
	}
	for g, want := range map[string]error{"share-g": nil, "classic-g": nil, "nope": kerr.GroupIDNotFound} {
		if got := res[g].Err; got != want {
			t.Errorf("delete %s: %v, want %v", g, got, want)
		}
	}
	if listed, _ := adm.ListGroups(ctx); len(listed) != 0 {
		t.Fatalf("still listed: %v", listed.Groups())
	}
}
