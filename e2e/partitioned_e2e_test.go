package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sharelog/sharelog/client/router"
	"github.com/sharelog/sharelog/client/shareconsumer"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
)

func partitionedMode(c *app.Config) { c.Cluster.Mode = app.ModePartitioned }

// owners is partition → (owner, epoch) as DescribeCluster answers, once
// every partition of the topic has an owner and they are spread evenly
// over want instances.
func waitOwners(t *testing.T, in *clusterInstance, partitions int, want []string) map[int32]*sharelogv1.PartitionOwner {
	t.Helper()
	var last *sharelogv1.DescribeClusterResponse
	var lastErr error
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		last, lastErr = in.log.DescribeCluster(context.Background(), &sharelogv1.DescribeClusterRequest{})
		if lastErr == nil && len(last.GetPartitions()) == partitions && len(last.GetInstances()) == len(want) {
			count := map[string]int{}
			out := map[int32]*sharelogv1.PartitionOwner{}
			for _, p := range last.GetPartitions() {
				count[p.GetOwnerId()]++
				out[p.GetPartition()] = p
			}
			ok := len(count) == len(want)
			for _, id := range want {
				c := count[id]
				ok = ok && c >= partitions/len(want) && c <= (partitions+len(want)-1)/len(want)
			}
			if ok {
				return out
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("partitions not spread over %v within 20s: %v %v", want, last, lastErr)
	return nil
}

// produceRetry produces to one partition through in, retrying while the
// answer is retryable (ownership moving).
func produceRetry(t *testing.T, in *clusterInstance, topic string, p int32, value string) int64 {
	t.Helper()
	var resp *sharelogv1.ProduceResponse
	var err error
	require.Eventually(t, func() bool {
		resp, err = in.log.Produce(context.Background(), &sharelogv1.ProduceRequest{Topic: topic, Partition: &p,
			Records: []*sharelogv1.Record{{Value: []byte(value)}}})
		return err == nil
	}, 15*time.Second, 20*time.Millisecond, "produce %s to %s-%d: %v", value, topic, p, err)
	return resp.GetResults()[0].GetOffset()
}

// fetchValues reads a partition from offset from on.
func fetchValues(t *testing.T, in *clusterInstance, topic string, p int32, from int64) []string {
	t.Helper()
	var fr *sharelogv1.FetchResponse
	var err error
	if !assert.Eventually(t, func() bool {
		fr, err = in.log.Fetch(context.Background(), &sharelogv1.FetchRequest{Topic: topic, Partition: p, Offset: from, MaxRecords: 1000})
		return err == nil
	}, 15*time.Second, 20*time.Millisecond) {
		t.Fatalf("fetch %s-%d from %d: %v", topic, p, from, err)
	}
	var out []string
	for _, r := range fr.GetRecords() {
		out = append(out, string(r.GetValue()))
	}
	return out
}

func TestPartitionedSpreadMoveAndJoin(t *testing.T) {
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	a := startClusterInstance(t, js, prefix, "a", partitionedMode)
	b := startClusterInstance(t, js, prefix, "b", partitionedMode)
	c := startClusterInstance(t, js, prefix, "c", partitionedMode)
	for _, in := range []*clusterInstance{a, b, c} {
		in.waitReadyz(t, "cluster: partitioned", 10*time.Second)
	}
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, err = b.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "t", Partitions: 6})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "create: %v", err)

	// Two partitions per instance; every instance takes every call.
	before := waitOwners(t, a, 6, []string{"a", "b", "c"})
	want := map[int32][]string{}
	for p := range int32(6) {
		for i, in := range []*clusterInstance{a, b, c} {
			v := fmt.Sprintf("p%d-%s", p, in.id)
			require.Equal(t, int64(i), produceRetry(t, in, "t", p, v), "offsets are dense whichever instance takes the call")
			want[p] = append(want[p], v)
		}
	}
	// A produce routed by key spans owners: each partition's batch goes to
	// its owner.
	var recs []*sharelogv1.Record
	for i := range 30 {
		recs = append(recs, &sharelogv1.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "k%d", i)})
	}
	resp, err := c.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Records: recs})
	require.NoError(t, err)
	for i, r := range resp.GetResults() {
		require.Equal(t, int64(len(want[r.GetPartition()])), r.GetOffset())
		want[r.GetPartition()] = append(want[r.GetPartition()], fmt.Sprintf("k%d", i))
	}
	for p := range int32(6) {
		assert.Equal(t, want[p], fetchValues(t, b, "t", p, 0), "partition %d", p)
	}
	// A purge over every partition is split by owner.
	purge := &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: "t"}}}
	for p := range int32(6) {
		purge.Topics[0].Partitions = append(purge.Topics[0].Partitions, &sharelogv1.PurgePartition{Partition: 5 - p, Offset: 1})
	}
	pr, err := a.log.Purge(ctx, purge)
	require.NoError(t, err)
	for i, r := range pr.GetTopics()[0].GetPartitions() {
		require.Equal(t, int32(5-i), r.GetPartition(), "answers in the request's order")
		require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, r.GetErrorCode(), r.GetErrorMessage())
		require.Equal(t, int64(1), r.GetLowWatermark())
	}
	for p := range int32(6) {
		want[p] = want[p][1:]
	}

	// c leaves: only its partitions move, to a and b; the others keep
	// their owner and epoch. Nothing acknowledged is lost.
	require.NoError(t, c.srv.Close())
	after := waitOwners(t, a, 6, []string{"a", "b"})
	for p, o := range before {
		if o.GetOwnerId() != "c" {
			require.Equal(t, o.GetOwnerId(), after[p].GetOwnerId(), "partition %d moved though its owner lived", p)
			require.Equal(t, o.GetEpoch(), after[p].GetEpoch(), "partition %d changed term", p)
		} else {
			require.Greater(t, after[p].GetEpoch(), o.GetEpoch())
		}
	}
	for p := range int32(6) {
		v := fmt.Sprintf("p%d-after-c", p)
		require.Equal(t, int64(len(want[p])+1), produceRetry(t, b, "t", p, v))
		want[p] = append(want[p], v)
		assert.Equal(t, want[p], fetchValues(t, a, "t", p, 1), "partition %d", p)
	}

	// d joins: it takes a fair share (two), moved from a and b.
	d := startClusterInstance(t, js, prefix, "d", partitionedMode)
	d.waitReadyz(t, "cluster: partitioned", 10*time.Second)
	joined := waitOwners(t, d, 6, []string{"a", "b", "d"})
	moved := 0
	for p, o := range joined {
		if o.GetOwnerId() != after[p].GetOwnerId() {
			require.Equal(t, "d", o.GetOwnerId())
			moved++
		}
	}
	require.Equal(t, 2, moved)
	for p := range int32(6) {
		v := fmt.Sprintf("p%d-after-d", p)
		require.Equal(t, int64(len(want[p])+1), produceRetry(t, d, "t", p, v))
		want[p] = append(want[p], v)
		assert.Equal(t, want[p], fetchValues(t, b, "t", p, 1), "partition %d", p)
	}
}

