package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaTransactionsSIGKILL: a franz-go GroupTransactSession loop
// (consume "in", produce each record to "out" and commit the input
// offsets in one transaction) runs through SIGKILLs and restarts of the
// server on the same data directory and port (--fsync always); a session
// whose End fails is replaced by a new one with the same transactional id
// (which fences the old and aborts its transaction), as franz-go asks.
// Then a read-committed consumer of "out" reads every input record
// exactly once (docs/kafka.md "Transactions": a transaction in flight at
// a crash is completed or aborted, never half-visible).
func TestKafkaTransactionsSIGKILL(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--group-initial-rebalance-delay", "0"}
	c := startChild(t, dir, append([]string{"--kafka-addr", "127.0.0.1:0"}, args...)...)
	addr := c.kafkaAddr(t)
	const parts, inputs, kills = 2, 1000, 10
	k := dialKafka(t, addr)
	k.createTopic("in", parts)
	k.createTopic("out", parts)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	for i := range inputs {
		require.NoError(t, pcl.ProduceSync(ctx, &kgo.Record{Partition: int32(i % parts), Value: fmt.Appendf(nil, "v%04d", i)}).FirstErr())
	}
	pcl.Close()

	var commits, sessions atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			sessions.Add(1)
			runETLSession(ctx, t, []string{addr}, stop, &commits)
		}
	})

	waitCommits := func(n int64) {
		require.Eventually(t, func() bool { return commits.Load() >= n }, time.Minute, 10*time.Millisecond,
			"the ETL commits transactions (%d so far)", commits.Load())
	}
	for round := range kills {
		waitCommits(commits.Load() + 3)
		c.kill(t) // with a transaction in flight
		c = startChild(t, dir, append([]string{"--kafka-addr", addr}, args...)...)
		t.Logf("round %d: killed and restarted after %d commits", round, commits.Load())
	}

	// The group's committed offsets reach the end of the input.
	adm, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer adm.Close()
	admin := kadm.NewClient(adm)
	require.Eventually(t, func() bool {
		offs, err := admin.FetchOffsets(ctx, "etl")
		if err != nil {
			return false
		}
		total := int64(0)
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == "in" {
				total += o.At
			}
		})
		return total == inputs
	}, 2*time.Minute, 50*time.Millisecond, "the ETL consumes all of the input")
	close(stop)
	wg.Wait()

	// Read committed: every input once. Read uncommitted may hold more
	// (the aborted transactions' records).
	got := map[string]int{}
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	n := 0
	for n < inputs {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		fs := cons.PollFetches(pctx)
		timedOut := pctx.Err() != nil
		pcancel()
		if timedOut {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)]++; n++ })
	}
	for i := range inputs {
		v := fmt.Sprintf("v%04d", i)
		assert.Equal(t, 1, got[v], "%s in the committed output", v)
	}
	assert.Len(t, got, inputs, "nothing but the input")
	t.Logf("%d transactions committed by %d sessions through %d kills", commits.Load(), sessions.Load(), kills)
}

// runETLSession runs one GroupTransactSession until stop or until an End
// fails (then the caller starts another, as franz-go asks).
func runETLSession(ctx context.Context, t *testing.T, seeds []string, stop chan struct{}, commits *atomic.Int64) {
	s, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(seeds...), kgo.TransactionalID("etl-tx"),
		kgo.TransactionTimeout(10*time.Second), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumerGroup("etl"), kgo.ConsumeTopics("in"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DefaultProduceTopic("out"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequestRetries(100), kgo.RetryTimeout(time.Minute), kgo.SessionTimeout(6*time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Errorf("new session: %v", err)
		return
	}
	defer s.Close()
	for {
		select {
		case <-stop:
			return
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := s.PollRecords(pctx, 10) // small transactions: many of them go through the kills
		pcancel()
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if err := s.Begin(); err != nil {
			t.Logf("begin: %v", err)
			return
		}
		fs.EachRecord(func(r *kgo.Record) {
			// Keyed by the value: a change stream of the output (whose
			// changes are keyed records') carries each one.
			s.Produce(ctx, &kgo.Record{Partition: r.Partition, Key: r.Value, Value: r.Value}, nil)
		})
		committed, err := s.End(ctx, kgo.TryCommit)
		if err != nil {
			t.Logf("end: %v (a new session takes over)", err)
			return
		}
		if committed {
			commits.Add(1)
		}
	}
}
