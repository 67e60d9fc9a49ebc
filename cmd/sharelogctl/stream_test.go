package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/server"
)

func TestStreamCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.OSOBackfill = "enabled" })
	requireOK(t, s.ctl("", "topics", "create", "st", "--partitions", "1"))
	// The partition of change-stream.md §1.
	requireOK(t, s.ctl("u/a\t1\nx/z\t9\nu/b\t2\nu/a\t3\nu/b\tNULL\nx/y\t7\nu/c\t5\nx/z\tNULL\n",
		"produce", "st", "--partition", "0", "--null-value", "NULL"))

	t.Run("events of Ex2", func(t *testing.T) {
		res := s.ctl("", "stream", "st", "0", "--prefix", "u/", "--to-end")
		requireOK(t, res)
		assert.Equal(t, "snapshot\t0..7\tDISK\nmutation\t0\tu/a\t1\nmutation\t2\tu/b\t2\nmutation\t3\tu/a\t3\n"+
			"deletion\t4\tu/b\nmutation\t6\tu/c\t5\ncheckpoint\t8\ncheckpoint\t8\n", res.stdout)
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
		assert.Equal(t, "snapshot\t6..7\tDISK\nmutation\t6\tu/c\t5\ndeletion\t7\tx/z\ncheckpoint\t8\ncheckpoint\t8\n", res.stdout)
	})
	t.Run("follow until interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(300 * time.Millisecond)
			cancel()
		}()
		res := runCLIContext(ctx, "", "--addr", s.addr, "stream", "st", "0", "--from", "8")
		assert.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	})
	t.Run("errors", func(t *testing.T) {
		requireFailure(t, s.ctl("", "stream", "nope", "0", "--to-end"), "UNKNOWN_TOPIC_OR_PARTITION")
		res := s.ctl("", "stream", "st", "x")
		require.Equal(t, 1, res.code)
		assert.Contains(t, res.stderr, "invalid partition")
	})
}
