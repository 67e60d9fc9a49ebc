package shareconsumer

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// fakeCluster is a partitioned cluster in miniature, for the consumer's
// side of it: each instance serves ShareFetch and ShareAcknowledge for
// the partitions it owns only (one share session per member per instance;
// NOT_LEADER_OR_FOLLOWER for the others, left out of the session), as
// docs/cluster.md describes the partitioned mode. Moving a partition
// releases the records its old owner had locked. Membership assigns every
// partition of the topic to every member; DescribeCluster says who owns
// what. It keeps per record how often it was delivered and accepted.
type fakeCluster struct {
	t     *testing.T
	topic string

	mu       sync.Mutex
	insts    []*fakeInstance
	owner    map[int32]string // partition → instance ID
	recs     map[int32][]*fakeRecord
	notOwned int        // fetch entries answered NOT_LEADER_OR_FOLLOWER
	waits    []fakeWait // the long polls that waited, in the order they ended
}

type fakeWait struct {
	inst       string
	start, end time.Time
}

type fakeRecord struct {
	state     string // "available", "acquired", "done"
	by        string // acquired by: instance ID
	delivered int
	accepted  int
}

type fakeInstance struct {
	sharelogv1.UnimplementedShareGroupServiceServer
	sharelogv1.UnimplementedLogServiceServer
	fc   *fakeCluster
	id   string
	addr string
	srv  *grpc.Server

	// guarded by fc.mu
	sessions map[string]*fakeSession // by member
	fetches  int
}

type fakeSession struct {
	epoch int32 // next expected
	parts map[int32]bool
}

func startFakeCluster(t *testing.T, topic string, partitions int32, ids ...string) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{t: t, topic: topic, owner: map[int32]string{}, recs: map[int32][]*fakeRecord{}}
	for _, id := range ids {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		in := &fakeInstance{fc: fc, id: id, addr: lis.Addr().String(), srv: grpc.NewServer(), sessions: map[string]*fakeSession{}}
		sharelogv1.RegisterShareGroupServiceServer(in.srv, in)
		sharelogv1.RegisterLogServiceServer(in.srv, in)
		go func() { _ = in.srv.Serve(lis) }()
		t.Cleanup(in.srv.Stop)
		fc.insts = append(fc.insts, in)
	}
	for p := range partitions {
		fc.owner[p] = ids[int(p)%len(ids)]
	}
	return fc
}

func (fc *fakeCluster) inst(id string) *fakeInstance {
	for _, in := range fc.insts {
		if in.id == id {
			return in
		}
	}
	panic(id)
}

// produce appends n records to every partition.
func (fc *fakeCluster) produce(n int) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for p := range fc.owner {
		for range n {
			fc.recs[p] = append(fc.recs[p], &fakeRecord{state: "available"})
		}
	}
}

// move gives partition p to instance to: the old owner releases the
// records it had locked; its sessions holding p say so at their next fetch.
func (fc *fakeCluster) move(p int32, to string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	from := fc.owner[p]
	fc.owner[p] = to
	for _, r := range fc.recs[p] {
		if r.state == "acquired" {
			r.state, r.by = "available", ""
		}
	}
	_ = from // its sessions holding p answer NOT_LEADER_OR_FOLLOWER at their next fetch
}

// requireAcceptedOnce checks every record was accepted exactly once.
func (fc *fakeCluster) requireAcceptedOnce(t *testing.T) {
	t.Helper()
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for p, rs := range fc.recs {
		for off, r := range rs {
			require.Equal(t, 1, r.accepted, "partition %d offset %d accepted", p, off)
		}
	}
}

func (fc *fakeCluster) total() int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	n := 0
	for _, rs := range fc.recs {
		n += len(rs)
	}
	return n
}

