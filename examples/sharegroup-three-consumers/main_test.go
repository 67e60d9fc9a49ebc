package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sharelog/sharelog/internal/testsupport"
)

// The example's consumers heartbeat on goroutines, and the test runs a
// server: both must be gone once it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The example against the real server in-process: three consumers drain
// the topic and their counts add up.
func TestThreeConsumersDrainTheTopic(t *testing.T) {
	srv := testsupport.Serve(t)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-addr", srv.GRPCAddr(), "-topic", "demo", "-group", "demo", "-records", "900"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Regexp(t, `(?s)^produced 900 records to demo\n`+
		`consumer-1 \(member [0-9a-f-]{36}\): \d+ records\n`+
		`consumer-2 \(member [0-9a-f-]{36}\): \d+ records\n`+
		`consumer-3 \(member [0-9a-f-]{36}\): \d+ records\n`+
		`total: 900 of 900 records, 0 accepted twice\n$`, stdout.String())
	t.Log("\n" + stdout.String())

	// Consuming what the topic holds, again, in another group.
	stdout.Reset()
	code = run(ctx, []string{"-addr", srv.GRPCAddr(), "-topic", "demo", "-group", "again", "-produce=false", "-records", "0"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "total: 900 of 900 records, 0 accepted twice\n")
}
