package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// kafkaACLPrincipal is the Kafka connection's principal: it logs in with
// SASL PLAIN as "app" (its token in the tokens file), and the bindings
// under test are User:app's, as they would be over gRPC.
const kafkaACLPrincipal = "User:app"

type kperm struct {
	rt   sharelogv1.ResourceType
	name string
	op   sharelogv1.AclOperation
}

// kafkaACLCase is one Kafka API: call returns the code the denial shows
// in (and 0 on success); state reads, as the super user over gRPC, what a
// denied call must not change.
type kafkaACLCase struct {
	name   string
	needs  []kperm
	denied int16 // the code without the permission
	// deniedBy, when set, is the code without needs[i] instead.
	deniedBy []int16
	call     func(k *kafkaConn) int16
	state    func(t *testing.T) any
	// prep, when set, runs before each call (as the super user) and
	// before state is read: what the call needs that is not under test.
	prep func(t *testing.T, k *kafkaConn, granted []kperm)
	// grpc, when set, is the same operation over gRPC by the same
	// principal; it must be denied exactly when the Kafka call is
	// (grpcDenied) and change nothing when denied.
	grpc func(ctx context.Context) (proto.Message, error)
}

// grpcDenied reports whether a gRPC answer is an authorization refusal:
// PERMISSION_DENIED for the request, or TOPIC_AUTHORIZATION_FAILED for a
// partition or topic in it.
func grpcDenied(t *testing.T, resp proto.Message, err error) bool {
	t.Helper()
	if err != nil {
		return status.Code(err) == codes.PermissionDenied
	}
	b, merr := protojson.Marshal(resp)
	require.NoError(t, merr)
	return strings.Contains(string(b), "TOPIC_AUTHORIZATION_FAILED")
}

