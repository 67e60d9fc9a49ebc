package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/client/changestream"
	slserver "github.com/sharelog/sharelog/internal/app"
)

func TestStreamCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *slserver.Config) { c.OSOBackfill = "enabled" })
	requireOK(t, s.ctl("", "topics", "create", "st", "--partitions", "1"))
	// The example partition of the change-stream tests (LSO 0, HW 8).
	requireOK(t, s.ctl("u/a\t1\nx/z\t9\nu/b\t2\nu/a\t3\nu/b\tNULL\nx/y\t7\nu/c\t5\nx/z\tNULL\n",
		"produce", "st", "--partition", "0", "--null-value", "NULL"))

	t.Run("events of Ex2", func(t *testing.T) {
		res := s.ctl("", "stream", "st", "0", "--prefix", "u/", "--to-end")
		requireOK(t, res)
		assert.Equal(t, "snapshot\t0..7\tDISK\nmutation\t0\tu/a\t1\nmutation\t2\tu/b\t2\nmutation\t3\tu/a\t3\n"+
			"deletion\t4\tu/b\nmutation\t6\tu/c\t5\ncheckpoint\t8\n", res.stdout, "the end of the snapshot and of the stream: one checkpoint")
	})
	t.Run("materialize", func(t *testing.T) {
		for _, args := range [][]string{{}, {"--oso"}, {"--prefix", "u/", "--oso"}} {
			res := s.ctl("", append([]string{"stream", "st", "0", "--materialize"}, args...)...)
			requireOK(t, res)
			want := "u/a\t3\nu/c\t5\nx/y\t7\n"
			if len(args) > 1 {
				want = "u/a\t3\nu/c\t5\n"
			}
			assert.Equal(t, want, res.stdout, "args %v", args)
		}
	})
	t.Run("oso json", func(t *testing.T) {
		res := s.ctl("", "stream", "st", "0", "--oso", "--to-end", "-o", "json")
		requireOK(t, res)
		lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
		assert.Equal(t, `{"event":"oso-start"}`, lines[0])
		assert.Contains(t, res.stdout, `{"event":"deletion","key":"u/b","offset":"4"}`)
		assert.Contains(t, res.stdout, `{"event":"oso-end"}`)
	})
	t.Run("from an offset", func(t *testing.T) {
		res := s.ctl("", "stream", "st", "0", "--from", "6", "--to-end")
		requireOK(t, res)
		assert.Equal(t, "snapshot\t6..7\tDISK\nmutation\t6\tu/c\t5\ndeletion\t7\tx/z\ncheckpoint\t8\n", res.stdout)
	})
	t.Run("follow until interrupted", func(t *testing.T) {
		requireOK(t, s.ctl("", "topics", "create", "st-live")) // "st" must keep its 8 records
		requireOK(t, s.ctl("u/a\t1\n", "produce", "st-live"))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var stdout, stderr syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"--addr", s.addr, "stream", "st-live", "0", "--from", "1"}, strings.NewReader(""), &stdout, &stderr)
		}()
		// The live tail: a record produced now arrives, then Ctrl-C ends the stream.
		requireOK(t, s.ctl("u/d\t4\n", "produce", "st-live"))
		require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "mutation\t1\tu/d\t4\n") },
			10*time.Second, 10*time.Millisecond, "got %q", stdout.String())
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, 0, code, "stderr: %s", stderr.String())
			assert.Empty(t, stderr.String())
		case <-time.After(10 * time.Second):
			t.Fatal("stream did not stop when interrupted")
		}
	})
	t.Run("oso json checkpoint once", func(t *testing.T) {
		res := s.ctl("", "stream", "st", "0", "--oso", "--to-end", "-o", "json")
		requireOK(t, res)
		assert.Equal(t, 1, strings.Count(res.stdout, `"event":"checkpoint"`), res.stdout)
		assert.True(t, strings.HasSuffix(res.stdout, "{\"event\":\"oso-end\"}\n{\"event\":\"checkpoint\",\"next_offset\":\"8\"}\n"), res.stdout)
	})
	t.Run("errors", func(t *testing.T) {
		tests := []struct {
			name    string
			args    []string
			reason  string
			message string
		}{
			{name: "unknown topic to the end", args: []string{"nope", "0", "--to-end"}, reason: "UNKNOWN_TOPIC_OR_PARTITION", message: `topic "nope"`},
			{name: "unknown topic followed", args: []string{"nope", "0"}, reason: "UNKNOWN_TOPIC_OR_PARTITION", message: `topic "nope"`},
			{name: "unknown partition to the end", args: []string{"st", "5", "--to-end"}, reason: "UNKNOWN_TOPIC_OR_PARTITION", message: `topic "st" has no partition 5`},
			{name: "unknown partition followed", args: []string{"st", "5"}, reason: "UNKNOWN_TOPIC_OR_PARTITION", message: `topic "st" has no partition 5`},
			{name: "from above the end", args: []string{"st", "0", "--from", "9", "--to-end"}, reason: "OFFSET_OUT_OF_RANGE", message: "--from 9 is above the high watermark 8"},
			{name: "from above the end followed", args: []string{"st", "0", "--from", "9"}, reason: "OFFSET_OUT_OF_RANGE", message: "9"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res := ctlWithin(t, 5*time.Second, s.addr, append([]string{"stream"}, tt.args...)...)
				requireFailure(t, res, tt.reason)
				assert.Contains(t, res.stderr, tt.message)
				assert.Empty(t, res.stdout)
			})
		}
		t.Run("server down", func(t *testing.T) {
			addr := downAddr(t)
			for _, args := range [][]string{{"st", "0"}, {"st", "0", "--to-end"}} {
				res := ctlWithin(t, 5*time.Second, addr, append([]string{"stream"}, args...)...)
				requireFailure(t, res, "UNAVAILABLE")
				assert.Contains(t, res.stderr, "cannot reach the server at "+addr)
			}
		})
		res := s.ctl("", "stream", "st", "x")
		require.Equal(t, 1, res.code)
		assert.Contains(t, res.stderr, "invalid partition")
	})
}

