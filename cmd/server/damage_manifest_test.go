package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// The damage that the data directory's manifest makes loud
// (docs/operations.md, "The data directory manifest"): each case damages a
// stopped data directory, restarts the real binary and checks that the
// loss is an ERROR with the affected items offline (never reused offsets,
// never redelivered accepted records), and that the repair flag accepts
// it explicitly.

// acceptFirst makes group consume topic's partition 0 from the start and
// accept offsets 0..n-1 (more records must exist).
func acceptFirst(t *testing.T, c *child, group, topic string, n int64) {
	t.Helper()
	ctx := context.Background()
	earliestGroup(t, c, group)
	sg := sharelogv1.NewShareGroupServiceClient(c.conn)
	resp, err := sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: group, MemberId: "m1", Topics: fetchTopics(topic, []int32{0}, nil)})
	require.NoError(t, err)
	acq := testsupport.AcquiredAll(resp)
	require.NotEmpty(t, acq)
	require.EqualValues(t, 0, acq[0].First)
	require.GreaterOrEqual(t, acq[len(acq)-1].Last, n-1)
	accept := map[int32][]*sharelogv1.AcknowledgementBatch{0: {{FirstOffset: 0, LastOffset: n - 1,
		AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}}}}
	resp, err = sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: group, MemberId: "m1", ShareSessionEpoch: 1,
		Topics: fetchTopics(topic, []int32{0}, accept)})
	require.NoError(t, err)
	pr := testsupport.PartitionOf(resp, topic, 0)
	require.NotNil(t, pr)
	require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, pr.GetAcknowledgeErrorCode(), pr.GetAcknowledgeErrorMessage())
}

// shareFetchFirst opens a new session for group on topic's partition 0
// and returns the partition's answer.
func shareFetchFirst(t *testing.T, c *child, group, topic, member string) *sharelogv1.ShareFetchPartitionResponse {
	t.Helper()
	resp, err := sharelogv1.NewShareGroupServiceClient(c.conn).ShareFetch(context.Background(),
		&sharelogv1.ShareFetchRequest{GroupId: group, MemberId: member, Topics: fetchTopics(topic, []int32{0}, nil)})
	require.NoError(t, err)
	pr := testsupport.PartitionOf(resp, topic, 0)
	require.NotNil(t, pr)
	return pr
}

// assertNotReady checks /readyz answers 503 naming want.
func assertNotReady(t *testing.T, c *child, want string) {
	t.Helper()
	testsupport.WaitReadyzStatus(t, c.httpAddr, http.StatusServiceUnavailable, want, 10*time.Second)
}

// produceOne appends one record to topic's partition 0 and returns its
// offset, or the error.
func produceOne(c *child, topic string) (int64, error) {
	part := int32(0)
	resp, err := sharelogv1.NewLogServiceClient(c.conn).Produce(context.Background(), &sharelogv1.ProduceRequest{Topic: topic, Partition: &part,
		Records: []*sharelogv1.Record{{Value: []byte("after")}}})
	if err != nil {
		return 0, err
	}
	return resp.GetResults()[0].GetOffset(), nil
}

// A topic quarantined at start (a damaged meta.json) keeps its share
// state: restoring it as docs/operations.md says (stop, repair the copy,
// move it back) restores the group's acknowledged state exactly, and
// nothing is logged as deleted.
func TestDamageQuarantinedTopicKeepsShareState(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c := startChild(t, dir)
	_, err := sharelogv1.NewLogServiceClient(c.conn).CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 1})
	require.NoError(t, err)
	produceN(t, c, "orders", 0, 200)
	acceptFirst(t, c, "workers", "orders", 150)
	c.stop(t)

	td := topicDir(t, dir)
	meta, err := os.ReadFile(filepath.Join(td, "meta.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(td, "meta.json"), []byte("{damaged"), 0o644))

	c = startChild(t, dir)
	assert.True(t, c.logged("ERROR", "moved to quarantine"))
	assert.False(t, c.logged("INFO", "dropping share state"), "nothing was deleted by a call")
	pr := shareFetchFirst(t, c, "workers", "orders", "m2")
	assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_KAFKA_STORAGE_ERROR, pr.GetErrorCode(), "the quarantined topic's share-partition is offline: %s", pr.GetErrorMessage())
	_, err = produceOne(c, "orders")
	assert.Equal(t, codes.Unavailable, status.Code(err), "the quarantined topic's partitions are offline: %v", err)
	assertNotReady(t, c, "orders")
	c.stop(t)

	// Restore: move the quarantined copy back and repair its meta.json.
	q, err := filepath.Glob(filepath.Join(dir, "quarantine", "*", "topics", filepath.Base(td)))
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.NoError(t, os.Rename(q[0], td))
	require.NoError(t, os.WriteFile(filepath.Join(td, "meta.json"), meta, 0o644))

	c = startChild(t, dir)
	assert.False(t, c.logged("INFO", "dropping share state"))
	pr = shareFetchFirst(t, c, "workers", "orders", "m3")
	require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, pr.GetErrorCode(), pr.GetErrorMessage())
	acq := testsupport.Acquired(pr)
	require.NotEmpty(t, acq)
	assert.EqualValues(t, 150, acq[0].First, "the 150 accepted records are not delivered again: %v", acq)
	testsupport.WaitReadyz(t, c.httpAddr, "", 10*time.Second)
}

