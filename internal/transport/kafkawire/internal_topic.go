package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// The internal topic __consumer_offsets (docs/kafka.md "The internal
// topic"): Kafka keeps committed offsets in it, and clients expect to see
// it in Metadata, marked internal (regex subscriptions that skip internal
// topics, KIP-848 regexes that do not). sharelog keeps committed offsets
// in the consumer-group store, so the topic is listed with one partition,
// led by the answering broker, and reads as empty; it cannot be written,
// created or deleted. Fetch and ListOffsets of it need DESCRIBE on the
// CLUSTER (Kafka's rule for internal topics' data is stricter still).

// InternalTopic is the internal topic's name.
const InternalTopic = broker.InternalTopic

// internalTopicID is its fixed topic id.
var internalTopicID = [16]byte{0x5e, 0x1a, 0x10, 0x90, 0x0c, 0x0f, 0x4e, 0x5e, 0x8f, 0x0e, 0x7a, 0x1c, 0x0a, 0x5e, 0x70, 0x01}

func isInternal(topic string) bool { return topic == InternalTopic }

// internalMetadata is the internal topic's Metadata entry.
func (l *Listener) internalMetadata() kmsg.MetadataResponseTopic {
	rt := kmsg.NewMetadataResponseTopic()
	name := InternalTopic
	rt.Topic, rt.TopicID, rt.IsInternal = &name, internalTopicID, true
	rp := kmsg.NewMetadataResponseTopicPartition()
	self := l.self()
	rp.Leader, rp.LeaderEpoch, rp.Replicas, rp.ISR = self, 0, []int32{self}, []int32{self}
	rt.Partitions = append(rt.Partitions, rp)
	return rt
}

// internalReadErr is why the caller may not read the internal topic's
// partition p (nil: it may, and it is empty).
func (l *Listener) internalReadErr(ctx context.Context, p int32) error {
	if l.cfg.Guard.Enforcing() && !l.allowed(ctx, authz.Describe, authz.Cluster, authz.ClusterName) {
		return apierr.New(apierr.TopicAuthorizationFailed, "reading %s needs DESCRIBE on the cluster", InternalTopic)
	}
	if p != 0 {
		return apierr.New(apierr.UnknownTopicOrPartition, "%s has one partition", InternalTopic)
	}
	return nil
}

// errInternalWrite refuses a produce to the internal topic, as Kafka
// (INVALID_TOPIC_EXCEPTION).
var errInternalWrite = kerr.InvalidTopicException
