package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/changestream"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/ownership"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jslog"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
)

// logRoute is the partition routing of this partitioned instance's log
// API and change streams: the partitions it serves by their gates and
// leases (ownership), the others' owners called over gRPC (grpcPeers);
// topics created and deleted by the holder of the phase-1 lease
// (topicController).
func (n *clusterNode) logRoute(ls *jslog.Store) *logRoute {
	return &logRoute{
		owners: &ownership.Partitions{Gates: n.part.gates, Topics: ls, Leases: func() (*cluster.Items, string) {
			n.mu.RLock()
			defer n.mu.RUnlock()
			return n.part.items, n.self.ID
		}},
		peers:      grpcPeers{n},
		controller: topicController{n},
	}
}

// topicController is broker.Controller in partitioned mode: the holder of
// the phase-1 lease creates and deletes topics (docs/cluster.md), with the
// answers of the phase-1 routing when none can (route, holderErr).
type topicController struct{ n *clusterNode }

var _ broker.Controller = topicController{}

func (c topicController) Controller(ctx context.Context) (string, error) {
	n := c.n
	n.mu.RLock()
	role, holder, active, closing := n.role, n.holder, n.active != nil, n.closing
	n.mu.RUnlock()
	if active && !closing {
		return "", nil
	}
	if err := holderErr(ctx, closing, role, holder); err != nil {
		return "", err
	}
	return holder.Addr, nil
}

// grpcPeers is broker.Peers and changestream.Peers over gRPC: the owner's
// LogService and ChangeStreamService, called with the caller's identity
// (outgoing) over the forwarding connections, a failure to reach the
// owner answered OWNER_UNREACHABLE (forwardErr).
type grpcPeers struct{ n *clusterNode }

var (
	_ broker.Peers       = grpcPeers{}
	_ changestream.Peers = grpcPeers{}
)

func (p grpcPeers) client(peer string) (sharelogv1.LogServiceClient, string, error) {
	cc, err := p.n.conn(peer)
	if err != nil {
		return nil, "", err
	}
	return sharelogv1.NewLogServiceClient(cc), cc.Target(), nil
}

func (p grpcPeers) Append(ctx context.Context, peer, topic string, part int32, recs []logstore.Record) (int64, error) {
	for i := range recs {
		if recs[i].Transactional || recs[i].Control {
			// The gRPC Record has no transactional or control bit: the
			// owner would store a transactional producer's batch as an
			// idempotent one (never behind the last stable offset) or a
			// marker as a record. Such appends are the owner's own
			// (docs/kafka.md "Transactions"): the caller retries there.
			return 0, apierr.New(apierr.NotOwner, "%s-%d: a transactional batch or marker is appended at the partition's owner only", topic, part)
		}
	}
	c, target, err := p.client(peer)
	if err != nil {
		return 0, err
	}
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &part, Records: make([]*sharelogv1.Record, len(recs))}
	if pid := recs[0].ProducerID; pid != 0 {
		// An idempotent batch: the owner checks it against its producer
		// state (the records' sequences follow the first's).
		req.ProducerId, req.ProducerEpoch = pid, int32(recs[0].ProducerEpoch)
		req.BaseSequence = map[int32]int32{part: recs[0].Sequence}
	}
	for i := range recs {
		rec := &recs[i]
		pr := &sharelogv1.Record{Timestamp: rec.Timestamp, Key: rec.Key, Value: rec.Value}
		for _, h := range rec.Headers {
			pr.Headers = append(pr.Headers, &sharelogv1.RecordHeader{Key: h.Key, Value: h.Value})
		}
		req.Records[i] = pr
	}
	resp, err := c.Produce(p.n.outgoing(ctx), req)
	if err != nil {
		// In the domain's vocabulary: the broker makes it this
		// partition's result of a Produce over several (docs/produce.md).
		return 0, grpcapi.FromStatus(forwardErr(target, err))
	}
	if len(resp.GetResults()) != len(recs) {
		return 0, fmt.Errorf("the owner of %s-%d answered %d results for %d records: %w", topic, part, len(resp.GetResults()), len(recs), logstore.ErrStorage)
	}
	if r := resp.GetResults()[0]; r.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
		// One partition asked: its failure is the call's (a request-level
		// error); a per-partition one is an owner that answers otherwise.
		return 0, apierr.New(apierr.ReasonOfKafkaCode(int16(r.GetErrorCode())), "%s", r.GetErrorMessage())
	}
	return resp.GetResults()[0].GetOffset(), nil
}

