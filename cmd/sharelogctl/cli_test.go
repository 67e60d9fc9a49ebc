package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

type cliResult struct {
	stdout string
	stderr string
	code   int
}

// runCLI runs sharelogctl in-process with args, stdin as its input.
func runCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return runCLIContext(ctx, stdin, args...)
}

func runCLIContext(ctx context.Context, stdin string, args ...string) cliResult {
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

func TestFormatError(t *testing.T) {
	withInfo := func(c codes.Code, msg, reason string, meta map[string]string) error {
		st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "sharelog", Metadata: meta})
		require.NoError(t, err)
		return st.Err()
	}
	tests := []struct {
		name     string
		err      error
		want     string
		wantMeta string
	}{
		{
			name:     "ErrorInfo reason",
			err:      withInfo(codes.OutOfRange, "offset 9 is above the high watermark 3", "OFFSET_OUT_OF_RANGE", map[string]string{"log_start_offset": "0", "high_watermark": "3"}),
			want:     "error: offset 9 is above the high watermark 3 (OFFSET_OUT_OF_RANGE)",
			wantMeta: "high_watermark=3 log_start_offset=0",
		},
		{
			name: "status without ErrorInfo uses the code name",
			err:  status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
			want: "error: context deadline exceeded (DEADLINE_EXCEEDED)",
		},
		{
			name: "wrapped status",
			err:  fmt.Errorf("describe: %w", withInfo(codes.NotFound, "no topic x", "UNKNOWN_TOPIC_OR_PARTITION", nil)),
			want: "error: describe: no topic x (UNKNOWN_TOPIC_OR_PARTITION)",
		},
		{
			name: "plain error",
			err:  errors.New("reading stdin: boom"),
			want: "error: reading stdin: boom",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, formatError(tt.err))
			assert.Equal(t, tt.wantMeta, errorMetadata(tt.err))
		})
	}
}

func TestLineRecord(t *testing.T) {
	tomb := "NULL"
	tests := []struct {
		name      string
		line      string
		separator string
		tombstone *string
		wantKey   []byte // nil = no key
		wantValue []byte // nil = tombstone
	}{
		{name: "value only", line: "hello", separator: "\t", wantValue: []byte("hello")},
		{name: "key and value", line: "k1\tv1", separator: "\t", wantKey: []byte("k1"), wantValue: []byte("v1")},
		{name: "split at the first separator", line: "k\tv\tw", separator: "\t", wantKey: []byte("k"), wantValue: []byte("v\tw")},
		{name: "empty key is a key", line: "\tv", separator: "\t", wantKey: []byte{}, wantValue: []byte("v")},
		{name: "empty value is a value", line: "k\t", separator: "\t", wantKey: []byte("k"), wantValue: []byte{}},
		{name: "empty line", line: "", separator: "\t", wantValue: []byte{}},
		{name: "multi-byte separator", line: "a::b", separator: "::", wantKey: []byte("a"), wantValue: []byte("b")},
		{name: "no separator disables keys", line: "k\tv", separator: "", wantValue: []byte("k\tv")},
		{name: "null value marker", line: "k\tNULL", separator: "\t", tombstone: &tomb, wantKey: []byte("k")},
		{name: "null marker only matches whole value", line: "k\tNULLX", separator: "\t", tombstone: &tomb, wantKey: []byte("k"), wantValue: []byte("NULLX")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := lineRecord([]byte(tt.line), tt.separator, tt.tombstone)
			assert.Equal(t, tt.wantKey, rec.Key)
			assert.Equal(t, tt.wantValue, rec.Value)
		})
	}
}

func TestErrorCodeName(t *testing.T) {
	assert.Equal(t, "POLICY_VIOLATION", errorCodeName(sharelogv1.ErrorCode_ERROR_CODE_POLICY_VIOLATION))
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{name: "missing argument", args: []string{"fetch"}, wantStderr: "error: accepts 1 arg(s), received 0\nRun 'sharelogctl fetch --help' for usage.\n"},
		{name: "unknown flag", args: []string{"topics", "list", "--nope"}, wantStderr: "error: unknown flag: --nope\n"},
		{name: "bad output", args: []string{"topics", "list", "-o", "yaml"}, wantStderr: `error: invalid --output "yaml": want "text" or "json"`},
		{name: "offset and from-beginning", args: []string{"fetch", "t", "--offset", "1", "--from-beginning"}, wantStderr: "[from-beginning offset] were all set"},
		{name: "unknown command", args: []string{"nope"}, wantStderr: `error: unknown command "nope" for "sharelogctl"`},
		{name: "bad batch", args: []string{"produce", "t", "--batch", "0"}, wantStderr: "error: invalid --batch 0: must be >= 1\n"},
		{name: "negative offset", args: []string{"fetch", "t", "--offset", "-2"}, wantStderr: "error: invalid --offset -2: must be >= 0\n"},
		{name: "bad isolation level", args: []string{"fetch", "t", "--isolation-level", "committed"}, wantStderr: "error: invalid --isolation-level \"committed\": must be read_uncommitted or read_committed\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t, "", append([]string{"--addr", "127.0.0.1:1"}, tt.args...)...)
			assert.Equal(t, 1, res.code)
			assert.Contains(t, res.stderr, tt.wantStderr)
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	res := runCLI(t, "", "purge", "--help")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "Exit status: 0 if every partition was purged, 1 if")
	assert.Contains(t, res.stdout, "--offset-json-file")

	res = runCLI(t, "", "version")
	require.Equal(t, 0, res.code, res.stderr)
	assert.True(t, strings.HasPrefix(res.stdout, "sharelogctl "), res.stdout)

	res = runCLI(t, "", "version", "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, `"version":`)
}

func TestAddrFromEnvironment(t *testing.T) {
	t.Setenv(envAddr, "127.0.0.1:1")
	res := runCLI(t, "", "topics", "list", "--timeout", "5s")
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "127.0.0.1:1")
	assert.Contains(t, res.stderr, "(UNAVAILABLE)\n")
}
