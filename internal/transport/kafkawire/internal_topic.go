package kafkawire

import (
	"context"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
)

// The internal topic __consumer_offsets (docs/kafka.md "Internal topic").
// Kafka keeps committed offsets in it; sharelog keeps them in its own store
// (docs/consumer-groups.md) and lists the topic in Metadata only, marked
// internal, so that clients that skip internal topics (a regex
// subscription) behave as against Kafka:
//   - Metadata lists it, with one partition led by the controller, to a
//     caller that may DESCRIBE the CLUSTER (everyone without ACLs): in a
//     full listing, and when named (else TOPIC_AUTHORIZATION_FAILED);
//   - Produce, Fetch and ListOffsets of it are TOPIC_AUTHORIZATION_FAILED
//     for everyone: there is nothing to read or write;
//   - the other APIs do not know it (UNKNOWN_TOPIC_OR_PARTITION), and no
//     topic of that name can be created (names starting with "__" are
//     reserved).

// consumerOffsetsTopic is the internal topic's name.
const consumerOffsetsTopic = "__consumer_offsets"

// internalRefusal is the error of a Produce, Fetch or ListOffsets of the
// internal topic (nil for any other topic).
func internalRefusal(topic string) error {
	if topic != consumerOffsetsTopic {
		return nil
	}
	return apierr.New(apierr.TopicAuthorizationFailed,
		"%s is an internal topic with no records here: committed offsets are read with OffsetFetch", consumerOffsetsTopic)
}

// mayDescribeInternal reports whether the caller is shown the internal
// topic: DESCRIBE on the CLUSTER.
func (l *Listener) mayDescribeInternal(ctx context.Context) bool {
	return l.allowed(ctx, authz.Describe, authz.Cluster, authz.ClusterName)
}

// internalTopicMetadata is the internal topic's Metadata entry: one
// partition, led by the controller (this broker without one), a stable
// topic id derived from the cluster id.
func (l *Listener) internalTopicMetadata(bs Brokers, clusterID string) kmsg.MetadataResponseTopic {
	rt := kmsg.NewMetadataResponseTopic()
	name := consumerOffsetsTopic
	rt.Topic = &name
	rt.IsInternal = true
	rt.TopicID = internalID(clusterID)
	rp := kmsg.NewMetadataResponseTopicPartition()
	rp.Partition = 0
	node := bs.Controller
	if _, live := brokerOf(bs, node); !live {
		node = bs.Self
	}
	rp.Leader = node
	rp.Replicas, rp.ISR = []int32{node}, []int32{node}
	rt.Partitions = append(rt.Partitions, rp)
	return rt
}

// internalTopicID is the internal topic's id as Metadata shows it, for
// the consumer protocol's assignments (68_consumer_group_heartbeat.go):
// KIP-848 regexes match internal topics, as in Kafka.
func (l *Listener) internalTopicID(ctx context.Context) [16]byte {
	id := l.clusterID
	if bs := l.brokers(ctx); bs.ClusterID != "" {
		id = bs.ClusterID
	}
	return internalID(id)
}

func internalID(clusterID string) [16]byte {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("sharelog:"+clusterID+":"+consumerOffsetsTopic))
}
