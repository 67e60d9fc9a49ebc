package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// nodeID is the id of a single broker (no Config.Cluster); it leads every
// partition and is the controller and every coordinator.
const nodeID = 0

// handleMetadata describes the brokers (this node, or every live instance
// with a Kafka listener in cluster mode) and the requested topics (all of
// them for a null list), by name or (v10+) by id, auto-creating unknown
// names when the flag and the request allow it. Each partition's leader is
// the broker that serves it, with its leader epoch; one no live broker
// leads is LEADER_NOT_AVAILABLE with leader -1 (docs/kafka.md "Cluster
// mode").
func (l *Listener) handleMetadata(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	bs := l.brokers(ctx)
	for _, lb := range bs.List {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = lb.NodeID, lb.Host, lb.Port
		resp.Brokers = append(resp.Brokers, b)
	}
	resp.ClusterID = &l.clusterID
	if bs.ClusterID != "" {
		resp.ClusterID = &bs.ClusterID
	}
	resp.ControllerID = bs.Controller

	var infos []broker.TopicInfo
	var errs []error
	var names []*string
	var ids [][16]byte
	var internal []bool // infos[i] stands for the internal topic (internal_topic.go)
	if req.Topics == nil {
		all, err := l.logOf(ctx).Topics(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range all {
			if !l.allowed(ctx, authz.Describe, authz.Topic, t.Name) {
				continue // a full listing leaves out what the caller may not DESCRIBE
			}
			infos, errs, names, ids, internal = append(infos, t), append(errs, nil), append(names, nil), append(ids, [16]byte{}), append(internal, false)
		}
		if l.mayDescribeInternal(ctx) {
			infos, errs, names, ids, internal = append(infos, broker.TopicInfo{}), append(errs, nil), append(names, nil), append(ids, [16]byte{}), append(internal, true)
		}
	} else {
		autoCreate := l.cfg.AutoCreateTopics && (req.GetVersion() < 4 || req.AllowAutoTopicCreation)
		describable := l.gate(authz.Describe)
		for _, t := range req.Topics {
			var info broker.TopicInfo
			var err error
			isInternal := false
			switch {
			case t.Topic != nil && *t.Topic == consumerOffsetsTopic:
				if isInternal = l.mayDescribeInternal(ctx); !isInternal {
					err = apierr.New(apierr.TopicAuthorizationFailed, "not authorized to DESCRIBE the CLUSTER, which the internal topic %s needs", consumerOffsetsTopic)
				}
			case t.Topic != nil:
				// DESCRIBE before the lookup: a named topic the caller may
				// not see is TOPIC_AUTHORIZATION_FAILED, existing or not.
				if err = describable.require(ctx, *t.Topic); err != nil {
					break
				}
				if autoCreate && l.mayAutoCreate(ctx, *t.Topic) {
					info, err = l.autoCreate(ctx, *t.Topic)
				} else {
					info, err = l.logOf(ctx).TopicInfo(ctx, *t.Topic)
				}
			default:
				// A topic id names no topic the caller may not DESCRIBE:
				// the same answer as an unknown id.
				if info, err = l.topicByID(ctx, t.TopicID); err == nil {
					if derr := describable.require(ctx, info.Name); derr != nil {
						info, err = broker.TopicInfo{}, derr
					}
				}
			}
			infos, errs, names, ids, internal = append(infos, info), append(errs, err), append(names, t.Topic), append(ids, t.TopicID), append(internal, isInternal)
		}
	}
	for i, info := range infos {
		if internal[i] {
			resp.Topics = append(resp.Topics, l.internalTopicMetadata(bs, *resp.ClusterID))
			continue
		}
		rt := kmsg.NewMetadataResponseTopic()
		if err := errs[i]; err != nil {
			rt.Topic, rt.TopicID = names[i], ids[i]
			rt.ErrorCode = errorCode(err)
			if rt.ErrorCode == kerr.InvalidRequest.Code {
				rt.ErrorCode = kerr.InvalidTopicException.Code
			}
			if names[i] == nil && rt.ErrorCode == kerr.UnknownTopicOrPartition.Code {
				rt.ErrorCode = kerr.UnknownTopicID.Code
			}
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		name := info.Name
		rt.Topic = &name
		rt.TopicID = topicID(info.ID)
		for p := range info.Partitions {
			rp := kmsg.NewMetadataResponseTopicPartition()
			rp.Partition = p
			ld := l.leader(ctx, name, p)
			if _, live := brokerOf(bs, ld.Node); !live {
				ld.Node = -1
			}
			rp.Leader, rp.LeaderEpoch = ld.Node, ld.Epoch
			rp.Replicas, rp.ISR = []int32{ld.Node}, []int32{ld.Node}
			if ld.Node < 0 {
				rp.ErrorCode = kerr.LeaderNotAvailable.Code
				rp.Replicas, rp.ISR = []int32{}, []int32{}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
