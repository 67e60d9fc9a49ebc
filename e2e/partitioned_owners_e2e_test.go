package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
)

const notLeader = sharelogv1.ErrorCode_ERROR_CODE_NOT_LEADER_OR_FOLLOWER

// allOf is a ShareFetch's topics naming partitions 0..n-1 of t.
func allOf(n int32) []*sharelogv1.ShareFetchTopic {
	ft := &sharelogv1.ShareFetchTopic{Topic: "t"}
	for p := range n {
		ft.Partitions = append(ft.Partitions, &sharelogv1.ShareFetchPartition{Partition: p})
	}
	return []*sharelogv1.ShareFetchTopic{ft}
}

// byPartition indexes a ShareFetch response's partitions of topic t.
func byPartition(resp *sharelogv1.ShareFetchResponse) map[int32]*sharelogv1.ShareFetchPartitionResponse {
	out := map[int32]*sharelogv1.ShareFetchPartitionResponse{}
	for _, t := range resp.GetResponses() {
		for _, p := range t.GetPartitions() {
			out[p.GetPartition()] = p
		}
	}
	return out
}

// shareKeys lists the share bucket's keys (g.* and p.*).
func shareKeys(t *testing.T, js *jstest.Cluster, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j, err := njs.New(js.Connect(t))
	require.NoError(t, err)
	kv, err := j.KeyValue(ctx, sljs.ShareBucket(prefix))
	require.NoError(t, err)
	keys, err := kv.Keys(ctx)
	if errors.Is(err, njs.ErrNoKeysFound) {
		return nil
	}
	require.NoError(t, err)
	// "sync" is the share state store's read mark, no group's state.
	return slices.DeleteFunc(keys, func(k string) bool { return k == "sync" })
}