// TestKafkaAuthorizationMatrix runs every Kafka API the listener serves
// (but ApiVersions and ListGroups, which answer without a
// permission) with --authorizer acl: without each of its permissions it
// answers Kafka's authorization code and changes nothing; with exactly the
// permissions the gRPC handler of the same operation requires
// (e2e/authz_e2e_test.go) it succeeds. Where the operation has a gRPC
// counterpart, the same principal's gRPC call is denied and allowed alike.
func TestKafkaAuthorizationMatrix(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("admin-token\napp app-token\n"), 0o600))
	c := startChild(t, t.TempDir(), "--fsync", "never", "--auth-tokens-file", tokens, "--authorizer", "acl",
		"--super-users", "User:token-1", "--kafka-addr", "127.0.0.1:0", "--group-initial-rebalance-delay", "0")
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer admin-token")
	appCtx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer app-token")
	logc := sharelogv1.NewLogServiceClient(c.conn)
	aclc := sharelogv1.NewAclServiceClient(c.conn)
	sgc := sharelogv1.NewShareGroupServiceClient(c.conn)
	cgc := sharelogv1.NewConsumerGroupServiceClient(c.conn)
	for _, name := range []string{"t", "victim", "grow"} {
		_, err := logc.CreateTopic(admin, &sharelogv1.CreateTopicRequest{Name: name, Partitions: 1})
		require.NoError(t, err)
	}
	_, err := logc.Produce(admin, &sharelogv1.ProduceRequest{Topic: "t", Records: []*sharelogv1.Record{{Value: []byte("a")}, {Value: []byte("b")}}})
	require.NoError(t, err)
	_, err = sgc.UpdateShareGroupConfig(admin, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
	require.NoError(t, err)

	// The share fetch and acknowledge cases use their own topic and group,
	// with records enough for one acquisition per call.
	superK := dialKafka(t, c.kafkaAddr(t))
	require.Zero(t, saslPlain(superK, "token-1", "admin-token").ErrorCode, "super user login")
	stID := superK.createTopic("st", 1)
	var stRecs []*sharelogv1.Record
	for i := range 60 {
		stRecs = append(stRecs, &sharelogv1.Record{Value: fmt.Appendf(nil, "s%d", i)})
	}
	_, err = logc.Produce(admin, &sharelogv1.ProduceRequest{Topic: "st", Records: stRecs})
	require.NoError(t, err)
	for _, g := range []string{"sg", "ag"} {
		_, err = sgc.UpdateShareGroupConfig(admin, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: g,
			Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
		require.NoError(t, err)
	}
	sgState := func(t *testing.T) any {
		d, err := sgc.DescribeSharePartitionState(admin, &sharelogv1.DescribeSharePartitionStateRequest{GroupId: "sg",
			Topics: []*sharelogv1.TopicPartitions{{Topic: "st", Partitions: []int32{0}}}})
		require.NoError(t, err)
		return d.String()
	}
	members := 0
	freshMember := func() string { members++; return fmt.Sprintf("m-kafka-acl-member-%06d", members) }
	kShareFetch := func(k *kafkaConn, member string, epoch int32) (int16, int64) {
		req := kmsg.NewPtrShareFetchRequest()
		g := "sg"
		req.Version, req.GroupID, req.MemberID, req.ShareSessionEpoch = 1, &g, &member, epoch
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = 0, 1, 1<<20, 1, 1
		tp := kmsg.NewShareFetchRequestTopic()
		tp.TopicID = stID
		pp := kmsg.NewShareFetchRequestTopicPartition()
		tp.Partitions = append(tp.Partitions, pp)
		req.Topics = append(req.Topics, tp)
		resp := k.do(req).(*kmsg.ShareFetchResponse)
		if resp.ErrorCode != 0 {
			return resp.ErrorCode, -1
		}
		require.Len(t, resp.Topics, 1)
		require.Len(t, resp.Topics[0].Partitions, 1)
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || len(p.AcquiredRecords) == 0 {
			return p.ErrorCode, -1
		}
		return 0, p.AcquiredRecords[0].FirstOffset
	}
	gShareFetch := func(ctx context.Context, member string) (*sharelogv1.ShareFetchResponse, error) {
		return sgc.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "sg", MemberId: member, MaxRecords: proto.Int32(1),
			Topics: []*sharelogv1.ShareFetchTopic{{Topic: "st", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0}}}}})
	}
	// What the acknowledge cases acknowledge: a record the app acquired
	// (with every permission) in a session of its own, per transport.
	var ackMemberK, ackMemberG string
	var ackOffsetK, ackOffsetG int64
	grant := func(ps []kperm) {
		_, err := aclc.DeleteAcls(admin, &sharelogv1.DeleteAclsRequest{Filters: []*sharelogv1.AclBindingFilter{{Principal: kafkaACLPrincipal}}})
		require.NoError(t, err)
		var bs []*sharelogv1.AclBinding
		for _, p := range ps {
			bs = append(bs, &sharelogv1.AclBinding{Principal: kafkaACLPrincipal, ResourceType: p.rt, PatternType: sharelogv1.PatternType_PATTERN_TYPE_LITERAL,
				ResourceName: p.name, Operation: p.op, Permission: sharelogv1.AclPermission_ACL_PERMISSION_ALLOW})
		}
		if len(bs) > 0 {
			_, err = aclc.CreateAcls(admin, &sharelogv1.CreateAclsRequest{Bindings: bs})
			require.NoError(t, err)
		}
	}
	const (
		topic   = sharelogv1.ResourceType_RESOURCE_TYPE_TOPIC
		group   = sharelogv1.ResourceType_RESOURCE_TYPE_GROUP
		cluster = sharelogv1.ResourceType_RESOURCE_TYPE_CLUSTER
		txnID   = sharelogv1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID
		alter   = sharelogv1.AclOperation_ACL_OPERATION_ALTER
		read    = sharelogv1.AclOperation_ACL_OPERATION_READ
		write   = sharelogv1.AclOperation_ACL_OPERATION_WRITE
		create  = sharelogv1.AclOperation_ACL_OPERATION_CREATE
		del     = sharelogv1.AclOperation_ACL_OPERATION_DELETE
		desc    = sharelogv1.AclOperation_ACL_OPERATION_DESCRIBE
		descCfg = sharelogv1.AclOperation_ACL_OPERATION_DESCRIBE_CONFIGS
		altCfg  = sharelogv1.AclOperation_ACL_OPERATION_ALTER_CONFIGS
	)
	bounds := func(t *testing.T) any {
		d, err := logc.DescribeTopic(admin, &sharelogv1.DescribeTopicRequest{Name: "t"})
		require.NoError(t, err)
		return d.String()
	}
	exists := func(name string) func(t *testing.T) any {
		return func(t *testing.T) any {
			l, err := logc.ListTopics(admin, &sharelogv1.ListTopicsRequest{})
			require.NoError(t, err)
			for _, tp := range l.GetTopics() {
				if tp.GetName() == name {
					return true
				}
			}
			return false
		}
	}
	groupState := func(t *testing.T) any {
		cfg, err := sgc.GetShareGroupConfig(admin, &sharelogv1.GetShareGroupConfigRequest{GroupId: "g"})
		require.NoError(t, err)
		d, err := sgc.DescribeShareGroup(admin, &sharelogv1.DescribeShareGroupRequest{GroupId: "g"})
		require.NoError(t, err)
		return cfg.String() + "|" + d.String()
	}
	none := func(*testing.T) any { return nil }
	partitionCount := func(name string) func(t *testing.T) any {
		return func(t *testing.T) any {
			d, err := logc.DescribeTopic(admin, &sharelogv1.DescribeTopicRequest{Name: name})
			require.NoError(t, err)
			return d.GetPartitionCount()
		}
	}
	var growTo int32 // CreatePartitions' new count: one more than now
	const topicDenied, groupDenied, clusterDenied, txnDenied = 29, 30, 31, 53
	otherBindings := func(t *testing.T) any {
		d, err := aclc.DescribeAcls(admin, &sharelogv1.DescribeAclsRequest{Filter: &sharelogv1.AclBindingFilter{Principal: "User:other"}})
		require.NoError(t, err)
		return len(d.GetBindings())
	}

	// The consumer groups' state, read over Kafka by the super user.
	superKafka := func(t *testing.T) *kafkaConn {
		k := dialKafka(t, c.kafkaAddr(t))
		require.Zero(t, saslPlain(k, "token-1", "admin-token").ErrorCode, "super user login")
		return k
	}
	commitAs := func(k *kafkaConn, group string, version int16) int16 {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version, req.Group, req.Generation = version, group, -1
		tp := kmsg.NewOffsetCommitRequestTopic()
		tp.Topic = "t"
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Offset, p.LeaderEpoch = 1, -1
		tp.Partitions = append(tp.Partitions, p)
		req.Topics = append(req.Topics, tp)
		return k.do(req).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	cgOffsets := func(t *testing.T) any {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = 8
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group = "cg"
		req.Groups = append(req.Groups, g)
		resp := superKafka(t).do(req).(*kmsg.OffsetFetchResponse)
		out := map[int32]int64{}
		for _, tp := range resp.Groups[0].Topics {
			for _, p := range tp.Partitions {
				out[p.Partition] = p.Offset
			}
		}
		return out
	}
	listedGroups := func(t *testing.T) any {
		req := kmsg.NewPtrListGroupsRequest()
		req.Version = 5
		var ids []string
		for _, g := range superKafka(t).do(req).(*kmsg.ListGroupsResponse).Groups {
			ids = append(ids, g.Group)
		}
		return ids
	}
	// Groups that the delete cases remove.
	{
		k := dialKafka(t, c.kafkaAddr(t))
		require.Zero(t, saslPlain(k, "token-1", "admin-token").ErrorCode)
		require.Zero(t, commitAs(k, "cg-del", 8))
	}
	userc := sharelogv1.NewUserServiceClient(c.conn)
	scramUsers := func(t *testing.T) any {
		l, err := userc.ListUsers(admin, &sharelogv1.ListUsersRequest{})
		require.NoError(t, err)
		return l.String()
	}

	cases := []kafkaACLCase{
		{name: "Produce", needs: []kperm{{topic, "t", write}}, denied: topicDenied, state: bounds, grpc: func(ctx context.Context) (proto.Message, error) {
			return logc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Records: []*sharelogv1.Record{{Value: []byte("g")}}})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrProduceRequest()
			req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
			tp := kmsg.NewProduceRequestTopic()
			tp.Topic = "t"
			p := kmsg.NewProduceRequestTopicPartition()
			p.Records = oneRecordBatch()
			tp.Partitions = append(tp.Partitions, p)
			req.Topics = append(req.Topics, tp)
			return k.do(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
		}},
		// WRITE on any topic (here "t"), as Kafka 3.0+ for an idempotent
		// producer; nothing changes either way but the id allocator.
		{name: "InitProducerID", needs: []kperm{{topic, "t", write}}, denied: clusterDenied, state: none, grpc: func(ctx context.Context) (proto.Message, error) {
			return logc.InitProducer(ctx, &sharelogv1.InitProducerRequest{})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrInitProducerIDRequest()
			req.Version, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = 4, 60000, -1, -1
			resp := k.do(req).(*kmsg.InitProducerIDResponse)
			if resp.ErrorCode == 0 && resp.ProducerID <= 0 {
				return -1 // no id: not a success
			}
			return resp.ErrorCode
		}},
		{name: "Fetch", needs: []kperm{{topic, "t", read}}, denied: topicDenied, state: bounds, grpc: func(ctx context.Context) (proto.Message, error) {
			return logc.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Partition: 0, Offset: 0})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrFetchRequest()
			req.Version, req.MaxBytes, req.SessionEpoch = 12, 1<<20, -1
			tp := kmsg.NewFetchRequestTopic()
			tp.Topic = "t"
			p := kmsg.NewFetchRequestTopicPartition()
			p.PartitionMaxBytes = 1 << 20
			tp.Partitions = append(tp.Partitions, p)
			req.Topics = append(req.Topics, tp)
			return k.do(req).(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode
		}},
		{name: "ListOffsets", needs: []kperm{{topic, "t", desc}}, denied: topicDenied, state: none, grpc: func(ctx context.Context) (proto.Message, error) {
			return logc.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: "t", Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrListOffsetsRequest()
			req.Version, req.ReplicaID = 7, -1
			tp := kmsg.NewListOffsetsRequestTopic()
			tp.Topic = "t"
			p := kmsg.NewListOffsetsRequestTopicPartition()
			p.Timestamp = -1
			tp.Partitions = append(tp.Partitions, p)
			req.Topics = append(req.Topics, tp)
			return k.do(req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode
		}},
		{name: "Metadata", needs: []kperm{{topic, "t", desc}}, denied: topicDenied, state: none, grpc: func(ctx context.Context) (proto.Message, error) {
			return logc.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "t"})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrMetadataRequest()
			req.Version = 12
			name := "t"
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = &name
			req.Topics = append(req.Topics, mt)
			return k.do(req).(*kmsg.MetadataResponse).Topics[0].ErrorCode
		}},
		// The internal topic is shown to a principal that may DESCRIBE
		// the cluster (docs/kafka.md "Internal topic").
		{name: "Metadata of __consumer_offsets", needs: []kperm{{cluster, "kafka-cluster", desc}}, denied: topicDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrMetadataRequest()
			req.Version = 12
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr("__consumer_offsets")
			req.Topics = append(req.Topics, mt)
			resp := k.do(req).(*kmsg.MetadataResponse)
			if resp.Topics[0].ErrorCode == 0 && !resp.Topics[0].IsInternal {
				return -1 // listed, but not as internal: not a success
			}
			return resp.Topics[0].ErrorCode
		}},
		{name: "CreateTopics", needs: []kperm{{topic, "new", create}}, denied: topicDenied, state: exists("new"), grpc: func(ctx context.Context) (proto.Message, error) {
			return logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "new", Partitions: 1})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrCreateTopicsRequest()
			req.Version, req.TimeoutMillis = 7, 5000
			ct := kmsg.NewCreateTopicsRequestTopic()
			ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "new", 1, -1
			req.Topics = append(req.Topics, ct)
			return k.do(req).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
		}},
		{name: "DeleteRecords", needs: []kperm{{topic, "t", del}}, denied: topicDenied, state: bounds, grpc: func(ctx context.Context) (proto.Message, error) {
			return logc.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: "t", Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 1}}}}})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDeleteRecordsRequest()
			req.Version, req.TimeoutMillis = 2, 5000
			tp := kmsg.NewDeleteRecordsRequestTopic()
			tp.Topic = "t"
			p := kmsg.NewDeleteRecordsRequestTopicPartition()
			p.Offset = 1
			tp.Partitions = append(tp.Partitions, p)
			req.Topics = append(req.Topics, tp)
			return k.do(req).(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0].ErrorCode
		}},
		{name: "DescribeConfigs", needs: []kperm{{topic, "t", descCfg}}, denied: topicDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDescribeConfigsRequest()
			req.Version = 4
			r := kmsg.NewDescribeConfigsRequestResource()
			r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, "t"
			req.Resources = append(req.Resources, r)
			return k.do(req).(*kmsg.DescribeConfigsResponse).Resources[0].ErrorCode
		}},
		{name: "CreatePartitions", needs: []kperm{{topic, "grow", alter}}, denied: topicDenied, state: partitionCount("grow"),
			prep: func(t *testing.T, _ *kafkaConn, _ []kperm) { growTo = partitionCount("grow")(t).(int32) + 1 },
			grpc: func(ctx context.Context) (proto.Message, error) {
				return logc.CreatePartitions(ctx, &sharelogv1.CreatePartitionsRequest{Topic: "grow", Count: growTo})
			}, call: func(k *kafkaConn) int16 {
				req := kmsg.NewPtrCreatePartitionsRequest()
				req.Version, req.TimeoutMillis = 3, 5000
				rt := kmsg.NewCreatePartitionsRequestTopic()
				rt.Topic, rt.Count = "grow", growTo
				req.Topics = append(req.Topics, rt)
				return k.do(req).(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode
			}},
		{name: "IncrementalAlterConfigsTopic", needs: []kperm{{topic, "t", altCfg}}, denied: topicDenied, state: bounds, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			req.Version = 1
			r := kmsg.NewIncrementalAlterConfigsRequestResource()
			r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, "t"
			e := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			e.Name, e.Op, e.Value = "retention.ms", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("86400000")
			r.Configs = append(r.Configs, e)
			req.Resources = append(req.Resources, r)
			return k.do(req).(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode
		}},
		{name: "AlterConfigs", needs: []kperm{{topic, "t", altCfg}}, denied: topicDenied, state: bounds, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrAlterConfigsRequest()
			req.Version = 2
			r := kmsg.NewAlterConfigsRequestResource()
			r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, "t"
			e := kmsg.NewAlterConfigsRequestResourceConfig()
			e.Name, e.Value = "retention.ms", kmsg.StringPtr("3600000")
			r.Configs = append(r.Configs, e)
			req.Resources = append(req.Resources, r)
			return k.do(req).(*kmsg.AlterConfigsResponse).Resources[0].ErrorCode
		}},
		{name: "IncrementalAlterConfigs", needs: []kperm{{group, "g", altCfg}}, denied: groupDenied, state: groupState, grpc: func(ctx context.Context) (proto.Message, error) {
			return sgc.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g", Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("latest")}})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			req.Version = 1
			r := kmsg.NewIncrementalAlterConfigsRequestResource()
			r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "g"
			e := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			v := "latest"
			e.Name, e.Op, e.Value = "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, &v
			r.Configs = append(r.Configs, e)
			req.Resources = append(req.Resources, r)
			return k.do(req).(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode
		}},
		{name: "ShareGroupDescribe", needs: []kperm{{group, "g", desc}}, denied: groupDenied, state: none, grpc: func(ctx context.Context) (proto.Message, error) {
			return sgc.DescribeShareGroup(ctx, &sharelogv1.DescribeShareGroupRequest{GroupId: "g"})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrShareGroupDescribeRequest()
			req.Version, req.GroupIDs = 1, []string{"g"}
			return k.do(req).(*kmsg.ShareGroupDescribeResponse).Groups[0].ErrorCode
		}},
		{name: "DescribeShareGroupOffsets", needs: []kperm{{group, "g", desc}}, denied: groupDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
			req.Version = 1
			g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
			g.GroupID = "g"
			req.Groups = append(req.Groups, g)
			return k.do(req).(*kmsg.DescribeShareGroupOffsetsResponse).Groups[0].ErrorCode
		}},
		{name: "DeleteShareGroupOffsets", needs: []kperm{{group, "g", del}}, denied: groupDenied, state: groupState, grpc: func(ctx context.Context) (proto.Message, error) {
			return sgc.DeleteShareGroupOffsets(ctx, &sharelogv1.DeleteShareGroupOffsetsRequest{GroupId: "g", Topics: []string{"t"}})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
			req.Version, req.GroupID = 0, "g"
			tp := kmsg.NewDeleteShareGroupOffsetsRequestTopic()
			tp.Topic = "t"
			req.Topics = append(req.Topics, tp)
			return k.do(req).(*kmsg.DeleteShareGroupOffsetsResponse).ErrorCode
		}},
		{name: "ShareGroupHeartbeat", needs: []kperm{{group, "g", read}, {topic, "t", desc}}, denied: groupDenied, deniedBy: []int16{groupDenied, topicDenied}, state: groupState, grpc: func(ctx context.Context) (proto.Message, error) {
			return sgc.ShareGroupHeartbeat(ctx, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "g", MemberId: "m-kafka-acl-test-0000002", SubscribedTopicNames: []string{"t"}})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrShareGroupHeartbeatRequest()
			req.Version, req.GroupID, req.MemberID, req.SubscribedTopicNames = 1, "g", "m-kafka-acl-test-0000001", []string{"t"}
			return k.do(req).(*kmsg.ShareGroupHeartbeatResponse).ErrorCode
		}},
		{name: "DescribeAcls", needs: []kperm{{cluster, "kafka-cluster", desc}}, denied: clusterDenied, state: none, grpc: func(ctx context.Context) (proto.Message, error) {
			return aclc.DescribeAcls(ctx, &sharelogv1.DescribeAclsRequest{Filter: &sharelogv1.AclBindingFilter{}})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDescribeACLsRequest()
			req.Version = 3
			req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
			req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			return k.do(req).(*kmsg.DescribeACLsResponse).ErrorCode
		}},
		{name: "CreateAcls", needs: []kperm{{cluster, "kafka-cluster", alter}}, denied: clusterDenied, state: otherBindings, grpc: func(ctx context.Context) (proto.Message, error) {
			return aclc.CreateAcls(ctx, &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{{Principal: "User:other", ResourceType: topic,
				PatternType: sharelogv1.PatternType_PATTERN_TYPE_LITERAL, ResourceName: "t", Operation: read, Permission: sharelogv1.AclPermission_ACL_PERMISSION_ALLOW}}})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrCreateACLsRequest()
			req.Version = 3
			cr := kmsg.NewCreateACLsRequestCreation()
			cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = kmsg.ACLResourceTypeTopic, "t", kmsg.ACLResourcePatternTypeLiteral
			cr.Principal, cr.Host, cr.Operation, cr.PermissionType = "User:other", "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
			req.Creations = append(req.Creations, cr)
			return k.do(req).(*kmsg.CreateACLsResponse).Results[0].ErrorCode
		}},
		{name: "DeleteAcls", needs: []kperm{{cluster, "kafka-cluster", alter}}, denied: clusterDenied, state: otherBindings, grpc: func(ctx context.Context) (proto.Message, error) {
			return aclc.DeleteAcls(ctx, &sharelogv1.DeleteAclsRequest{Filters: []*sharelogv1.AclBindingFilter{{Principal: "User:other"}}})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDeleteACLsRequest()
			req.Version = 3
			f := kmsg.NewDeleteACLsRequestFilter()
			other := "User:other"
			f.ResourceType, f.ResourcePatternType, f.Principal = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, &other
			f.Operation, f.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			req.Filters = append(req.Filters, f)
			return k.do(req).(*kmsg.DeleteACLsResponse).Results[0].ErrorCode
		}},
		{name: "DescribeShareGroupOffsets of a topic", needs: []kperm{{group, "g", desc}, {topic, "t", desc}}, denied: groupDenied, deniedBy: []int16{groupDenied, topicDenied}, state: none,
			grpc: func(ctx context.Context) (proto.Message, error) {
				return sgc.DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "g", Topics: []*sharelogv1.TopicPartitions{{Topic: "t", Partitions: []int32{0}}}})
			}, call: func(k *kafkaConn) int16 {
				req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
				req.Version = 1
				g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
				g.GroupID = "g"
				gt := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
				gt.Topic, gt.Partitions = "t", []int32{0}
				g.Topics = append(g.Topics, gt)
				req.Groups = append(req.Groups, g)
				rg := k.do(req).(*kmsg.DescribeShareGroupOffsetsResponse).Groups[0]
				if rg.ErrorCode != 0 {
					return rg.ErrorCode
				}
				return rg.Topics[0].Partitions[0].ErrorCode
			}},
		{name: "AlterShareGroupOffsets", needs: []kperm{{group, "ag", read}, {topic, "t", read}}, denied: groupDenied, deniedBy: []int16{groupDenied, topicDenied},
			state: func(t *testing.T) any {
				d, err := sgc.DescribeShareGroupOffsets(admin, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "ag"})
				require.NoError(t, err)
				return d.String()
			},
			grpc: func(ctx context.Context) (proto.Message, error) {
				return sgc.AlterShareGroupOffsets(ctx, &sharelogv1.AlterShareGroupOffsetsRequest{GroupId: "ag", Topics: []*sharelogv1.AlterShareGroupOffsetsTopic{{
					Topic: "t", Partitions: []*sharelogv1.AlterShareGroupOffsetsPartition{{Partition: 0, StartOffset: 1}}}}})
			}, call: func(k *kafkaConn) int16 {
				req := kmsg.NewPtrAlterShareGroupOffsetsRequest()
				req.GroupID = "ag"
				rt := kmsg.NewAlterShareGroupOffsetsRequestTopic()
				rt.Topic = "t"
				rp := kmsg.NewAlterShareGroupOffsetsRequestTopicPartition()
				rp.Partition, rp.StartOffset = 0, 1
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
				resp := k.do(req).(*kmsg.AlterShareGroupOffsetsResponse)
				if resp.ErrorCode != 0 {
					return resp.ErrorCode
				}
				return resp.Topics[0].Partitions[0].ErrorCode
			}},
		{name: "ShareFetch", needs: []kperm{{group, "sg", read}, {topic, "st", read}}, denied: groupDenied, deniedBy: []int16{groupDenied, topicDenied}, state: sgState,
			grpc: func(ctx context.Context) (proto.Message, error) {
				return gShareFetch(ctx, freshMember())
			}, call: func(k *kafkaConn) int16 {
				code, _ := kShareFetch(k, freshMember(), 0)
				return code
			}},
		{name: "ShareAcknowledge", needs: []kperm{{group, "sg", read}, {topic, "st", read}}, denied: groupDenied, deniedBy: []int16{groupDenied, topicDenied}, state: sgState,
			prep: func(t *testing.T, k *kafkaConn, granted []kperm) {
				grant([]kperm{{group, "sg", read}, {topic, "st", read}})
				ackMemberK = freshMember()
				code, off := kShareFetch(k, ackMemberK, 0)
				require.Zero(t, code)
				require.GreaterOrEqual(t, off, int64(0), "a record acquired over Kafka")
				ackMemberG = freshMember()
				r, err := gShareFetch(appCtx, ackMemberG)
				require.NoError(t, err)
				require.NotEmpty(t, r.GetResponses()[0].GetPartitions()[0].GetAcquiredRecords(), "a record acquired over gRPC")
				ackOffsetK, ackOffsetG = off, r.GetResponses()[0].GetPartitions()[0].GetAcquiredRecords()[0].GetFirstOffset()
				grant(granted)
			},
			grpc: func(ctx context.Context) (proto.Message, error) {
				return sgc.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "sg", MemberId: ackMemberG, ShareSessionEpoch: 1,
					Topics: []*sharelogv1.ShareFetchTopic{{Topic: "st", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0,
						AcknowledgementBatches: []*sharelogv1.AcknowledgementBatch{{FirstOffset: ackOffsetG, LastOffset: ackOffsetG,
							AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}}}}}}}})
			}, call: func(k *kafkaConn) int16 {
				req := kmsg.NewPtrShareAcknowledgeRequest()
				g := "sg"
				req.Version, req.GroupID, req.MemberID, req.ShareSessionEpoch = 1, &g, &ackMemberK, 1
				tp := kmsg.NewShareAcknowledgeRequestTopic()
				tp.TopicID = stID
				pp := kmsg.NewShareAcknowledgeRequestTopicPartition()
				b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
				b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = ackOffsetK, ackOffsetK, []int8{1}
				pp.AcknowledgementBatches = append(pp.AcknowledgementBatches, b)
				tp.Partitions = append(tp.Partitions, pp)
				req.Topics = append(req.Topics, tp)
				resp := k.do(req).(*kmsg.ShareAcknowledgeResponse)
				if resp.ErrorCode != 0 {
					return resp.ErrorCode
				}
				return resp.Topics[0].Partitions[0].ErrorCode
			}},
		{name: "OffsetCommit", needs: []kperm{{group, "cg", read}, {topic, "t", read}}, deniedBy: []int16{groupDenied, topicDenied}, state: cgOffsets,
			grpc: func(ctx context.Context) (proto.Message, error) {
				return cgc.CommitOffsets(ctx, &sharelogv1.CommitOffsetsRequest{Group: "cg", Topics: []*sharelogv1.CommitOffsetsTopic{{Topic: "t",
					Partitions: []*sharelogv1.CommitOffsetsPartition{{Partition: 0, Offset: 1}}}}})
			},
			call: func(k *kafkaConn) int16 { return commitAs(k, "cg", 8) }},
		{name: "OffsetFetch", needs: []kperm{{group, "cg", desc}, {topic, "t", desc}}, deniedBy: []int16{groupDenied, topicDenied}, state: none, grpc: func(ctx context.Context) (proto.Message, error) {
			return cgc.FetchOffsets(ctx, &sharelogv1.FetchOffsetsRequest{Group: "cg", Topics: []string{"t"}})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrOffsetFetchRequest()
			req.Version = 8
			g := kmsg.NewOffsetFetchRequestGroup()
			g.Group = "cg"
			tp := kmsg.NewOffsetFetchRequestGroupTopic()
			tp.Topic, tp.Partitions = "t", []int32{0}
			g.Topics = append(g.Topics, tp)
			req.Groups = append(req.Groups, g)
			rg := k.do(req).(*kmsg.OffsetFetchResponse).Groups[0]
			if rg.ErrorCode != 0 {
				return rg.ErrorCode
			}
			return rg.Topics[0].Partitions[0].ErrorCode
		}},
		{name: "OffsetDelete", needs: []kperm{{group, "cg", del}, {topic, "t", read}}, deniedBy: []int16{groupDenied, topicDenied}, state: cgOffsets, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrOffsetDeleteRequest()
			req.Group = "cg"
			tp := kmsg.NewOffsetDeleteRequestTopic()
			tp.Topic = "t"
			tp.Partitions = append(tp.Partitions, kmsg.OffsetDeleteRequestTopicPartition{Partition: 0})
			req.Topics = append(req.Topics, tp)
			resp := k.do(req).(*kmsg.OffsetDeleteResponse)
			if resp.ErrorCode != 0 {
				return resp.ErrorCode
			}
			return resp.Topics[0].Partitions[0].ErrorCode
		}},
		{name: "JoinGroup", needs: []kperm{{group, "cg-join", read}}, denied: groupDenied, state: listedGroups, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Version, req.Group, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis, req.ProtocolType = 3, "cg-join", 6000, 1000, "consumer"
			req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}}
			return k.do(req).(*kmsg.JoinGroupResponse).ErrorCode
		}},
		{name: "Heartbeat", needs: []kperm{{group, "cg", read}}, denied: groupDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrHeartbeatRequest()
			req.Version, req.Group, req.MemberID = 4, "cg", "nobody"
			if code := k.do(req).(*kmsg.HeartbeatResponse).ErrorCode; code != 25 {
				return code // UNKNOWN_MEMBER_ID (25) is what an allowed call answers
			}
			return 0
		}},
		{name: "ConsumerGroupHeartbeat", needs: []kperm{{group, "cg848", read}}, denied: groupDenied, state: listedGroups, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			req.Version, req.Group, req.MemberID, req.RebalanceTimeoutMillis = 1, "cg848", "m-kafka-acl-848", 5000
			req.SubscribedTopicNames, req.Topics = []string{"t"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			return k.do(req).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode
		}},
		{name: "ConsumerGroupDescribe", needs: []kperm{{group, "cg848", desc}}, denied: groupDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrConsumerGroupDescribeRequest()
			req.Groups = []string{"cg848"}
			return k.do(req).(*kmsg.ConsumerGroupDescribeResponse).Groups[0].ErrorCode
		}},
		{name: "SyncGroup", needs: []kperm{{group, "cg", read}}, denied: groupDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrSyncGroupRequest()
			req.Version, req.Group, req.MemberID = 3, "cg", "nobody"
			if code := k.do(req).(*kmsg.SyncGroupResponse).ErrorCode; code != 25 {
				return code // UNKNOWN_MEMBER_ID (25) is what an allowed call answers
			}
			return 0
		}},
		{name: "LeaveGroup", needs: []kperm{{group, "cg", read}}, denied: groupDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrLeaveGroupRequest()
			req.Version, req.Group = 3, "cg"
			req.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "nobody"}}
			return k.do(req).(*kmsg.LeaveGroupResponse).ErrorCode // the member's own 25 is not the request's
		}},
		{name: "OffsetForLeaderEpoch", needs: []kperm{{topic, "t", desc}}, denied: topicDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrOffsetForLeaderEpochRequest()
			req.Version, req.ReplicaID = 4, -1
			rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
			rt.Topic = "t"
			rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
			rp.CurrentLeaderEpoch, rp.LeaderEpoch = -1, 0
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			return k.do(req).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0].ErrorCode
		}},
		{name: "FindCoordinator", needs: []kperm{{group, "cg", desc}}, denied: groupDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.Version, req.CoordinatorType, req.CoordinatorKeys = 4, 0, []string{"cg"}
			return k.do(req).(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode
		}},
		// Transactions (docs/kafka.md "Transactions"): TRANSACTIONAL_ID
		// resources, as Kafka's; no gRPC counterpart.
		{name: "FindCoordinator transaction", needs: []kperm{{txnID, "tx", desc}}, denied: txnDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.Version, req.CoordinatorType, req.CoordinatorKeys = 4, 1, []string{"tx"}
			return k.do(req).(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode
		}},
		{name: "InitProducerID transactional", needs: []kperm{{txnID, "tx", write}}, denied: txnDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrInitProducerIDRequest()
			txn := "tx"
			req.Version, req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = 4, &txn, 60000, -1, -1
			resp := k.do(req).(*kmsg.InitProducerIDResponse)
			if resp.ErrorCode == 0 && resp.ProducerID <= 0 {
				return -1 // no id: not a success
			}
			return resp.ErrorCode
		}},
		{name: "DescribeTransactions", needs: []kperm{{txnID, "tx", desc}}, denied: txnDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDescribeTransactionsRequest()
			req.TransactionalIDs = []string{"tx"}
			code := k.do(req).(*kmsg.DescribeTransactionsResponse).TransactionStates[0].ErrorCode
			if code == 105 {
				return 0 // allowed: the id is unknown until InitProducerID made it
			}
			return code
		}},
		{name: "FindCoordinator v3", needs: []kperm{{group, "cg", desc}}, denied: groupDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.Version, req.CoordinatorType, req.CoordinatorKey = 3, 0, "cg"
			return k.do(req).(*kmsg.FindCoordinatorResponse).ErrorCode
		}},
		{name: "DescribeGroups", needs: []kperm{{group, "cg", desc}}, denied: groupDenied, state: none, grpc: func(ctx context.Context) (proto.Message, error) {
			return cgc.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: "cg"})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDescribeGroupsRequest()
			req.Version, req.Groups = 5, []string{"cg"}
			return k.do(req).(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode
		}},
		{name: "DeleteGroups", needs: []kperm{{group, "cg-del", del}}, denied: groupDenied, state: listedGroups, grpc: func(ctx context.Context) (proto.Message, error) {
			return cgc.DeleteConsumerGroup(ctx, &sharelogv1.DeleteConsumerGroupRequest{Group: "cg-del"})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDeleteGroupsRequest()
			req.Version, req.Groups = 2, []string{"cg-del"}
			return k.do(req).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode
		}},
		{name: "DescribeUserScramCredentials", needs: []kperm{{cluster, "kafka-cluster", desc}}, denied: clusterDenied, state: none, grpc: func(ctx context.Context) (proto.Message, error) {
			return userc.ListUsers(ctx, &sharelogv1.ListUsersRequest{})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
			return k.do(req).(*kmsg.DescribeUserSCRAMCredentialsResponse).ErrorCode
		}},
		{name: "AlterUserScramCredentials", needs: []kperm{{cluster, "kafka-cluster", alter}}, denied: clusterDenied, state: scramUsers, grpc: func(ctx context.Context) (proto.Message, error) {
			return userc.SetScramCredential(ctx, &sharelogv1.SetScramCredentialRequest{User: "grpc-made", Mechanism: "SCRAM-SHA-256",
				Secret: &sharelogv1.SetScramCredentialRequest_Password{Password: "a-password"}})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
			up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
			up.Name, up.Mechanism, up.Iterations = "kafka-made", 1, 4096
			up.Salt, up.SaltedPassword = []byte("salt"), make([]byte, 32)
			req.Upsertions = append(req.Upsertions, up)
			return k.do(req).(*kmsg.AlterUserSCRAMCredentialsResponse).Results[0].ErrorCode
		}},
		// Last: it removes the topic.
		{name: "DeleteTopics", needs: []kperm{{topic, "victim", del}}, denied: topicDenied, state: exists("victim"), grpc: func(ctx context.Context) (proto.Message, error) {
			return logc.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "victim"})
		}, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDeleteTopicsRequest()
			req.Version, req.TimeoutMillis = 4, 5000
			req.TopicNames = []string{"victim"}
			return k.do(req).(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := dialKafka(t, c.kafkaAddr(t))
			require.Zero(t, saslPlain(k, "app", "app-token").ErrorCode, "login")
			prep := func(granted []kperm) {
				if tc.prep != nil {
					tc.prep(t, k, granted)
				}
			}
			// Every needed permission but one is not enough, on either
			// transport.
			for skip := range tc.needs {
				partial := append(append([]kperm{}, tc.needs[:skip]...), tc.needs[skip+1:]...)
				grant(partial)
				prep(partial)
				before := tc.state(t)
				want := tc.denied
				if tc.deniedBy != nil {
					want = tc.deniedBy[skip]
				}
				assert.Equal(t, want, tc.call(k), "without %v", tc.needs[skip])
				assert.Equal(t, before, tc.state(t), "a denied call changed nothing")
				if tc.grpc != nil {
					resp, err := tc.grpc(appCtx)
					assert.True(t, grpcDenied(t, resp, err), "gRPC without %v is denied too: %v %v", tc.needs[skip], resp, err)
					assert.Equal(t, before, tc.state(t), "a denied gRPC call changed nothing")
				}
			}
			grant(tc.needs)
			prep(tc.needs)
			assert.Equal(t, int16(0), tc.call(k), "with exactly %v", tc.needs)
			if tc.grpc != nil {
				prep(tc.needs)
				resp, err := tc.grpc(appCtx)
				assert.False(t, grpcDenied(t, resp, err), "gRPC with exactly %v is allowed too: %v %v", tc.needs, resp, err)
			}
		})
	}
	for _, tc := range cases {
		if tc.grpc == nil {
			t.Logf("%s has no gRPC counterpart compared here", tc.name)
		}
	}
}