// Deleting a partition's checkpoint with its last segments does not make
// it serve reused offsets: the data directory manifest recorded its high
// watermark, so the partition is offline (the other topic serves) until
// the files are restored or --repair-accept-loss continues it at the
// recorded high watermark.
func TestDamageCheckpointAndLastSegmentsDeleted(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	args := []string{"--segment-bytes", "1024"}
	c := startChild(t, dir, args...)
	logc := sharelogv1.NewLogServiceClient(c.conn)
	_, err := logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 1})
	require.NoError(t, err)
	_, err = logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "other", Partitions: 1})
	require.NoError(t, err)
	for range 20 {
		produceN(t, c, "orders", 0, 5)
	}
	hw := int64(100)
	c.stop(t)

	pdir := filepath.Join(dir, "topics", topicID(t, dir, "orders"), "0")
	logs, err := filepath.Glob(filepath.Join(pdir, "*.log"))
	require.NoError(t, err)
	slices.Sort(logs)
	require.Greater(t, len(logs), 3, "several segments")
	require.NoError(t, os.Remove(filepath.Join(pdir, "checkpoint")))
	for _, l := range logs[len(logs)-2:] {
		require.NoError(t, os.Remove(l))
		for _, suf := range []string{".index", ".timeindex", ".keys"} {
			_ = os.Remove(strings.TrimSuffix(l, ".log") + suf)
		}
	}

	c = startChild(t, dir, args...)
	assert.True(t, c.logged("ERROR", "partition offline"))
	assert.True(t, c.loggedText("ERROR", "partition offline", "the recovered log ends at offset"), "the ERROR names both figures")
	assert.True(t, c.loggedText("ERROR", "partition offline", "recorded high watermark 100"), "the ERROR names both figures")
	_, err = produceOne(c, "orders")
	require.Equal(t, codes.Unavailable, status.Code(err), "no offset below %d is reused: %v", hw, err)
	_, err = sharelogv1.NewLogServiceClient(c.conn).ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: "orders", Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	off, err := produceOne(c, "other")
	require.NoError(t, err, "the rest of the server works")
	assert.EqualValues(t, 0, off)
	assertNotReady(t, c, "orders-0")
	c.stop(t)

	c = startChild(t, dir, append(args, "--repair-accept-loss")...)
	assert.True(t, c.logged("WARN", "partition loss accepted"))
	off, err = produceOne(c, "orders")
	require.NoError(t, err)
	assert.Equal(t, hw, off, "the partition continues at the recorded high watermark")
	c.stop(t)

	c = startChild(t, dir, args...)
	assert.False(t, c.logged("ERROR", "partition offline"), "the accepted loss is recorded")
	off, err = produceOne(c, "orders")
	require.NoError(t, err)
	assert.Equal(t, hw+1, off)
}

// loggedText reports whether a startup log line has the given level, a
// message containing msg and, anywhere in it, text.
func (c *child) loggedText(level, msg, text string) bool {
	for _, l := range c.startup {
		if l["level"] == level && strings.Contains(l["msg"].(string), msg) && strings.Contains(fmt.Sprint(l), text) {
			return true
		}
	}
	return false
}

// topicID returns the id of topic (the name of its directory).
func topicID(t *testing.T, dir, topic string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "topics"))
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, "topics", e.Name(), "meta.json"))
		if err == nil && strings.Contains(string(b), `"name": "`+topic+`"`) {
			return e.Name()
		}
	}
	t.Fatalf("no directory for topic %q", topic)
	return ""
}