// A share group is served by its coordinator whichever instance a consumer
// uses, reading partitions owned by every instance; change streams are
// served by each partition's owner, whichever instance they reach.
func TestPartitionedShareGroupsAndChangeStreams(t *testing.T) {
	ins := startPartitionedTrio(t)
	ctx := context.Background()
	total := 0
	for p := range int32(3) {
		for i := range 10 {
			produceRetry(t, ins[i%3], "t", p, fmt.Sprintf("%d-%d", p, i))
			total++
		}
	}

	// One consumer through c: every record delivered once, accepted.
	earliest := "earliest"
	var err error
	require.Eventually(t, func() bool { // the coordinator may still be taking its lease
		_, err = sharelogv1.NewShareGroupServiceClient(ins[0].conn).UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{
			GroupId: "g", Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: &earliest}})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "update config: %v", err)
	sc, err := shareconsumer.New(ins[2].conn, shareconsumer.Config{GroupID: "g", Topics: []string{"t"}, MaxWait: 100 * time.Millisecond, Dial: dialInsecure})
	require.NoError(t, err)
	seen := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < total && time.Now().Before(deadline) {
		recs, err := sc.Poll(ctx)
		require.NoError(t, err)
		for _, r := range recs {
			seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++
			assert.Equal(t, int32(1), r.DeliveryCount)
		}
	}
	require.NoError(t, sc.Close(ctx))
	require.Len(t, seen, total)
	for k, n := range seen {
		require.Equal(t, 1, n, "record %s delivered %d times", k, n)
	}
	dc, err := ins[1].log.DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
	require.NoError(t, err)
	require.Equal(t, app.ModePartitioned, dc.GetMode())
	require.Len(t, dc.GetGroups(), 1)
	coordinator := dc.GetGroups()[0].GetCoordinatorId()
	require.Contains(t, []string{"a", "b", "c"}, coordinator)
	require.Positive(t, dc.GetGroups()[0].GetEpoch())
	for _, in := range ins {
		code, body := in.readyz(t)
		require.Equal(t, 200, code)
		if in.id == coordinator {
			require.Contains(t, body, "coordinating 1 share groups")
		} else {
			require.Contains(t, body, "coordinating 0 share groups")
		}
	}

	// client/router sends each partition's calls straight to its owner.
	owners := waitOwners(t, ins[0], 3, []string{"a", "b", "c"})
	addr := map[string]string{}
	for _, in := range ins {
		addr[in.id] = in.srv.GRPCAddr()
	}
	d := &countingDialer{calls: map[string]int{}}
	rc := router.New(ins[0].conn, d.dial(t), router.Options{})
	t.Cleanup(func() { _ = rc.Close() })
	for p := range int32(3) {
		owner := addr[owners[p].GetOwnerId()]
		before := d.count(owner)
		_, err := sharelogv1.NewLogServiceClient(rc).Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Partition: p})
		require.NoError(t, err)
		require.Equal(t, before+1, d.count(owner), "partition %d's fetch went to its owner %s", p, owners[p].GetOwnerId())
	}

	// A change stream of each partition through each instance.
	end := int64(10)
	for p := range int32(3) {
		for _, in := range ins {
			cs, err := sharelogv1.NewChangeStreamServiceClient(in.conn).StreamChanges(ctx,
				&sharelogv1.StreamChangesRequest{Topic: "t", Partition: p, EndOffset: &end})
			require.NoError(t, err)
			var last *sharelogv1.StreamEnd
			for {
				resp, err := cs.Recv()
				if err == io.EOF {
					break
				}
				require.NoError(t, err, "stream of %d through %s", p, in.id)
				for _, ev := range resp.GetEvents() {
					if ev.GetStreamEnd() != nil {
						last = ev.GetStreamEnd()
					}
				}
			}
			require.NotNil(t, last, "stream of %d through %s ended without stream_end", p, in.id)
			require.Equal(t, sharelogv1.StreamEndReason_STREAM_END_REASON_OK, last.GetReason())

			// The owner's refusal, with its metadata, through every instance.
			other := "00000000-0000-4000-8000-000000000000"
			cs, err = sharelogv1.NewChangeStreamServiceClient(in.conn).StreamChanges(ctx,
				&sharelogv1.StreamChangesRequest{Topic: "t", Partition: p, TopicId: &other})
			require.NoError(t, err)
			_, err = cs.Recv()
			info := requireReason(t, err, codes.FailedPrecondition, "ROLLBACK_REQUIRED")
			assert.Equal(t, "topic_recreated", info.GetMetadata()["cause"], "stream of %d through %s", p, in.id)
			assert.NotEqual(t, other, info.GetMetadata()["topic_id"])
		}
	}
}

