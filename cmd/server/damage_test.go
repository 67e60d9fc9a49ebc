package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// The damage table against the real binary: each case damages a stopped
// data directory the way an operator or a failing disk could, restarts the
// server and checks what docs/operations.md promises. The per-file cases
// (byte flips, truncations, index files) are internal/storage/logstore's
// TestDamageTable and internal/sharegroup's TestShareStateDamage; these are
// the ones that span the store and the share groups.

// stop ends the child with SIGTERM (a clean shutdown) and waits for it.
func (c *child) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop within 30s of SIGTERM")
	}
	c.conn.Close()
}

// logged reports whether a line of the child's log (startup and after)
// has the given level and a message containing msg.
func (c *child) logged(level, msg string) bool {
	for _, l := range c.startup {
		if l["level"] == level && strings.Contains(l["msg"].(string), msg) {
			return true
		}
	}
	for _, l := range c.logs.Tail(200) {
		if strings.Contains(l, `"level":"`+level+`"`) && strings.Contains(l, msg) {
			return true
		}
	}
	return false
}

// topicDir returns the directory of the only topic in dataDir.
func topicDir(t *testing.T, dataDir string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "topics"))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	return filepath.Join(dataDir, "topics", entries[0].Name())
}

func produceN(t *testing.T, c *child, topic string, part int32, n int) {
	t.Helper()
	recs := make([]*sharelogv1.Record, n)
	for i := range recs {
		recs[i] = &sharelogv1.Record{Value: []byte(strings.Repeat("v", 50))}
	}
	_, err := sharelogv1.NewLogServiceClient(c.conn).Produce(context.Background(), &sharelogv1.ProduceRequest{Topic: topic, Partition: &part, Records: recs})
	require.NoError(t, err)
}

func earliestGroup(t *testing.T, c *child, group string) {
	t.Helper()
	_, err := sharelogv1.NewShareGroupServiceClient(c.conn).UpdateShareGroupConfig(context.Background(), &sharelogv1.UpdateShareGroupConfigRequest{GroupId: group,
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
	require.NoError(t, err)
}

func fetchTopics(topic string, parts []int32, batches map[int32][]*sharelogv1.AcknowledgementBatch) []*sharelogv1.ShareFetchTopic {
	ft := &sharelogv1.ShareFetchTopic{Topic: topic}
	for _, p := range parts {
		ft.Partitions = append(ft.Partitions, &sharelogv1.ShareFetchPartition{Partition: p, AcknowledgementBatches: batches[p]})
	}
	return []*sharelogv1.ShareFetchTopic{ft}
}

// With one partition of a topic offline, the topic's healthy partitions
// keep working for share groups: the heartbeat assigns every partition,
// ShareFetch serves the healthy ones and answers KAFKA_STORAGE_ERROR for
// the offline one alone, and the group's offsets still list them all.
func TestDamageOfflinePartitionStaysScoped(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c := startChild(t, dir)
	_, err := sharelogv1.NewLogServiceClient(c.conn).CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 3})
	require.NoError(t, err)
	all := []int32{0, 1, 2}
	for _, p := range all {
		produceN(t, c, "orders", p, 10)
	}
	earliestGroup(t, c, "workers")
	sg := sharelogv1.NewShareGroupServiceClient(c.conn)
	resp, err := sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "workers", MemberId: "m1", Topics: fetchTopics("orders", all, nil)})
	require.NoError(t, err)
	require.Len(t, testsupport.AcquiredAll(resp), 3)
	c.stop(t)

	require.NoError(t, os.RemoveAll(filepath.Join(topicDir(t, dir), "0")))
	c = startChild(t, dir)
	assert.True(t, c.logged("ERROR", "partition offline"))
	sg = sharelogv1.NewShareGroupServiceClient(c.conn)

	hb, err := sg.ShareGroupHeartbeat(ctx, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "workers", MemberId: "m2", SubscribedTopicNames: []string{"orders"}})
	require.NoError(t, err)
	var assigned []int32
	for _, tp := range hb.GetAssignment().GetTopicPartitions() {
		assert.Equal(t, "orders", tp.GetTopic())
		assigned = append(assigned, tp.GetPartitions()...)
	}
	slices.Sort(assigned)
	assert.Equal(t, all, assigned, "the offline partition stays assigned, the healthy ones too")

	resp, err = sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "workers", MemberId: "m2", Topics: fetchTopics("orders", all, nil)})
	require.NoError(t, err)
	for _, p := range all {
		pr := testsupport.PartitionOf(resp, "orders", p)
		require.NotNil(t, pr, "partition %d answered", p)
		if p == 0 {
			assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_KAFKA_STORAGE_ERROR, pr.GetErrorCode(), "the offline partition: %s", pr.GetErrorMessage())
			continue
		}
		assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, pr.GetErrorCode(), "healthy partition %d: %s", p, pr.GetErrorMessage())
		assert.Equal(t, []testsupport.Range{{First: 0, Last: 9, Count: 1}}, testsupport.Acquired(pr), "healthy partition %d", p)
	}

	offs, err := sg.DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "workers"})
	require.NoError(t, err)
	var listed []int32
	for _, ot := range offs.GetTopics() {
		for _, op := range ot.GetPartitions() {
			listed = append(listed, op.GetPartition())
		}
	}
	slices.Sort(listed)
	assert.Equal(t, all, listed, "the group's offsets still list every partition")
}