// Losing the whole share state (sharegroups/ deleted, or its manifest
// together with the state log) is an ERROR and the share-partitions that
// had state are offline, at every start, until --repair-share-state
// accepts the loss; accepted records are never silently redelivered.
func TestDamageShareStateDeleted(t *testing.T) {
	for name, damage := range map[string]func(t *testing.T, dir string){
		"sharegroups deleted": func(t *testing.T, dir string) {
			require.NoError(t, os.RemoveAll(filepath.Join(dir, "sharegroups")))
		},
		"manifest and state log deleted": func(t *testing.T, dir string) {
			files, err := filepath.Glob(filepath.Join(dir, "sharegroups", "state-*.log"))
			require.NoError(t, err)
			require.NotEmpty(t, files)
			for _, f := range append(files, filepath.Join(dir, "sharegroups", "share-state.manifest")) {
				require.NoError(t, os.Remove(f))
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			c := startChild(t, dir)
			_, err := sharelogv1.NewLogServiceClient(c.conn).CreateTopic(context.Background(), &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 1})
			require.NoError(t, err)
			produceN(t, c, "orders", 0, 200)
			acceptFirst(t, c, "workers", "orders", 150)
			c.stop(t)
			damage(t, dir)

			for i := range int64(2) { // offline at every start until repaired
				c = startChild(t, dir)
				if i == 0 {
					assert.True(t, c.logged("ERROR", "share state missing"))
				} else {
					assert.True(t, c.logged("ERROR", "share-partitions still offline"))
				}
				pr := shareFetchFirst(t, c, "workers", "orders", "m2")
				assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_KAFKA_STORAGE_ERROR, pr.GetErrorCode(),
					"no accepted record is delivered again: %s %v", pr.GetErrorMessage(), testsupport.Acquired(pr))
				assertNotReady(t, c, "workers")
				off, err := produceOne(c, "orders")
				require.NoError(t, err, "the log works")
				assert.Equal(t, 200+i, off)
				c.stop(t)
			}

			c = startChild(t, dir, "--repair-share-state")
			assert.True(t, c.logged("WARN", "share state loss accepted"))
			pr := shareFetchFirst(t, c, "workers", "orders", "m3")
			require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, pr.GetErrorCode(), pr.GetErrorMessage())
			testsupport.WaitReadyz(t, c.httpAddr, "", 10*time.Second)
		})
	}
}

// Deleting topics/ is an ERROR naming every recorded topic, whose
// partitions are offline (the names stay taken, so nothing restarts at
// offset 0 under the same name) until --repair-accept-loss forgets them.
func TestDamageTopicsDeleted(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c := startChild(t, dir)
	logc := sharelogv1.NewLogServiceClient(c.conn)
	_, err := logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 2})
	require.NoError(t, err)
	produceN(t, c, "orders", 0, 10)
	c.stop(t)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "topics")))

	c = startChild(t, dir)
	logc = sharelogv1.NewLogServiceClient(c.conn)
	assert.True(t, c.logged("ERROR", "topic missing"))
	_, err = produceOne(c, "orders")
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	_, err = logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 1})
	assert.Equal(t, codes.AlreadyExists, status.Code(err), "the name stays taken: %v", err)
	assertNotReady(t, c, "orders")
	c.stop(t)

	c = startChild(t, dir, "--repair-accept-loss")
	logc = sharelogv1.NewLogServiceClient(c.conn)
	assert.True(t, c.logged("WARN", "topic loss accepted"))
	_, err = logc.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "orders"})
	assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	testsupport.WaitReadyz(t, c.httpAddr, "", 10*time.Second)
	c.stop(t)

	c = startChild(t, dir)
	assert.False(t, c.logged("ERROR", "topic missing"), "the accepted loss is recorded")
}

// A data directory from before the manifest starts, and gets one.
func TestDamageManifestUpgrade(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, dir)
	_, err := sharelogv1.NewLogServiceClient(c.conn).CreateTopic(context.Background(), &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 1})
	require.NoError(t, err)
	produceN(t, c, "orders", 0, 10)
	c.stop(t)
	require.NoError(t, os.Remove(filepath.Join(dir, "manifest.json")))

	c = startChild(t, dir)
	assert.True(t, c.logged("INFO", "data directory manifest missing"))
	off, err := produceOne(c, "orders")
	require.NoError(t, err)
	assert.EqualValues(t, 10, off)
	_, err = os.Stat(filepath.Join(dir, "manifest.json"))
	assert.NoError(t, err, "a manifest is written")
	testsupport.WaitReadyz(t, c.httpAddr, "", 10*time.Second)
}