// An instance started with the other --cluster-mode refuses to join: it
// takes no lease, writes no heartbeat, says why in /readyz, and the
// cluster goes on without it.
func TestClusterModesDoNotMix(t *testing.T) {
	js, prefix, a := startPartitionedSolo(t, 2)
	ctx := context.Background()
	waitOwners(t, a, 2, []string{"a"})

	b := startClusterInstance(t, js, prefix, "b") // active-standby, the default
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = b.readyz(t)
		return code == http.StatusServiceUnavailable &&
			strings.Contains(body, "refused to join: instance a at "+a.srv.GRPCAddr()+" runs --cluster-mode partitioned, this one active-standby")
	}, 10*time.Second, 50*time.Millisecond, "readyz of b: %s", body)
	_, err := b.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: proto.Int32(0),
		Records: []*sharelogv1.Record{{Value: []byte("x")}}})
	require.Equal(t, codes.Unavailable, status.Code(err), "b serves nothing: %v", err)

	// a keeps both partitions, does not list b, and serves.
	time.Sleep(2 * time.Second) // two lease TTLs: b would have a heartbeat and a placement by now
	dc, err := a.log.DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
	require.NoError(t, err)
	require.Len(t, dc.GetInstances(), 1)
	for _, p := range dc.GetPartitions() {
		require.Equal(t, "a", p.GetOwnerId())
	}
	require.Equal(t, int64(0), produceRetry(t, a, "t", 0, "v"))
}