// oneRecordBatch is a v2 record batch of one record, as a producer sends it.
func oneRecordBatch() []byte {
	rec := kmsg.NewRecord()
	rec.Value = []byte("k")
	rec.Length = int32(len(rec.AppendTo(nil)) - 1) // the bytes after the length varint
	b := kmsg.NewRecordBatch()
	b.Magic, b.NumRecords, b.FirstTimestamp, b.MaxTimestamp = 2, 1, 1, 1
	b.ProducerID, b.ProducerEpoch, b.FirstSequence = -1, -1, -1
	b.Records = rec.AppendTo(nil)
	return finishBatch(b)
}

// finishBatch sets a record batch's length and CRC-32C and encodes it.
func finishBatch(b kmsg.RecordBatch) []byte {
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// An OffsetCommit refused by the group (a stale generation) answers the
// group's code on the topics the caller may READ, and keeps
// TOPIC_AUTHORIZATION_FAILED on the others, as Kafka.
func TestKafkaOffsetCommitRefusalsPerTopic(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("admin-token\napp app-token\n"), 0o600))
	c := startChild(t, t.TempDir(), "--fsync", "never", "--auth-tokens-file", tokens, "--authorizer", "acl",
		"--super-users", "User:token-1", "--kafka-addr", "127.0.0.1:0")
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer admin-token")
	logc := sharelogv1.NewLogServiceClient(c.conn)
	for _, name := range []string{"mine", "theirs"} {
		_, err := logc.CreateTopic(admin, &sharelogv1.CreateTopicRequest{Name: name, Partitions: 1})
		require.NoError(t, err)
	}
	allow := func(rt sharelogv1.ResourceType, name string) *sharelogv1.AclBinding {
		return &sharelogv1.AclBinding{Principal: kafkaACLPrincipal, ResourceType: rt, PatternType: sharelogv1.PatternType_PATTERN_TYPE_LITERAL,
			ResourceName: name, Operation: sharelogv1.AclOperation_ACL_OPERATION_READ, Permission: sharelogv1.AclPermission_ACL_PERMISSION_ALLOW}
	}
	_, err := sharelogv1.NewAclServiceClient(c.conn).CreateAcls(admin, &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{
		allow(sharelogv1.ResourceType_RESOURCE_TYPE_GROUP, "cg"), allow(sharelogv1.ResourceType_RESOURCE_TYPE_TOPIC, "mine")}})
	require.NoError(t, err)

	k := dialKafka(t, c.kafkaAddr(t))
	require.Zero(t, saslPlain(k, "app", "app-token").ErrorCode, "login")
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.Generation, req.MemberID = 8, "cg", 5, "gone"
	for _, topic := range []string{"mine", "theirs"} {
		req.Topics = append(req.Topics, kmsg.OffsetCommitRequestTopic{Topic: topic,
			Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}})
	}
	resp := k.do(req).(*kmsg.OffsetCommitResponse)
	require.Len(t, resp.Topics, 2)
	assert.Equal(t, "mine", resp.Topics[0].Topic)
	assert.Equal(t, int16(22), resp.Topics[0].Partitions[0].ErrorCode, "ILLEGAL_GENERATION: the group does not exist (v8)")
	assert.Equal(t, "theirs", resp.Topics[1].Topic)
	assert.Equal(t, int16(29), resp.Topics[1].Partitions[0].ErrorCode, "TOPIC_AUTHORIZATION_FAILED")
}
