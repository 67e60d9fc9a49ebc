package main

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/metadata"
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
}

// TestKafkaAuthorizationMatrix runs every Kafka API the listener serves
// (but ApiVersions, FindCoordinator and ListGroups, which answer without a
// permission) with --authorizer acl: without its
// permission it answers Kafka's authorization code and changes nothing;
// with exactly the permissions the gRPC handler of the same operation
// requires (e2e/authz_e2e_test.go) it succeeds.
func TestKafkaAuthorizationMatrix(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("admin-token\napp app-token\n"), 0o600))
	c := startChild(t, t.TempDir(), "--fsync", "never", "--auth-tokens-file", tokens, "--authorizer", "acl",
		"--super-users", "User:token-1", "--kafka-addr", "127.0.0.1:0")
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer admin-token")
	logc := sharelogv1.NewLogServiceClient(c.conn)
	aclc := sharelogv1.NewAclServiceClient(c.conn)
	sgc := sharelogv1.NewShareGroupServiceClient(c.conn)
	for _, name := range []string{"t", "victim"} {
		_, err := logc.CreateTopic(admin, &sharelogv1.CreateTopicRequest{Name: name, Partitions: 1})
		require.NoError(t, err)
	}
	_, err := logc.Produce(admin, &sharelogv1.ProduceRequest{Topic: "t", Records: []*sharelogv1.Record{{Value: []byte("a")}, {Value: []byte("b")}}})
	require.NoError(t, err)
	_, err = sgc.UpdateShareGroupConfig(admin, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
	require.NoError(t, err)

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
	const topicDenied, groupDenied, clusterDenied = 29, 30, 31
	otherBindings := func(t *testing.T) any {
		d, err := aclc.DescribeAcls(admin, &sharelogv1.DescribeAclsRequest{Filter: &sharelogv1.AclBindingFilter{Principal: "User:other"}})
		require.NoError(t, err)
		return len(d.GetBindings())
	}

	userc := sharelogv1.NewUserServiceClient(c.conn)
	scramUsers := func(t *testing.T) any {
		l, err := userc.ListUsers(admin, &sharelogv1.ListUsersRequest{})
		require.NoError(t, err)
		return l.String()
	}

	cases := []kafkaACLCase{
		{name: "Produce", needs: []kperm{{topic, "t", write}}, denied: topicDenied, state: bounds, call: func(k *kafkaConn) int16 {
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
		{name: "Fetch", needs: []kperm{{topic, "t", read}}, denied: topicDenied, state: bounds, call: func(k *kafkaConn) int16 {
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
		{name: "ListOffsets", needs: []kperm{{topic, "t", desc}}, denied: topicDenied, state: none, call: func(k *kafkaConn) int16 {
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
		{name: "Metadata", needs: []kperm{{topic, "t", desc}}, denied: topicDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrMetadataRequest()
			req.Version = 12
			name := "t"
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = &name
			req.Topics = append(req.Topics, mt)
			return k.do(req).(*kmsg.MetadataResponse).Topics[0].ErrorCode
		}},
		{name: "CreateTopics", needs: []kperm{{topic, "new", create}}, denied: topicDenied, state: exists("new"), call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrCreateTopicsRequest()
			req.Version, req.TimeoutMillis = 7, 5000
			ct := kmsg.NewCreateTopicsRequestTopic()
			ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "new", 1, -1
			req.Topics = append(req.Topics, ct)
			return k.do(req).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
		}},
		{name: "DeleteRecords", needs: []kperm{{topic, "t", del}}, denied: topicDenied, state: bounds, call: func(k *kafkaConn) int16 {
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
		{name: "IncrementalAlterConfigs", needs: []kperm{{group, "g", altCfg}}, denied: groupDenied, state: groupState, call: func(k *kafkaConn) int16 {
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
		{name: "ShareGroupDescribe", needs: []kperm{{group, "g", desc}}, denied: groupDenied, state: none, call: func(k *kafkaConn) int16 {
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
		{name: "DeleteShareGroupOffsets", needs: []kperm{{group, "g", del}}, denied: groupDenied, state: groupState, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
			req.Version, req.GroupID = 0, "g"
			tp := kmsg.NewDeleteShareGroupOffsetsRequestTopic()
			tp.Topic = "t"
			req.Topics = append(req.Topics, tp)
			return k.do(req).(*kmsg.DeleteShareGroupOffsetsResponse).ErrorCode
		}},
		{name: "ShareGroupHeartbeat", needs: []kperm{{group, "g", read}, {topic, "t", desc}}, denied: groupDenied, deniedBy: []int16{groupDenied, topicDenied}, state: groupState, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrShareGroupHeartbeatRequest()
			req.Version, req.GroupID, req.MemberID, req.SubscribedTopicNames = 1, "g", "m-kafka-acl-test-0000001", []string{"t"}
			return k.do(req).(*kmsg.ShareGroupHeartbeatResponse).ErrorCode
		}},
		{name: "DescribeAcls", needs: []kperm{{cluster, "kafka-cluster", desc}}, denied: clusterDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDescribeACLsRequest()
			req.Version = 3
			req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
			req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			return k.do(req).(*kmsg.DescribeACLsResponse).ErrorCode
		}},
		{name: "CreateAcls", needs: []kperm{{cluster, "kafka-cluster", alter}}, denied: clusterDenied, state: otherBindings, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrCreateACLsRequest()
			req.Version = 3
			cr := kmsg.NewCreateACLsRequestCreation()
			cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = kmsg.ACLResourceTypeTopic, "t", kmsg.ACLResourcePatternTypeLiteral
			cr.Principal, cr.Host, cr.Operation, cr.PermissionType = "User:other", "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
			req.Creations = append(req.Creations, cr)
			return k.do(req).(*kmsg.CreateACLsResponse).Results[0].ErrorCode
		}},
		{name: "DeleteAcls", needs: []kperm{{cluster, "kafka-cluster", alter}}, denied: clusterDenied, state: otherBindings, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDeleteACLsRequest()
			req.Version = 3
			f := kmsg.NewDeleteACLsRequestFilter()
			other := "User:other"
			f.ResourceType, f.ResourcePatternType, f.Principal = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, &other
			f.Operation, f.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			req.Filters = append(req.Filters, f)
			return k.do(req).(*kmsg.DeleteACLsResponse).Results[0].ErrorCode
		}},
		{name: "DescribeUserScramCredentials", needs: []kperm{{cluster, "kafka-cluster", desc}}, denied: clusterDenied, state: none, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
			return k.do(req).(*kmsg.DescribeUserSCRAMCredentialsResponse).ErrorCode
		}},
		{name: "AlterUserScramCredentials", needs: []kperm{{cluster, "kafka-cluster", alter}}, denied: clusterDenied, state: scramUsers, call: func(k *kafkaConn) int16 {
			req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
			up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
			up.Name, up.Mechanism, up.Iterations = "kafka-made", 1, 4096
			up.Salt, up.SaltedPassword = []byte("salt"), make([]byte, 32)
			req.Upsertions = append(req.Upsertions, up)
			return k.do(req).(*kmsg.AlterUserSCRAMCredentialsResponse).Results[0].ErrorCode
		}},
		// Last: it removes the topic.
		{name: "DeleteTopics", needs: []kperm{{topic, "victim", del}}, denied: topicDenied, state: exists("victim"), call: func(k *kafkaConn) int16 {
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
			// Every needed permission but one is not enough.
			for skip := range tc.needs {
				grant(append(append([]kperm{}, tc.needs[:skip]...), tc.needs[skip+1:]...))
				before := tc.state(t)
				want := tc.denied
				if tc.deniedBy != nil {
					want = tc.deniedBy[skip]
				}
				assert.Equal(t, want, tc.call(k), "without %v", tc.needs[skip])
				assert.Equal(t, before, tc.state(t), "a denied call changed nothing")
			}
			grant(tc.needs)
			assert.Equal(t, int16(0), tc.call(k), "with exactly %v", tc.needs)
		})
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
