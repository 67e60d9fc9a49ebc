package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// groupServerArgs start a child with the Kafka listener and a short
// initial rebalance delay.
var groupServerArgs = []string{"--kafka-addr", "127.0.0.1:0", "--group-initial-rebalance-delay", "100ms"}

func kgoClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RetryTimeout(20 * time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func createKafkaTopic(t *testing.T, addr, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := kadm.NewClient(kgoClient(t, addr)).CreateTopic(ctx, partitions, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, res.Err)
}

func produceRecords(t *testing.T, addr, topic string, partitions int32, n int) {
	t.Helper()
	cl := kgoClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(fmt.Sprint(i))})
	}
	require.NoError(t, cl.ProduceSync(ctx, rs...).FirstErr())
}

// member is one kgo group consumer and the partitions it owns now.
type member struct {
	cl   *kgo.Client
	mu   sync.Mutex
	owns map[int32]bool
	done chan struct{}
}

func (m *member) owned() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int32
	for p := range m.owns {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func joinMember(t *testing.T, addr, group, topic string, opts ...kgo.Opt) *member {
	t.Helper()
	m := &member{owns: map[int32]bool{}, done: make(chan struct{})}
	set := func(ps map[string][]int32, own bool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, p := range ps[topic] {
			if own {
				m.owns[p] = true
			} else {
				delete(m.owns, p)
			}
		}
	}
	m.cl = kgoClient(t, addr, append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { set(ps, true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { set(ps, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { set(ps, false) }),
	}, opts...)...)
	go func() { // poll, so that the client joins, heartbeats and rebalances
		defer close(m.done)
		for {
			fs := m.cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
		}
	}()
	return m
}

// Two kgo members of one group split the partitions; when one leaves the
// other takes them all. Run with kgo's default balancer
// (cooperative-sticky) and with the eager range balancer.
func TestKafkaConsumerGroupSplitAndTakeOver(t *testing.T) {
	c := startChild(t, t.TempDir(), groupServerArgs...)
	addr := c.kafkaAddr(t)
	for name, bal := range map[string]kgo.GroupBalancer{"cooperative-sticky": kgo.CooperativeStickyBalancer(), "range": kgo.RangeBalancer()} {
		t.Run(name, func(t *testing.T) {
			topic := "split-" + name
			createKafkaTopic(t, addr, topic, 4)
			a := joinMember(t, addr, "g-"+name, topic, kgo.Balancers(bal))
			b := joinMember(t, addr, "g-"+name, topic, kgo.Balancers(bal))
			split := func() bool {
				pa, pb := a.owned(), b.owned()
				if len(pa) != 2 || len(pb) != 2 {
					return false
				}
				all := map[int32]bool{}
				for _, p := range append(pa, pb...) {
					all[p] = true
				}
				return len(all) == 4
			}
			require.Eventually(t, split, 60*time.Second, 20*time.Millisecond, "two members split 4 partitions (a %v, b %v)", a.owned(), b.owned())

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			d, err := kadm.NewClient(kgoClient(t, addr)).DescribeGroups(ctx, "g-"+name)
			require.NoError(t, err)
			g := d["g-"+name]
			require.NoError(t, g.Err)
			assert.Equal(t, "Stable", g.State)
			assert.Equal(t, name, g.Protocol)
			assert.Len(t, g.Members, 2)

			b.cl.Close() // leaves the group
			<-b.done
			require.Eventually(t, func() bool { return len(a.owned()) == 4 }, 60*time.Second, 20*time.Millisecond,
				"the remaining member takes every partition (has %v)", a.owned())
		})
	}
}

// consumeAndCommit consumes want records of topic in group and commits them
// synchronously; it returns the records' values.
func consumeAndCommit(t *testing.T, addr, group, topic string, want int) []string {
	t.Helper()
	cl := kgoClient(t, addr, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []string
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %d of %d", len(got), want)
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		require.NoError(t, cl.CommitUncommittedOffsets(ctx))
	}
	return got
}

func committed(t *testing.T, addr, group string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(kgoClient(t, addr)).FetchOffsets(ctx, group)
	require.NoError(t, err)
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		require.NoError(t, o.Err)
		out[o.Partition] = o.At
	})
	return out
}

// Committed offsets survive a restart: the group resumes after them.
func TestKafkaCommittedOffsetsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, dir, groupServerArgs...)
	addr := c.kafkaAddr(t)
	createKafkaTopic(t, addr, "resume", 3)
	produceRecords(t, addr, "resume", 3, 30)
	assert.Len(t, consumeAndCommit(t, addr, "g", "resume", 30), 30)
	require.Equal(t, map[int32]int64{0: 10, 1: 10, 2: 10}, committed(t, addr, "g"))
	c.stop(t)

	c = startChild(t, dir, groupServerArgs...)
	addr = c.kafkaAddr(t)
	assert.Equal(t, map[int32]int64{0: 10, 1: 10, 2: 10}, committed(t, addr, "g"), "after the restart")
	produceRecords(t, addr, "resume", 3, 6)
	got := consumeAndCommit(t, addr, "g", "resume", 6)
	sort.Strings(got)
	assert.Equal(t, []string{"0", "1", "2", "3", "4", "5"}, got, "only the records after the commits")
}

// Committed offsets never go backwards across a SIGKILL: every commit the
// server acknowledged is there after the restart (--fsync always).
func TestKafkaCommittedOffsetsSurviveSIGKILL(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, dir, groupServerArgs...)
	addr := c.kafkaAddr(t)
	createKafkaTopic(t, addr, "crash", 2)
	adm := kadm.NewClient(kgoClient(t, addr, kgo.RetryTimeout(time.Second)))

	var mu sync.Mutex
	acked := map[int32]int64{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for off := int64(1); ; off++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			os := kadm.Offsets{}
			os.Add(kadm.Offset{Topic: "crash", Partition: 0, At: off, LeaderEpoch: -1})
			os.Add(kadm.Offset{Topic: "crash", Partition: 1, At: 2 * off, LeaderEpoch: -1})
			res, err := adm.CommitOffsets(ctx, "crashers", os)
			cancel()
			if err != nil || res.Error() != nil {
				return // the server is gone
			}
			mu.Lock()
			acked[0], acked[1] = off, 2*off
			mu.Unlock()
		}
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return acked[0] >= 50 }, 60*time.Second, 5*time.Millisecond)
	c.kill(t)
	close(stop)
	<-done
	mu.Lock()
	last := map[int32]int64{0: acked[0], 1: acked[1]}
	mu.Unlock()

	c = startChild(t, dir, groupServerArgs...)
	got := committed(t, c.kafkaAddr(t), "crashers")
	assert.GreaterOrEqual(t, got[0], last[0], "partition 0: acknowledged %d", last[0])
	assert.GreaterOrEqual(t, got[1], last[1], "partition 1: acknowledged %d", last[1])
	assert.LessOrEqual(t, got[0], last[0]+1, "at most the commit in flight at the kill")
}