func TestStreamTopicDeleted(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	requireOK(t, s.ctl("", "topics", "create", "gone"))
	requireOK(t, s.ctl("k\tv\n", "produce", "gone"))

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--addr", s.addr, "stream", "gone", "0"}, strings.NewReader(""), &stdout, &stderr)
	}()
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "checkpoint\t1\n") },
		10*time.Second, 10*time.Millisecond, "got %q", stdout.String())
	requireOK(t, s.ctl("", "topics", "delete", "gone"))

	select {
	case code := <-done:
		assert.Equal(t, 1, code)
		assert.Equal(t, "error: topic \"gone\" was deleted (UNKNOWN_TOPIC_OR_PARTITION)\n", stderr.String())
	case <-ctx.Done():
		t.Fatal("stream did not end when its topic was deleted")
	}
}

func TestStreamError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{
			name: "topic deleted",
			err:  fmt.Errorf("run: %w", changestream.ErrTopicDeleted),
			want: `error: topic "t" was deleted (UNKNOWN_TOPIC_OR_PARTITION)`,
		},
		{
			name: "partition gone, found by the library",
			err:  status.Errorf(codes.NotFound, `topic "t" has no partition 3`),
			want: `error: topic "t" has no partition 3 (UNKNOWN_TOPIC_OR_PARTITION)`,
		},
		{
			name: "a server error keeps its reason",
			err:  reasonError(codes.FailedPrecondition, "ROLLBACK_REQUIRED", "resume point purged"),
			want: "error: resume point purged (ROLLBACK_REQUIRED)",
		},
		{
			name: "unavailable keeps its code",
			err:  status.Error(codes.Unavailable, "down"),
			want: "error: down (UNAVAILABLE)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, formatError(streamError(tt.err, "t", 3)))
		})
	}
}
