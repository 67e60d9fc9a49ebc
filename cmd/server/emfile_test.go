//go:build linux

package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// openFDs counts the descriptors a process holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	require.NoError(t, err)
	return len(ents)
}

// When the server runs out of file descriptors, a produce that needs a new
// segment fails with UNAVAILABLE / KAFKA_STORAGE_ERROR (retryable, never
// INTERNAL), and once descriptors are free again the next produce succeeds
// without a restart.
func TestTooManyOpenFiles(t *testing.T) {
	c := startChild(t, t.TempDir(), "--fsync", "always", "--segment-bytes", "4096")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := sharelogv1.NewLogServiceClient(c.conn)
	_, err := client.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "fds", Partitions: 1})
	require.NoError(t, err)
	produce := func() error {
		_, err := client.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "fds", Records: []*sharelogv1.Record{{Value: bytes.Repeat([]byte("v"), 1000)}}})
		return err
	}
	require.NoError(t, produce()) // the client connection is up and the segment file exists

	// Leave the server a few spare descriptors and take them with idle
	// connections.
	pid := c.cmd.Process.Pid
	limit := uint64(openFDs(t, pid) + 8)
	require.NoError(t, unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil))
	var idle []net.Conn
	defer func() {
		for _, conn := range idle {
			conn.Close()
		}
	}()
	require.Eventually(t, func() bool {
		conn, err := net.Dial("tcp", c.grpcAddr)
		if err == nil {
			idle = append(idle, conn)
		}
		return uint64(openFDs(t, pid)) >= limit
	}, 10*time.Second, 5*time.Millisecond, "the server's descriptors are exhausted")

	// Produce until the active segment is full and a roll needs a file.
	var perr error
	for i := 0; i < 10 && perr == nil; i++ {
		perr = produce()
	}
	require.Error(t, perr, "a roll without descriptors fails")
	t.Logf("produce without descriptors: %v", perr)
	st := status.Convert(perr)
	assert.Equal(t, codes.Unavailable, st.Code(), "%v", perr)
	var reason string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	assert.Equal(t, "KAFKA_STORAGE_ERROR", reason)

	// Readiness follows (gRPC health on the connection already open: a
	// new HTTP connection for /readyz would need a descriptor too).
	health := healthpb.NewHealthClient(c.conn)
	servingOf := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: sharelogv1.LogService_ServiceDesc.ServiceName})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return resp.GetStatus()
	}
	require.Eventually(t, func() bool { return servingOf() == healthpb.HealthCheckResponse_NOT_SERVING },
		5*time.Second, 100*time.Millisecond, "LogService health follows the failing partition")

	// (Purge and topic creation under a full disk are covered by the log
	// store's fault-injection tests: with descriptors, whether they fail
	// depends on how many they need at once, one free one may suffice.)

	// Reads keep working on the descriptors the server already holds.
	_, err = client.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "fds", Partition: 0, Offset: 0})
	require.NoError(t, err)

	// Free the descriptors: the next produce succeeds, no restart.
	for _, conn := range idle {
		conn.Close()
	}
	idle = nil
	require.Eventually(t, func() bool { return produce() == nil }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return servingOf() == healthpb.HealthCheckResponse_SERVING },
		5*time.Second, 100*time.Millisecond, "LogService health recovers without a restart")
	_, err = client.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "fds2", Partitions: 1})
	require.NoError(t, err)
	presp, err := client.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: "fds",
		Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 1}}}}})
	require.NoError(t, err)
	assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, presp.GetTopics()[0].GetPartitions()[0].GetErrorCode())

	// Offsets stayed dense across the failure: no gap, no reuse.
	next := int64(1)
	for {
		resp, err := client.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "fds", Partition: 0, Offset: next})
		require.NoError(t, err)
		for _, r := range resp.GetRecords() {
			require.Equal(t, next, r.GetOffset(), "offsets are dense")
			next++
		}
		if next >= resp.GetHighWatermark() {
			break
		}
	}
}