// In partitioned mode each share-partition is served by its partition's
// owner, as Kafka brokers serve the partitions they lead: a ShareFetch or
// ShareAcknowledge to any instance is answered there, partition by
// partition, NOT_LEADER_OR_FOLLOWER naming the owner for the partitions
// it does not own; the group's admin calls, through any instance, answer
// for every partition, each from its owner; deleting the group deletes
// every owner's share state.
func TestPartitionedSharePartitionsAtOwners(t *testing.T) {
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	ins := startTrioOn(t, js, prefix, func(c *app.Config) { c.Cluster.LeaseTTL = 3 * time.Second })
	ctx := context.Background()
	owners := waitOwners(t, ins[0], 3, []string{"a", "b", "c"})
	byID := map[string]*clusterInstance{}
	for _, in := range ins {
		byID[in.id] = in
	}
	for p := range int32(3) {
		for i := range 5 {
			produceRetry(t, ins[0], "t", p, fmt.Sprintf("%d-%d", p, i))
		}
	}
	earliest := "earliest"
	sg := func(in *clusterInstance) sharelogv1.ShareGroupServiceClient {
		return sharelogv1.NewShareGroupServiceClient(in.conn)
	}
	require.Eventually(t, func() bool {
		_, err = sg(ins[2]).UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{
			GroupId: "g", Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: &earliest}})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "update config: %v", err)

	// Once every instance serves its partition (its lease may be a moment
	// ahead of its share state, and its view of the others' leases a
	// moment behind), one session per instance, each naming every
	// partition: each serves the partition it owns, and names the owner
	// of the others.
	require.Eventually(t, func() bool {
		for _, in := range ins {
			resp, err := sg(in).ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "probe", ShareSessionEpoch: 0,
				MaxRecords: proto.Int32(0), Topics: allOf(3)})
			if err != nil {
				return false
			}
			for p, pr := range byPartition(resp) {
				owner := owners[p].GetOwnerId()
				if (owner == in.id) != (pr.GetErrorCode() == sharelogv1.ErrorCode_ERROR_CODE_NONE) ||
					owner != in.id && !strings.Contains(pr.GetErrorMessage(), "instance "+owner) {
					return false
				}
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "every instance serves its partition")
	for _, in := range ins {
		resp, err := sg(in).ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 0,
			MaxWaitMs: 5000, MinBytes: 1, Topics: allOf(3)})
		require.NoError(t, err)
		parts := byPartition(resp)
		require.Len(t, parts, 3, "%s: %v", in.id, resp)
		for p := range int32(3) {
			pr := parts[p]
			owner := owners[p].GetOwnerId()
			if owner == in.id {
				require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, pr.GetErrorCode(), "%s/%d: %v", in.id, p, pr)
				require.Len(t, pr.GetRecords(), 5, "%s serves its partition %d", in.id, p)
				continue
			}
			require.Equal(t, notLeader, pr.GetErrorCode(), "%s/%d: %v", in.id, p, pr)
			require.Contains(t, pr.GetErrorMessage(), "instance "+owner+" at "+byID[owner].srv.GRPCAddr())
			require.Empty(t, pr.GetRecords())
		}
		// An acknowledgement sent to an instance that does not own the
		// partition is refused there; the owner takes it.
		other := (owners[0].GetOwnerId() == in.id)
		p := int32(0)
		if other {
			p = 1
		}
		ack, err := sg(in).ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1,
			Topics: []*sharelogv1.ShareFetchTopic{{Topic: "t", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: p,
				AcknowledgementBatches: []*sharelogv1.AcknowledgementBatch{{FirstOffset: 0, LastOffset: 4,
					AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}}}}}}}})
		require.NoError(t, err)
		require.Equal(t, notLeader, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode())
	}
	for p := range int32(3) {
		owner := byID[owners[p].GetOwnerId()]
		ack, err := sg(owner).ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 2,
			Topics: []*sharelogv1.ShareFetchTopic{{Topic: "t", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: p,
				AcknowledgementBatches: []*sharelogv1.AcknowledgementBatch{{FirstOffset: 0, LastOffset: 4,
					AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}}}}}}}})
		require.NoError(t, err)
		require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode(), "%v", ack)
	}

	// The admin calls, through every instance, answer for every partition
	// from its owner.
	offsets := func(in *clusterInstance, topics []*sharelogv1.TopicPartitions) map[int32]int64 {
		t.Helper()
		resp, err := sg(in).DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "g", Topics: topics})
		require.NoError(t, err)
		out := map[int32]int64{}
		for _, tp := range resp.GetTopics() {
			require.Equal(t, "t", tp.GetTopic())
			for _, p := range tp.GetPartitions() {
				require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, p.GetErrorCode(), "%v", p)
				out[p.GetPartition()] = p.GetStartOffset()
			}
		}
		return out
	}
	for _, in := range ins {
		require.Equal(t, map[int32]int64{0: 5, 1: 5, 2: 5}, offsets(in, nil), "through %s, every topic", in.id)
		require.Equal(t, map[int32]int64{0: 5, 1: 5, 2: 5}, offsets(in, []*sharelogv1.TopicPartitions{{Topic: "t"}}), "through %s", in.id)
		st, err := sg(in).DescribeSharePartitionState(ctx, &sharelogv1.DescribeSharePartitionStateRequest{GroupId: "g"})
		require.NoError(t, err)
		require.Len(t, st.GetTopics(), 1)
		require.Len(t, st.GetTopics()[0].GetPartitions(), 3)
		for _, p := range st.GetTopics()[0].GetPartitions() {
			require.Equal(t, int64(5), p.GetStartOffset(), "through %s: %v", in.id, p)
		}
	}

	// The group has no members (raw fetches never joined): its offsets
	// can be altered, on every owner.
	alter := &sharelogv1.AlterShareGroupOffsetsRequest{GroupId: "g", Topics: []*sharelogv1.AlterShareGroupOffsetsTopic{{Topic: "t"}}}
	for p := range int32(3) {
		alter.Topics[0].Partitions = append(alter.Topics[0].Partitions, &sharelogv1.AlterShareGroupOffsetsPartition{Partition: p, StartOffset: 2})
	}
	ar, err := sg(ins[1]).AlterShareGroupOffsets(ctx, alter)
	require.NoError(t, err)
	for _, p := range ar.GetTopics()[0].GetPartitions() {
		require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, p.GetErrorCode(), "%v", p)
	}
	require.Equal(t, map[int32]int64{0: 2, 1: 2, 2: 2}, offsets(ins[0], nil))
	for p := range int32(3) {
		owner := byID[owners[p].GetOwnerId()]
		resp, err := sg(owner).ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m2", ShareSessionEpoch: 0,
			MaxWaitMs: 5000, MinBytes: 1, Topics: allOf(3)})
		require.NoError(t, err)
		got := byPartition(resp)[p].GetAcquiredRecords()
		require.Len(t, got, 1, "%v", resp)
		require.Equal(t, []int64{2, 4}, []int64{got[0].GetFirstOffset(), got[0].GetLastOffset()}, "partition %d from its new start", p)
	}

	dr, err := sg(ins[2]).DeleteShareGroupOffsets(ctx, &sharelogv1.DeleteShareGroupOffsetsRequest{GroupId: "g", Topics: []string{"t"}})
	require.NoError(t, err)
	require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, dr.GetTopics()[0].GetErrorCode(), "%v", dr)
	require.Equal(t, map[int32]int64{0: -1, 1: -1, 2: -1}, offsets(ins[1], []*sharelogv1.TopicPartitions{{Topic: "t"}}))

	// Some share state again, then the group goes, with every owner's keys.
	for _, in := range ins {
		_, err := sg(in).ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m3", ShareSessionEpoch: 0, Topics: allOf(3)})
		require.NoError(t, err)
	}
	require.NotEmpty(t, shareKeys(t, js, prefix))
	_, err = sg(ins[0]).DeleteShareGroup(ctx, &sharelogv1.DeleteShareGroupRequest{GroupId: "g"})
	require.NoError(t, err)
	require.Empty(t, shareKeys(t, js, prefix), "the share state of every owner is deleted")
	_, err = sg(ins[1]).DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "g"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)

	// The marker of a coordinator's call to the owners is the instances'
	// own: in a cluster without credentials anyone may send it, and it
	// only narrows the answer to the partitions the instance owns.
	octx := metadata.AppendToOutgoingContext(ctx, "sharelog-owned-only", "1")
	_, err = sg(ins[0]).DescribeShareGroupOffsets(octx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "g"})
	require.NoError(t, err)
}
