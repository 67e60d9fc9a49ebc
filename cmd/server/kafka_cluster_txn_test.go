package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// TestKafkaActiveStandbyTransactionsFailover: in active-standby mode a
// franz-go GroupTransactSession loop (consume "in", produce each record
// to "out" and commit the input offsets in one transaction) runs through
// a SIGKILL of the active instance, which coordinates every transactional
// id. Before the kill, FindCoordinator for the id names the active at
// both instances and the standby answers the id's InitProducerID
// NOT_COORDINATOR; a second producer leaves a transaction open on "out".
// After it, the new active loaded the ids' state from the cluster's KV:
// it describes the open transaction and aborts it once its timeout
// passes, and the loop carries on there. Then a read-committed consumer
// of "out" reads every input record exactly once and nothing else
// (docs/kafka.md "Transactions").
func TestKafkaActiveStandbyTransactionsFailover(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	args := []string{"--group-initial-rebalance-delay", "0"}
	a := startKafkaMember(t, js.URL(), prefix, "a", args...)
	a.waitReadyz(t, "cluster: active", 20*time.Second)
	b := startKafkaMember(t, js.URL(), prefix, "b", args...)
	b.waitReadyz(t, "forwarding to a", 15*time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range []*kafkaMember{a, b} {
				t.Logf("last log lines of %s:\n%s", m.id, strings.Join(m.logs.Tail(100), "\n"))
			}
		}
	})
	seeds := []string{a.kafka, b.kafka}
	const parts, inputs = 2, 400
	createKafkaTopic(t, a.kafka, "in", parts)
	createKafkaTopic(t, a.kafka, "out", parts)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(a.kafka), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	var rs []*kgo.Record
	for i := range inputs {
		rs = append(rs, &kgo.Record{Partition: int32(i % parts), Value: fmt.Appendf(nil, "v%04d", i)})
	}
	require.NoError(t, pcl.ProduceSync(ctx, rs...).FirstErr())
	pcl.Close()

	// The coordinator of a transactional id is the active instance, as
	// both answer; the standby refuses the id's calls NOT_COORDINATOR.
	nodes := brokerIDs(kafkaMetadata(t, a.kafka))
	for _, m := range []*kafkaMember{a, b} {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.Version, fc.CoordinatorType, fc.CoordinatorKeys = 4, 1, []string{"etl-tx"}
		co := dialKafka(t, m.kafka).do(fc).(*kmsg.FindCoordinatorResponse).Coordinators[0]
		require.Zero(t, co.ErrorCode, "FindCoordinator at %s", m.id)
		assert.Equal(t, nodes[a.kafka], co.NodeID, "FindCoordinator at %s names the active", m.id)
	}
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.Version = 4
	tid := "etl-tx"
	ip.TransactionalID, ip.TransactionTimeoutMillis, ip.ProducerID, ip.ProducerEpoch = &tid, 10000, -1, -1
	assert.Equal(t, kerr.NotCoordinator.Code, dialKafka(t, b.kafka).do(ip).(*kmsg.InitProducerIDResponse).ErrorCode)

	// A transaction left open at the active: its records are behind the
	// last stable offset until the next active aborts it.
	open, err := kgo.NewClient(kgo.SeedBrokers(a.kafka), kgo.TransactionalID("left-open"), kgo.TransactionTimeout(4*time.Second),
		kgo.DefaultProduceTopic("out"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	require.NoError(t, open.BeginTransaction())
	for p := range int32(parts) {
		require.NoError(t, open.ProduceSync(ctx, &kgo.Record{Partition: p, Key: []byte("left-open"), Value: []byte("left-open")}).FirstErr())
	}
	// Its records hold the last stable offset of "out" at their offset (0),
	// while the high watermark is past them.
	acl, err := kgo.NewClient(kgo.SeedBrokers(a.kafka))
	require.NoError(t, err)
	aadm := kadm.NewClient(acl)
	ends, err := aadm.ListEndOffsets(ctx, "out")
	require.NoError(t, err)
	stable, err := aadm.ListCommittedOffsets(ctx, "out")
	require.NoError(t, err)
	for p := range int32(parts) {
		e, _ := ends.Lookup("out", p)
		s, _ := stable.Lookup("out", p)
		assert.Equal(t, int64(1), e.Offset, "out-%d's high watermark", p)
		assert.Equal(t, int64(0), s.Offset, "out-%d's last stable offset, at the open transaction", p)
	}
	acl.Close()

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
			runETLSession(ctx, t, seeds, stop, &commits)
		}
	})
	require.Eventually(t, func() bool { return commits.Load() >= 5 }, time.Minute, 10*time.Millisecond,
		"the ETL commits transactions at the active (%d so far)", commits.Load())
	a.kill(t) // with an ETL transaction in flight, most likely, and "left-open" open
	open.Close()
	before := commits.Load()
	b.waitReadyz(t, "cluster: active", leaseTTL+20*time.Second)
	t.Logf("killed the active after %d commits", before)

	// The new active coordinates the ids it loaded: "left-open" is there,
	// open, then aborted by its timeout.
	adm, err := kgo.NewClient(kgo.SeedBrokers(b.kafka), kgo.RetryTimeout(20*time.Second))
	require.NoError(t, err)
	defer adm.Close()
	admin := kadm.NewClient(adm)
	require.Eventually(t, func() bool {
		ds, err := admin.DescribeTransactions(ctx, "left-open")
		if err != nil {
			return false
		}
		d, ok := ds["left-open"]
		return ok && d.Err == nil && d.State == "CompleteAbort"
	}, 30*time.Second, 100*time.Millisecond, "the new active aborts the transaction left open")

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
	assert.Greater(t, commits.Load(), before, "transactions commit at the new active")
	// Nothing is open any more: the last stable offsets are the ends.
	require.Eventually(t, func() bool {
		ends, err := admin.ListEndOffsets(ctx, "out")
		if err != nil || ends.Error() != nil {
			return false
		}
		stable, err := admin.ListCommittedOffsets(ctx, "out")
		if err != nil || stable.Error() != nil {
			return false
		}
		for p := range int32(parts) {
			e, _ := ends.Lookup("out", p)
			s, _ := stable.Lookup("out", p)
			if e.Offset != s.Offset {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the last stable offsets reach the high watermarks at the new active")

	got := map[string]int{}
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.kafka), kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	for n := 0; n < inputs; {
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
	assert.Len(t, got, inputs, "nothing but the input (the transaction left open is aborted)")

	// A change stream at the new active delivers committed records only
	// (docs/change-streams.md "Transactions"; the output's records are
	// keyed by their values): the same, every input once.
	streamed := map[string]int{}
	streams := sharelogv1.NewChangeStreamServiceClient(b.conn)
	for p := range int32(parts) {
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		st, err := streams.StreamChanges(sctx, &sharelogv1.StreamChangesRequest{Topic: "out", Partition: p})
		require.NoError(t, err)
		for n := 0; n < inputs/parts; {
			m, err := st.Recv()
			require.NoError(t, err, "out-%d: streamed %d of %d", p, n, inputs/parts)
			for _, ev := range m.GetEvents() {
				if mu := ev.GetMutation(); mu != nil {
					streamed[string(mu.GetValue())]++
					n++
				}
			}
		}
		scancel()
	}
	assert.Equal(t, got, streamed, "the change streams deliver what read committed reads")
	t.Logf("%d transactions committed by %d sessions through the failover (%d after it)", commits.Load(), sessions.Load(), commits.Load()-before)
}

// Partitioned mode does not serve transactions yet (docs/kafka.md
// "Transactions", "Cluster mode"): FindCoordinator for a transactional id
// and InitProducerID with one answer INVALID_REQUEST (final, so that a
// transactional producer fails at once), and the transaction APIs are not
// advertised; idempotent producers are served.
func TestKafkaPartitionedRefusesTransactions(t *testing.T) {
	js := startJS(t)
	a := startKafkaMember(t, js.URL(), js.Prefix(), "a", "--cluster-mode", "partitioned")
	a.waitReadyz(t, "cluster: partitioned", 15*time.Second)
	k := dialKafka(t, a.kafka)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorType, fc.CoordinatorKeys = 4, 1, []string{"tx"}
	assert.Equal(t, kerr.InvalidRequest.Code, k.do(fc).(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode)
	tid := "tx"
	assert.Equal(t, kerr.InvalidRequest.Code, k.initProducerID(4, &tid, -1, -1).ErrorCode)
	ip := k.initProducerID(4, nil, -1, -1)
	assert.Zero(t, ip.ErrorCode)
	assert.Positive(t, ip.ProducerID)
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	for _, key := range k.do(av).(*kmsg.ApiVersionsResponse).ApiKeys {
		assert.NotContains(t, []int16{24, 25, 26, 28, 65, 66}, key.ApiKey, "transaction API %d advertised", key.ApiKey)
	}
}