// With tokens on, a dead-letter copy the coordinator appends at another
// instance (the owner of the dead-letter partition) presents the
// cluster's instance secret: every rejected record reaches the
// dead-letter topic, whichever instance owns its partition.
func TestPartitionedDeadLettersWithTokens(t *testing.T) {
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("admin s3cret-admin-token\n"), 0o600))
	withTokens := func(c *app.Config) { c.AuthTokensFile = tokens }
	a := startClusterInstance(t, js, prefix, "a", partitionedMode, withTokens)
	b := startClusterInstance(t, js, prefix, "b", partitionedMode, withTokens)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret-admin-token")
	for _, in := range []*clusterInstance{a, b} {
		require.Eventually(t, func() bool { code, _ := in.readyz(t); return code == http.StatusOK }, 10*time.Second, 50*time.Millisecond)
	}
	for _, topic := range []string{"src", "dlq"} {
		require.Eventually(t, func() bool {
			_, err = a.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: topic, Partitions: 4})
			return err == nil || status.Code(err) == codes.AlreadyExists
		}, 10*time.Second, 50*time.Millisecond, "create %s: %v", topic, err)
	}
	// Eight partitions over two instances: the dead-letter partition of
	// some source partitions is owned by the other instance than the
	// source partition, whose owner makes the copy.
	var dc *sharelogv1.DescribeClusterResponse
	require.Eventually(t, func() bool {
		dc, err = a.log.DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
		if err != nil || len(dc.GetPartitions()) != 8 {
			return false
		}
		owners := map[string]int{}
		for _, p := range dc.GetPartitions() {
			owners[p.GetOwnerId()]++
		}
		return owners["a"] == 4 && owners["b"] == 4
	}, 15*time.Second, 50*time.Millisecond, "spread: %v %v", dc, err)
	for p := range int32(4) {
		require.Eventually(t, func() bool {
			_, err = a.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "src", Partition: proto.Int32(p),
				Records: []*sharelogv1.Record{{Value: fmt.Appendf(nil, "bad-%d", p)}}})
			return err == nil
		}, 10*time.Second, 50*time.Millisecond, "produce: %v", err)
	}
	sg := sharelogv1.NewShareGroupServiceClient(a.conn)
	require.Eventually(t, func() bool {
		_, err = sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
			Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest"), DeadLetterTopic: proto.String("dlq")}})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "update config: %v", err)

	// Acquire every record and REJECT it: each partition's record from its
	// owner (a session on each instance, naming every partition).
	parts := make([]*sharelogv1.ShareFetchPartition, 4)
	for p := range int32(4) {
		parts[p] = &sharelogv1.ShareFetchPartition{Partition: p}
	}
	type acquired struct {
		off int64
		in  *clusterInstance
	}
	got := map[int32]acquired{}
	epochs := map[string]int32{}
	deadline := time.Now().Add(15 * time.Second)
	for len(got) < 4 && time.Now().Before(deadline) {
		for _, in := range []*clusterInstance{a, b} {
			resp, err := sharelogv1.NewShareGroupServiceClient(in.conn).ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m",
				ShareSessionEpoch: epochs[in.id], MaxWaitMs: 200, Topics: []*sharelogv1.ShareFetchTopic{{Topic: "src", Partitions: parts}}})
			if err != nil {
				epochs[in.id] = 0
				time.Sleep(50 * time.Millisecond)
				continue
			}
			epochs[in.id]++
			for _, tr := range resp.GetResponses() {
				for _, pr := range tr.GetPartitions() {
					for _, ar := range pr.GetAcquiredRecords() {
						got[pr.GetPartition()] = acquired{ar.GetFirstOffset(), in}
					}
				}
			}
		}
	}
	require.Len(t, got, 4, "every source record acquired")
	for _, in := range []*clusterInstance{a, b} {
		var acks []*sharelogv1.ShareFetchPartition
		for p, ac := range got {
			if ac.in == in {
				acks = append(acks, &sharelogv1.ShareFetchPartition{Partition: p, AcknowledgementBatches: []*sharelogv1.AcknowledgementBatch{{
					FirstOffset: ac.off, LastOffset: ac.off, AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_REJECT}}}})
			}
		}
		require.NotEmpty(t, acks, "%s owns no source partition", in.id)
		resp, err := sharelogv1.NewShareGroupServiceClient(in.conn).ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g",
			MemberId: "m", ShareSessionEpoch: epochs[in.id], Topics: []*sharelogv1.ShareFetchTopic{{Topic: "src", Partitions: acks}}})
		require.NoError(t, err)
		for _, tr := range resp.GetResponses() {
			for _, pr := range tr.GetPartitions() {
				require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, pr.GetErrorCode(), "partition %d", pr.GetPartition())
			}
		}
	}

	// One copy in each dead-letter partition, local or remote.
	for p := range int32(4) {
		var recs []*sharelogv1.Record
		require.Eventually(t, func() bool {
			r, err := a.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "dlq", Partition: p, Offset: 0, MaxRecords: 10})
			recs = r.GetRecords()
			return err == nil && len(recs) == 1
		}, 15*time.Second, 100*time.Millisecond, "dead-letter partition %d: %v", p, recs)
		require.Equal(t, fmt.Sprintf("bad-%d", p), string(recs[0].GetValue()))
	}

	// The coordinator's calls to the owners carry the instance secret: the
	// offsets of every partition, through either instance; a client
	// claiming to be an instance is refused.
	for _, in := range []*clusterInstance{a, b} {
		var offs *sharelogv1.DescribeShareGroupOffsetsResponse
		require.Eventually(t, func() bool { // retryable while the group moves
			offs, err = sharelogv1.NewShareGroupServiceClient(in.conn).DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "g"})
			return status.Code(err) != codes.Unavailable
		}, 10*time.Second, 50*time.Millisecond, "%v", err)
		require.NoError(t, err)
		require.Len(t, offs.GetTopics(), 1, "%v", offs)
		for _, po := range offs.GetTopics()[0].GetPartitions() {
			require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, po.GetErrorCode(), "%v", po)
			require.Equal(t, int64(1), po.GetStartOffset(), "through %s: partition %d", in.id, po.GetPartition())
		}
	}
	forged := metadata.AppendToOutgoingContext(ctx, "sharelog-owned-only", "s3cret-admin-token")
	_, err = sharelogv1.NewShareGroupServiceClient(b.conn).DescribeShareGroupOffsets(forged, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "g"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "between the instances of a cluster")
}