// dial is a Config.Dial (or router.Dialer): the consumer (or the router)
// closes what it opens.
func (fc *fakeCluster) dial(*testing.T) func(string) (grpc.ClientConnInterface, error) {
	return func(addr string) (grpc.ClientConnInterface, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
}

func sessionError(reason apierr.Reason) error {
	st, _ := status.New(codes.FailedPrecondition, string(reason)).WithDetails(&errdetails.ErrorInfo{Reason: string(reason), Domain: apierr.Domain})
	return st.Err()
}

func (in *fakeInstance) DescribeCluster(context.Context, *sharelogv1.DescribeClusterRequest) (*sharelogv1.DescribeClusterResponse, error) {
	fc := in.fc
	fc.mu.Lock()
	defer fc.mu.Unlock()
	resp := &sharelogv1.DescribeClusterResponse{Mode: "partitioned"}
	for _, i := range fc.insts {
		resp.Instances = append(resp.Instances, &sharelogv1.ClusterInstance{InstanceId: i.id, GrpcAddress: i.addr})
	}
	for p := range int32(len(fc.owner)) {
		resp.Partitions = append(resp.Partitions, &sharelogv1.PartitionOwner{Topic: fc.topic, Partition: p, OwnerId: fc.owner[p]})
	}
	return resp, nil
}

func (in *fakeInstance) ShareGroupHeartbeat(_ context.Context, req *sharelogv1.ShareGroupHeartbeatRequest) (*sharelogv1.ShareGroupHeartbeatResponse, error) {
	fc := in.fc
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if req.GetMemberEpoch() < 0 {
		return &sharelogv1.ShareGroupHeartbeatResponse{MemberId: req.GetMemberId(), MemberEpoch: -1}, nil
	}
	asg := &sharelogv1.Assignment{TopicPartitions: []*sharelogv1.TopicPartitions{{Topic: fc.topic}}}
	for p := range int32(len(fc.owner)) {
		asg.TopicPartitions[0].Partitions = append(asg.TopicPartitions[0].Partitions, p)
	}
	return &sharelogv1.ShareGroupHeartbeatResponse{MemberId: req.GetMemberId(), MemberEpoch: 1, HeartbeatIntervalMs: 100, Assignment: asg}, nil
}

// session admits a request at epoch (0 opens, -1 closes). Caller holds mu.
func (in *fakeInstance) session(member string, epoch int32) (*fakeSession, error) {
	s := in.sessions[member]
	switch {
	case epoch == 0:
		if s != nil {
			in.releaseLocked()
		}
		s = &fakeSession{epoch: 1, parts: map[int32]bool{}}
		in.sessions[member] = s
		return s, nil
	case s == nil:
		return nil, sessionError(apierr.ShareSessionNotFound)
	case epoch == -1:
		return s, nil
	case epoch != s.epoch:
		return nil, sessionError(apierr.InvalidShareSessionEpoch)
	}
	s.epoch++
	return s, nil
}

// releaseLocked releases what this instance locked (one member in these
// tests). Caller holds mu.
func (in *fakeInstance) releaseLocked() {
	for _, rs := range in.fc.recs {
		for _, r := range rs {
			if r.state == "acquired" && r.by == in.id {
				r.state, r.by = "available", ""
			}
		}
	}
}

// ack applies one partition's batches. Caller holds mu.
func (in *fakeInstance) ack(p int32, batches []*sharelogv1.AcknowledgementBatch) sharelogv1.ErrorCode {
	fc := in.fc
	if fc.owner[p] != in.id {
		return sharelogv1.ErrorCode_ERROR_CODE_NOT_LEADER_OR_FOLLOWER
	}
	for _, b := range batches {
		for off := b.GetFirstOffset(); off <= b.GetLastOffset(); off++ {
			if r := fc.recs[p][off]; r.state != "acquired" || r.by != in.id {
				return sharelogv1.ErrorCode_ERROR_CODE_INVALID_RECORD_STATE
			}
		}
	}
	for _, b := range batches {
		for off := b.GetFirstOffset(); off <= b.GetLastOffset(); off++ {
			r := fc.recs[p][off]
			switch b.GetAcknowledgeTypes()[0] {
			case sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT:
				r.state, r.by = "done", ""
				r.accepted++
			case sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE:
				r.state, r.by = "available", ""
			case sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_REJECT:
				r.state, r.by = "done", ""
			}
		}
	}
	return sharelogv1.ErrorCode_ERROR_CODE_NONE
}

func (in *fakeInstance) ShareFetch(ctx context.Context, req *sharelogv1.ShareFetchRequest) (*sharelogv1.ShareFetchResponse, error) {
	fc := in.fc
	fc.mu.Lock()
	in.fetches++
	s, err := in.session(req.GetMemberId(), req.GetShareSessionEpoch())
	if err != nil {
		fc.mu.Unlock()
		return nil, err
	}
	resp := &sharelogv1.ShareFetchResponse{AcquisitionLockTimeoutMs: 30000}
	answers := map[int32]*sharelogv1.ShareFetchPartitionResponse{}
	for _, t := range req.GetForgottenTopicsData() {
		for _, p := range t.GetPartitions() {
			delete(s.parts, p)
		}
	}
	for _, t := range req.GetTopics() {
		for _, pe := range t.GetPartitions() {
			p := pe.GetPartition()
			a := &sharelogv1.ShareFetchPartitionResponse{Partition: p}
			answers[p] = a
			if len(pe.GetAcknowledgementBatches()) > 0 {
				a.AcknowledgeErrorCode = in.ack(p, pe.GetAcknowledgementBatches())
			}
			if fc.owner[p] != in.id {
				fc.notOwned++
				a.ErrorCode = sharelogv1.ErrorCode_ERROR_CODE_NOT_LEADER_OR_FOLLOWER
				a.ErrorMessage = fmt.Sprintf("this instance does not own the partition; it is served by instance %s", fc.owner[p])
				delete(s.parts, p)
				continue
			}
			s.parts[p] = true
		}
	}
	for p := range s.parts {
		if fc.owner[p] != in.id { // moved away since the last fetch
			fc.notOwned++
			answers[p] = &sharelogv1.ShareFetchPartitionResponse{Partition: p, ErrorCode: sharelogv1.ErrorCode_ERROR_CODE_NOT_LEADER_OR_FOLLOWER,
				ErrorMessage: fmt.Sprintf("this instance does not own the partition; it is served by instance %s", fc.owner[p])}
			delete(s.parts, p)
		}
	}
	budget := int(req.GetMaxRecords())
	got := 0
	for p := range s.parts {
		a := answers[p]
		if a == nil {
			a = &sharelogv1.ShareFetchPartitionResponse{Partition: p}
			answers[p] = a
		}
		for off, r := range fc.recs[p] {
			if got >= budget {
				break
			}
			if r.state != "available" {
				continue
			}
			r.state, r.by = "acquired", in.id
			r.delivered++
			got++
			a.Records = append(a.Records, &sharelogv1.Record{Offset: int64(off), Value: []byte("v")})
			a.AcquiredRecords = append(a.AcquiredRecords, &sharelogv1.AcquiredRecords{FirstOffset: int64(off), LastOffset: int64(off), DeliveryCount: int32(r.delivered)})
		}
	}
	tr := &sharelogv1.ShareFetchTopicResponse{Topic: fc.topic}
	for p := range int32(len(fc.owner)) {
		if a := answers[p]; a != nil {
			tr.Partitions = append(tr.Partitions, a)
		}
	}
	if len(tr.Partitions) > 0 {
		resp.Responses = []*sharelogv1.ShareFetchTopicResponse{tr}
	}
	fc.mu.Unlock()
	if got == 0 && req.GetMaxWaitMs() > 0 {
		// The long poll, without the early answer on new records: enough
		// to see how a Poll waits.
		start := time.Now()
		select {
		case <-time.After(time.Duration(req.GetMaxWaitMs()) * time.Millisecond):
		case <-ctx.Done():
		}
		fc.mu.Lock()
		fc.waits = append(fc.waits, fakeWait{inst: in.id, start: start, end: time.Now()})
		fc.mu.Unlock()
	}
	return resp, nil
}

func (in *fakeInstance) ShareAcknowledge(_ context.Context, req *sharelogv1.ShareAcknowledgeRequest) (*sharelogv1.ShareAcknowledgeResponse, error) {
	fc := in.fc
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if _, err := in.session(req.GetMemberId(), req.GetShareSessionEpoch()); err != nil {
		return nil, err
	}
	resp := &sharelogv1.ShareAcknowledgeResponse{AcquisitionLockTimeoutMs: 30000}
	for _, t := range req.GetTopics() {
		tr := &sharelogv1.ShareAcknowledgeTopicResponse{Topic: t.GetTopic()}
		for _, pe := range t.GetPartitions() {
			tr.Partitions = append(tr.Partitions, &sharelogv1.ShareAcknowledgePartitionResponse{
				Partition: pe.GetPartition(), ErrorCode: in.ack(pe.GetPartition(), pe.GetAcknowledgementBatches())})
		}
		resp.Responses = append(resp.Responses, tr)
	}
	if req.GetShareSessionEpoch() == -1 {
		delete(in.sessions, req.GetMemberId())
		in.releaseLocked()
	}
	return resp, nil
}
