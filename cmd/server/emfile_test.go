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

	// Reads keep working on the descriptors the server already holds.
	_, err = client.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "fds", Partition: 0, Offset: 0})
	require.NoError(t, err)

	// Free the descriptors: the next produce succeeds, no restart.
	for _, conn := range idle {
		conn.Close()
	}
	idle = nil
	require.Eventually(t, func() bool { return produce() == nil }, 10*time.Second, 20*time.Millisecond)
	_, err = client.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "fds", Partition: 0, Offset: 0})
	require.NoError(t, err)
}
