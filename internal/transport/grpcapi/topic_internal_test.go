package grpcapi

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sharelog/sharelog/internal/broker"
)

// TestTopicRoundTrip: a topic the controller described (TopicFromProto,
// then topicToProto) is the message it sent, an offline partition's code
// and message included.
func TestTopicRoundTrip(t *testing.T) {
	sent := topicToProto(broker.Topic{
		Info: broker.TopicInfo{Name: "t", ID: "5f0c2b8e-2f3a-4c1d-9a7e-1b2c3d4e5f60", Partitions: 2,
			Config: broker.TopicConfig{SegmentBytes: 1 << 20, RetentionMs: -1, CleanupPolicy: broker.CleanupCompact}},
		Partitions: []broker.PartitionInfo{
			{Partition: 0, LogStartOffset: 3, HighWatermark: 9, SizeBytes: 512, SegmentCount: 2},
			{Partition: 1, Err: fmt.Errorf("t-1: %w", broker.ErrOffline)},
		},
	})
	back := TopicFromProto(sent)
	assert.ErrorIs(t, back.Partitions[1].Err, broker.ErrOffline)
	want, err := proto.Marshal(sent)
	require.NoError(t, err)
	got, err := proto.Marshal(topicToProto(back))
	require.NoError(t, err)
	assert.Equal(t, want, got)
}