func (p grpcPeers) Fetch(ctx context.Context, peer string, req broker.FetchRequest) (broker.Fetched, error) {
	c, target, err := p.client(peer)
	if err != nil {
		return broker.Fetched{}, err
	}
	fr := &sharelogv1.FetchRequest{Topic: req.Topic, Partition: req.Partition, Offset: req.Offset,
		MaxRecords: req.MaxRecords, MaxBytes: req.MaxBytes, MaxWaitMs: int32(req.MaxWait / time.Millisecond)}
	if req.ReadCommitted {
		fr.IsolationLevel = sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	resp, err := c.Fetch(p.n.outgoing(ctx), fr)
	if err != nil {
		return broker.Fetched{}, forwardErr(target, err)
	}
	out := broker.Fetched{Records: make([]logstore.Record, len(resp.GetRecords())), HighWatermark: resp.GetHighWatermark(),
		LogStartOffset: resp.GetLogStartOffset(), LastStableOffset: resp.GetLastStableOffset()}
	for i, r := range resp.GetRecords() {
		rec := logstore.Record{Offset: r.GetOffset(), Timestamp: r.GetTimestamp(), Key: r.Key, Value: r.Value}
		for _, h := range r.GetHeaders() {
			rec.Headers = append(rec.Headers, logstore.Header{Key: h.GetKey(), Value: h.GetValue()})
		}
		out.Records[i] = rec
	}
	return out, nil
}

func (p grpcPeers) ListOffsets(ctx context.Context, peer, topic string, part int32, spec broker.OffsetSpec, ts int64) (int64, int64, error) {
	c, target, err := p.client(peer)
	if err != nil {
		return 0, 0, err
	}
	var ps sharelogv1.OffsetSpec
	switch spec {
	case broker.Earliest:
		ps = sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST
	case broker.Latest:
		ps = sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST
	case broker.ByTimestamp:
		ps = sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP
	}
	resp, err := c.ListOffsets(p.n.outgoing(ctx), &sharelogv1.ListOffsetsRequest{Topic: topic, Partition: part, Spec: ps, Timestamp: ts})
	if err != nil {
		return 0, 0, forwardErr(target, err)
	}
	return resp.GetOffset(), resp.GetTimestamp(), nil
}

func (p grpcPeers) Purge(ctx context.Context, peer string, topics []broker.PurgeTopic) ([]broker.PurgeTopicResult, error) {
	c, target, err := p.client(peer)
	if err != nil {
		return nil, err
	}
	req := &sharelogv1.PurgeRequest{Topics: make([]*sharelogv1.PurgeTopic, len(topics))}
	for i, t := range topics {
		pt := &sharelogv1.PurgeTopic{Topic: t.Topic, Partitions: make([]*sharelogv1.PurgePartition, len(t.Partitions))}
		for j, pp := range t.Partitions {
			pt.Partitions[j] = &sharelogv1.PurgePartition{Partition: pp.Partition, Offset: pp.Offset}
		}
		req.Topics[i] = pt
	}
	resp, err := c.Purge(p.n.outgoing(ctx), req)
	if err != nil {
		return nil, forwardErr(target, err)
	}
	out := make([]broker.PurgeTopicResult, len(resp.GetTopics()))
	for i, t := range resp.GetTopics() {
		out[i] = broker.PurgeTopicResult{Topic: t.GetTopic(), Partitions: make([]broker.PurgePartitionResult, len(t.GetPartitions()))}
		for j, r := range t.GetPartitions() {
			out[i].Partitions[j] = broker.PurgePartitionResult{Partition: r.GetPartition(), LowWatermark: r.GetLowWatermark(),
				Code: apierr.ReasonOfKafkaCode(int16(r.GetErrorCode())), Message: r.GetErrorMessage()}
		}
	}
	return out, nil
}

func (p grpcPeers) CreateTopic(ctx context.Context, peer, name string, partitions int32, s broker.TopicSettings) (broker.Topic, error) {
	c, target, err := p.client(peer)
	if err != nil {
		return broker.Topic{}, err
	}
	resp, err := c.CreateTopic(p.n.outgoing(ctx), &sharelogv1.CreateTopicRequest{Name: name, Partitions: partitions,
		Config: grpcapi.SettingsToProto(s)})
	if err != nil {
		return broker.Topic{}, forwardErr(target, err)
	}
	return grpcapi.TopicFromProto(resp), nil
}

func (p grpcPeers) CreatePartitions(ctx context.Context, peer, name string, count int32, validateOnly bool) (broker.TopicInfo, error) {
	c, target, err := p.client(peer)
	if err != nil {
		return broker.TopicInfo{}, err
	}
	resp, err := c.CreatePartitions(p.n.outgoing(ctx), &sharelogv1.CreatePartitionsRequest{Topic: name, Count: count, ValidateOnly: validateOnly})
	if err != nil {
		return broker.TopicInfo{}, forwardErr(target, err)
	}
	return grpcapi.TopicFromProto(resp.GetTopic()).Info, nil
}

func (p grpcPeers) DeleteTopic(ctx context.Context, peer, name string) error {
	c, target, err := p.client(peer)
	if err != nil {
		return err
	}
	if _, err := c.DeleteTopic(p.n.outgoing(ctx), &sharelogv1.DeleteTopicRequest{Name: name}); err != nil {
		return forwardErr(target, err)
	}
	return nil
}

// Stream relays the owner's StreamChanges: its headers start the stream
// here, each of its messages is handed to send and flushed as one (so the
// messages are the owner's: both sides batch under the same bounds), and
// its error is returned as it is.
func (p grpcPeers) Stream(ctx context.Context, peer string, req changestream.Request, send changestream.Sender) error {
	cc, err := p.n.conn(peer)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := sharelogv1.NewChangeStreamServiceClient(cc).StreamChanges(p.n.outgoing(ctx), &sharelogv1.StreamChangesRequest{
		Topic: req.Topic, Partition: req.Partition, StartOffset: req.StartOffset, EndOffset: req.EndOffset, TopicId: req.TopicID,
		KeyPrefix: req.KeyPrefix, OsoMode: sharelogv1.OsoMode(req.OSO)})
	if err != nil {
		return forwardErr(cc.Target(), err)
	}
	// No headers (a nil MD) when the owner refused the call at once: its
	// error comes with the first Recv.
	if hdr, _ := cs.Header(); hdr != nil && req.Started != nil {
		req.Started()
	}
	for {
		resp, err := cs.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return forwardErr(cc.Target(), err)
		}
		for _, pe := range resp.GetEvents() {
			ev, err := grpcapi.ChangeEventFromProto(pe)
			if err != nil {
				return err
			}
			if err := send.Send(ev); err != nil {
				return err
			}
		}
		if err := send.Flush(); err != nil {
			return err
		}
	}
}
