package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	slserver "github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// End-to-end tests: sharelogctl in-process against the real server on loopback TCP.

var uuidPattern = `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`

// testServer is the real server on 127.0.0.1, its data in a temp dir.
type testServer struct {
	t    *testing.T
	addr string
}

func startServer(t *testing.T, mutate ...func(*slserver.Config)) *testServer {
	t.Helper()
	return &testServer{t: t, addr: testsupport.Serve(t, mutate...).GRPCAddr()}
}

// ctl runs sharelogctl against the server.
func (s *testServer) ctl(stdin string, args ...string) cliResult {
	s.t.Helper()
	return runCLI(s.t, stdin, append([]string{"--addr", s.addr}, args...)...)
}

// requireOK fails the test unless the command succeeded with nothing on stderr.
func requireOK(t *testing.T, res cliResult) {
	t.Helper()
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Empty(t, res.stderr)
}

// requireFailure asserts exit code 1 and a one-line "error: <message> (<REASON>)" on stderr.
func requireFailure(t *testing.T, res cliResult, reason string) {
	t.Helper()
	require.Equal(t, 1, res.code, "stdout: %s", res.stdout)
	require.Regexp(t, `^error: .+ \(`+regexp.QuoteMeta(reason)+`\)\n$`, res.stderr)
}

func describeJSON(t *testing.T, ctl func(string, ...string) cliResult, name string) *sharelogv1.Topic {
	t.Helper()
	res := ctl("", "topics", "describe", name, "-o", "json")
	requireOK(t, res)
	var topic sharelogv1.Topic
	require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &topic))
	return &topic
}

func TestE2ETopics(t *testing.T) {
	t.Parallel()
	ctl := startServer(t).ctl

	res := ctl("", "topics", "create", "orders", "--partitions", "3")
	requireOK(t, res)
	assert.Regexp(t, `^created topic orders \(topic id `+uuidPattern+`, 3 partitions\)\n$`, res.stdout)

	res = ctl("", "topics", "create", "users", "--cleanup-policy", "compact", "--segment-bytes", "4096", "--retention-ms", "60000")
	requireOK(t, res)
	assert.Regexp(t, `^created topic users \(topic id `+uuidPattern+`, 1 partition\)\n$`, res.stdout)

	requireFailure(t, ctl("", "topics", "create", "orders"), "TOPIC_ALREADY_EXISTS")
	requireFailure(t, ctl("", "topics", "create", "bad/name"), "INVALID_REQUEST")
	requireFailure(t, ctl("", "topics", "create", "zero", "--partitions", "0"), "INVALID_REQUEST")

	orders := describeJSON(t, ctl, "orders")
	users := describeJSON(t, ctl, "users")
	assert.EqualValues(t, 4096, users.GetConfig().GetSegmentBytes())
	assert.EqualValues(t, 60000, users.GetConfig().GetRetentionMs())
	assert.Equal(t, "compact", users.GetConfig().GetCleanupPolicy())

	t.Run("list", func(t *testing.T) {
		res := ctl("", "topics", "list")
		requireOK(t, res)
		want := "NAME    TOPIC ID                              PARTITIONS\n" +
			"orders  " + orders.GetTopicId() + "  3\n" +
			"users   " + users.GetTopicId() + "  1\n"
		assert.Equal(t, want, res.stdout)
	})

	t.Run("list json", func(t *testing.T) {
		res := ctl("", "topics", "list", "--output", "json")
		requireOK(t, res)
		require.Equal(t, 1, strings.Count(res.stdout, "\n"), "one object per line")
		var list sharelogv1.ListTopicsResponse
		require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &list))
		require.Len(t, list.GetTopics(), 2)
		assert.Equal(t, "orders", list.GetTopics()[0].GetName())
		assert.Equal(t, orders.GetTopicId(), list.GetTopics()[0].GetTopicId())
		assert.Equal(t, "users", list.GetTopics()[1].GetName())
	})

	t.Run("describe", func(t *testing.T) {
		res := ctl("", "topics", "describe", "orders")
		requireOK(t, res)
		lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
		require.Len(t, lines, 5, res.stdout)
		assert.Equal(t, "Topic: orders\tTopicId: "+orders.GetTopicId()+
			"\tPartitionCount: 3\tConfig: segment_bytes=67108864,retention_ms=-1,cleanup_policy=delete", lines[0])
		assert.Equal(t, "PARTITION  LOG START  HIGH WATERMARK  SIZE BYTES  SEGMENTS", lines[1])
		for i, p := range orders.GetPartitions() {
			assert.Equal(t,
				[]string{fmt.Sprint(i), "0", "0", fmt.Sprint(p.GetSizeBytes()), fmt.Sprint(p.GetSegmentCount())},
				strings.Fields(lines[2+i]))
		}
	})

	requireFailure(t, ctl("", "topics", "describe", "nope"), "UNKNOWN_TOPIC_OR_PARTITION")

	t.Run("delete", func(t *testing.T) {
		res := ctl("", "topics", "delete", "orders")
		requireOK(t, res)
		assert.Equal(t, "deleted topic orders\n", res.stdout)

		res = ctl("", "topics", "list")
		requireOK(t, res)
		assert.Equal(t, "NAME   TOPIC ID                              PARTITIONS\n"+
			"users  "+users.GetTopicId()+"  1\n", res.stdout)

		requireFailure(t, ctl("", "topics", "delete", "orders"), "UNKNOWN_TOPIC_OR_PARTITION")
		requireFailure(t, ctl("", "topics", "describe", "orders"), "UNKNOWN_TOPIC_OR_PARTITION")

		// Re-created under the same name: a new topic id.
		requireOK(t, ctl("", "topics", "create", "orders"))
		assert.NotEqual(t, orders.GetTopicId(), describeJSON(t, ctl, "orders").GetTopicId())
	})
}

func TestE2EProduceFetch(t *testing.T) {
	t.Parallel()
	ctl := startServer(t).ctl
	requireOK(t, ctl("", "topics", "create", "events"))

	res := ctl("plain-1\nuser-1\thello world\nplain-2\n", "produce", "events")
	requireOK(t, res)
	assert.Regexp(t, "^"+producedPattern(3, "events")+"$", res.stdout)

	res = ctl("", "fetch", "events")
	requireOK(t, res)
	assert.Equal(t, "0\t\tplain-1\n1\tuser-1\thello world\n2\t\tplain-2\n", res.stdout)

	// Batches of one, verbose; the last line has no newline and uses \r\n before it.
	res = ctl("k:v:w\r\n:empty-key\nlast", "produce", "events", "--key-separator", ":", "--batch", "1", "--verbose")
	requireOK(t, res)
	assert.Regexp(t, "^partition=0 offset=3\npartition=0 offset=4\npartition=0 offset=5\n"+producedPattern(3, "events")+"$", res.stdout)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			name: "from an offset",
			args: []string{"--offset", "3"},
			want: "3\tk\tv:w\n4\t\tempty-key\n5\t\tlast\n",
		},
		{
			name: "max records",
			args: []string{"--from-beginning", "--max-records", "2"},
			want: "0\t\tplain-1\n1\tuser-1\thello world\n",
		},
		{
			name: "at the high watermark prints nothing",
			args: []string{"--offset", "6"},
			want: "",
		},
		{
			name: "explicit partition",
			args: []string{"--partition", "0", "--offset", "5"},
			want: "5\t\tlast\n",
		},
		{
			name: "read committed, no transactions",
			args: []string{"--isolation-level", "read_committed", "--offset", "5"},
			want: "5\t\tlast\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := ctl("", append([]string{"fetch", "events"}, tt.args...)...)
			requireOK(t, res)
			assert.Equal(t, tt.want, res.stdout)
		})
	}

	t.Run("timestamps", func(t *testing.T) {
		res := ctl("", "fetch", "events", "--max-records", "1", "--print-timestamp", "--print-headers")
		requireOK(t, res)
		assert.Regexp(t, `^0\t1[0-9]{12}\t\t\tplain-1\n$`, res.stdout)
	})

	t.Run("json", func(t *testing.T) {
		res := ctl("", "fetch", "events", "--offset", "1", "--max-records", "2", "-o", "json")
		requireOK(t, res)
		lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
		require.Len(t, lines, 2)
		var rec sharelogv1.Record
		require.NoError(t, protojson.Unmarshal([]byte(lines[0]), &rec))
		assert.EqualValues(t, 1, rec.GetOffset())
		assert.Equal(t, []byte("user-1"), rec.GetKey())
		assert.Equal(t, []byte("hello world"), rec.GetValue())
		require.NoError(t, protojson.Unmarshal([]byte(lines[1]), &rec))
		assert.Nil(t, rec.Key, "keyless")
	})

	t.Run("tombstone", func(t *testing.T) {
		requireOK(t, ctl("gone\t<null>\n", "produce", "events", "--null-value", "<null>"))
		res := ctl("", "fetch", "events", "--offset", "6", "--null-value", "NULL")
		requireOK(t, res)
		assert.Equal(t, "6\tgone\tNULL\n", res.stdout)
	})

	t.Run("produce json", func(t *testing.T) {
		res := ctl("a\nb\n", "produce", "events", "-o", "json")
		require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
		assert.Regexp(t, "^"+producedPattern(2, "events")+"$", res.stderr, "the summary goes to stderr, stdout holds JSON")
		var resp sharelogv1.ProduceResponse
		require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &resp))
		require.Len(t, resp.GetResults(), 2)
		assert.EqualValues(t, 7, resp.GetResults()[0].GetOffset())
		assert.EqualValues(t, 8, resp.GetResults()[1].GetOffset())
	})

	t.Run("key routing", func(t *testing.T) {
		requireOK(t, ctl("", "topics", "create", "routed", "--partitions", "4"))
		res := ctl("same\t1\nsame\t2\nsame\t3\n", "produce", "routed", "-v")
		requireOK(t, res)
		lines := strings.Split(res.stdout, "\n")
		require.Len(t, lines, 5, res.stdout)
		partition, _, ok := strings.Cut(strings.TrimPrefix(lines[0], "partition="), " ")
		require.True(t, ok, lines[0])
		want := "partition=" + partition + " offset="
		assert.Equal(t, []string{want + "0", want + "1", want + "2"}, lines[:3], "one key, one partition")

		res = ctl("", "fetch", "routed", "--partition", partition)
		requireOK(t, res)
		assert.Equal(t, "0\tsame\t1\n1\tsame\t2\n2\tsame\t3\n", res.stdout)
	})
}

// producedPattern matches produce's summary line.
func producedPattern(n int, topic string) string {
	return regexp.QuoteMeta(fmt.Sprintf("produced %s to %s in ", plural(n, "record", "records"), topic)) + `(0s|[0-9.]+m?s)\n`
}

// Not parallel: it changes the progress display's package variables.
func TestE2EProduceProgress(t *testing.T) {
	oldInterval, oldIsTerminal := progressInterval, isTerminal
	t.Cleanup(func() { progressInterval, isTerminal = oldInterval, oldIsTerminal })
	progressInterval = 0 // a progress report after every batch

	ctl := startServer(t).ctl
	requireOK(t, ctl("", "topics", "create", "bulk"))
	input := strings.Repeat("x\n", 25)
	rate := `\([0-9.]+ records/s\)`

	t.Run("not a terminal: only the summary", func(t *testing.T) {
		res := ctl(input, "produce", "bulk", "--batch", "10")
		requireOK(t, res)
		assert.Regexp(t, "^"+producedPattern(25, "bulk")+"$", res.stdout)
	})

	t.Run("--progress: one line each", func(t *testing.T) {
		res := ctl(input, "produce", "bulk", "--batch", "10", "--progress")
		require.Equal(t, 0, res.code, res.stderr)
		assert.Regexp(t, "^produced 10 records to bulk so far "+rate+"\n"+
			"produced 20 records to bulk so far "+rate+"\n"+
			"produced 25 records to bulk so far "+rate+"\n$", res.stderr)
		assert.Regexp(t, "^"+producedPattern(25, "bulk")+"$", res.stdout)
	})

	t.Run("a terminal: one line rewritten, cleared at the end", func(t *testing.T) {
		isTerminal = func(io.Writer) bool { return true }
		res := ctl(input, "produce", "bulk", "--batch", "10")
		require.Equal(t, 0, res.code, res.stderr)
		assert.Regexp(t, "^\r\x1b\\[Kproduced 10 records to bulk so far "+rate+
			"\r\x1b\\[Kproduced 20 records to bulk so far "+rate+
			"\r\x1b\\[Kproduced 25 records to bulk so far "+rate+"\r\x1b\\[K$", res.stderr)
		assert.Regexp(t, "^"+producedPattern(25, "bulk")+"$", res.stdout)

		res = ctl(input, "produce", "nope", "--batch", "10")
		requireFailure(t, res, "UNKNOWN_TOPIC_OR_PARTITION") // the error alone: nothing was produced
	})

	t.Run("an interval between reports", func(t *testing.T) {
		isTerminal = oldIsTerminal
		progressInterval = time.Hour
		res := ctl(input, "produce", "bulk", "--batch", "10", "--progress")
		requireOK(t, res)
	})
}

func TestE2EErrors(t *testing.T) {
	t.Parallel()
	ctl := startServer(t).ctl
	requireOK(t, ctl("", "topics", "create", "events", "--partitions", "2"))
	requireOK(t, ctl("a\nb\n", "produce", "events", "--partition", "1"))

	tests := []struct {
		name   string
		stdin  string
		args   []string
		reason string
	}{
		{name: "fetch unknown topic", args: []string{"fetch", "nope"}, reason: "UNKNOWN_TOPIC_OR_PARTITION"},
		{name: "fetch unknown topic at an offset", args: []string{"fetch", "nope", "--offset", "0"}, reason: "UNKNOWN_TOPIC_OR_PARTITION"},
		{name: "fetch unknown partition", args: []string{"fetch", "events", "--partition", "2"}, reason: "UNKNOWN_TOPIC_OR_PARTITION"},
		{name: "fetch above the high watermark", args: []string{"fetch", "events", "--partition", "1", "--offset", "3"}, reason: "OFFSET_OUT_OF_RANGE"},
		{name: "produce unknown topic", stdin: "x\n", args: []string{"produce", "nope"}, reason: "UNKNOWN_TOPIC_OR_PARTITION"},
		{name: "produce unknown partition", stdin: "x\n", args: []string{"produce", "events", "--partition", "7"}, reason: "UNKNOWN_TOPIC_OR_PARTITION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := ctl(tt.stdin, tt.args...)
			requireFailure(t, res, tt.reason)
			assert.Empty(t, res.stdout)
		})
	}

	t.Run("verbose prints the error metadata", func(t *testing.T) {
		res := ctl("", "fetch", "events", "--partition", "1", "--offset", "3", "-v")
		require.Equal(t, 1, res.code)
		assert.Regexp(t, `^error: .+ \(OFFSET_OUT_OF_RANGE\)\n  metadata: .*high_watermark=2`, res.stderr)
	})

	t.Run("server down", func(t *testing.T) {
		addr := downAddr(t)
		res := runCLI(t, "", "--addr", addr, "topics", "list")
		requireFailure(t, res, "UNAVAILABLE")
		assert.Contains(t, res.stderr, "error: cannot reach the server at "+addr+": ")
	})

	t.Run("server silent", func(t *testing.T) {
		// It accepts connections and never answers: the call fails when --timeout ends.
		addr := silentAddr(t)
		start := time.Now()
		res := runCLI(t, "", "--addr", addr, "--timeout", "300ms", "topics", "list")
		requireFailure(t, res, "UNAVAILABLE")
		assert.Equal(t, "error: cannot reach the server at "+addr+": no connection within --timeout 300ms (connection state CONNECTING) (UNAVAILABLE)\n", res.stderr)
		assert.Less(t, time.Since(start), 10*time.Second)
	})
}

// downAddr returns a loopback address nothing listens on.
func downAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

// silentAddr returns the address of a listener that accepts connections and never writes.
func silentAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	})
	t.Cleanup(func() {
		_ = lis.Close()
		wg.Wait()
	})
	return lis.Addr().String()
}

// ctlWithin runs sharelogctl against addr, interrupted (as by Ctrl-C) after d: a command that
// should fail at once must not be still waiting then.
func ctlWithin(t *testing.T, d time.Duration, addr string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return runCLIContext(ctx, "", append([]string{"--addr", addr}, args...)...)
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestE2EFetchFollow(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctl := srv.ctl
	requireOK(t, ctl("", "topics", "create", "live"))
	requireOK(t, ctl("first\n", "produce", "live"))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--addr", srv.addr, "--timeout", "5s", "fetch", "live", "--follow"}, strings.NewReader(""), &stdout, &stderr)
	}()

	require.Eventually(t, func() bool { return stdout.String() == "0\t\tfirst\n" }, 10*time.Second, 10*time.Millisecond)
	requireOK(t, ctl("k\tsecond\nthird\n", "produce", "live"))
	require.Eventually(t, func() bool { return stdout.String() == "0\t\tfirst\n1\tk\tsecond\n2\t\tthird\n" },
		10*time.Second, 10*time.Millisecond, "got %q", stdout.String())

	cancel() // as SIGINT does in main
	select {
	case code := <-done:
		assert.Equal(t, 0, code, "stderr: %s", stderr.String())
		assert.Empty(t, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("fetch --follow did not stop when interrupted")
	}
	assert.Equal(t, "0\t\tfirst\n1\tk\tsecond\n2\t\tthird\n", stdout.String())
}

func TestE2EPurge(t *testing.T) {
	t.Parallel()
	ctl := startServer(t).ctl
	requireOK(t, ctl("", "topics", "create", "p", "--partitions", "2"))
	requireOK(t, ctl("", "topics", "create", "compacted", "--cleanup-policy", "compact"))
	requireOK(t, ctl("v0\nv1\nv2\nv3\nv4\n", "produce", "p", "--partition", "0"))
	requireOK(t, ctl("w0\nw1\n", "produce", "p", "--partition", "1"))

	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}

	t.Run("happy path", func(t *testing.T) {
		file := write("ok.json", `{"partitions":[{"topic":"p","partition":0,"offset":3},{"topic":"p","partition":1,"offset":-1}],"version":1}`)
		res := ctl("", "purge", "--offset-json-file", file)
		requireOK(t, res)
		assert.Equal(t, "partition: p-0\tlow_watermark: 3\npartition: p-1\tlow_watermark: 2\n", res.stdout)

		res = ctl("", "fetch", "p", "-p", "0")
		requireOK(t, res)
		assert.Equal(t, "3\t\tv3\n4\t\tv4\n", res.stdout, "fetch starts at the new log start offset")
		requireFailure(t, ctl("", "fetch", "p", "-p", "0", "--offset", "2"), "OFFSET_OUT_OF_RANGE")

		topic := describeJSON(t, ctl, "p")
		assert.EqualValues(t, 3, topic.GetPartitions()[0].GetLogStartOffset())
		assert.EqualValues(t, 2, topic.GetPartitions()[1].GetLogStartOffset())
	})

	t.Run("bad partitions", func(t *testing.T) {
		file := write("mixed.json", `{"partitions":[
			{"topic":"p","partition":0,"offset":4},
			{"topic":"p","partition":5,"offset":1},
			{"topic":"missing","partition":0,"offset":1},
			{"topic":"p","partition":1,"offset":99},
			{"topic":"compacted","partition":0,"offset":0}]}`)
		res := ctl("", "purge", "--offset-json-file", file)
		require.Equal(t, 1, res.code, "any failed partition fails the command")
		assert.Equal(t, "error: purge failed for 4 of 5 partitions\n", res.stderr)
		lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
		require.Len(t, lines, 5, res.stdout)
		assert.Equal(t, "partition: p-0\tlow_watermark: 4", lines[0])
		assert.Regexp(t, `^partition: p-5\terror: \S.*$`, lines[1])
		assert.Regexp(t, `^partition: missing-0\terror: \S.*$`, lines[2])
		assert.Regexp(t, `^partition: p-1\terror: \S.*$`, lines[3])
		assert.Regexp(t, `^partition: compacted-0\terror: \S.*$`, lines[4])
	})

	t.Run("json output", func(t *testing.T) {
		res := ctl(`{"partitions":[{"topic":"p","partition":0,"offset":4},{"topic":"p","partition":9,"offset":1}]}`,
			"purge", "--offset-json-file", "-", "-o", "json")
		require.Equal(t, 1, res.code)
		var resp sharelogv1.PurgeResponse
		require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &resp))
		require.Len(t, resp.GetTopics(), 1)
		parts := resp.GetTopics()[0].GetPartitions()
		require.Len(t, parts, 2)
		assert.EqualValues(t, 4, parts[0].GetLowWatermark())
		assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION, parts[1].GetErrorCode())
		assert.EqualValues(t, -1, parts[1].GetLowWatermark())
	})

	t.Run("bad JSON sends nothing", func(t *testing.T) {
		files := map[string]string{
			"invalid":   `{"partitions":[{"topic":"p","partition":0,"offset":5}`,
			"duplicate": `{"partitions":[{"topic":"p","partition":0,"offset":5},{"topic":"p","partition":0,"offset":5}]}`,
			"version":   `{"partitions":[{"topic":"p","partition":0,"offset":5}],"version":2}`,
			"no parts":  `{"version":1}`,
		}
		for name, content := range files {
			res := ctl("", "purge", "--offset-json-file", write(name+".json", content))
			assert.Equal(t, 1, res.code, name)
			assert.Empty(t, res.stdout, name)
			assert.Regexp(t, `^error: offset JSON file .+\n$`, res.stderr, name)
		}
		assert.EqualValues(t, 4, describeJSON(t, ctl, "p").GetPartitions()[0].GetLogStartOffset(), "nothing purged")
	})
}

// TestE2EToken is not parallel: it uses t.Setenv.
func TestE2EToken(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("# ops\ns3cret\n"), 0o600))
	ctl := startServer(t, func(c *slserver.Config) { c.AuthTokensFile = tokens }).ctl

	requireFailure(t, ctl("", "topics", "list"), "UNAUTHENTICATED")
	requireFailure(t, ctl("", "topics", "list", "--token", "wrong"), "UNAUTHENTICATED")
	requireOK(t, ctl("", "topics", "list", "--token", "s3cret"))

	t.Setenv(envToken, "s3cret")
	requireOK(t, ctl("", "topics", "list"))
}

func TestE2ETLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testsupport.NewCA(t)
	serverCert, serverKey := ca.IssueFiles(t, dir, "server", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.IssueFiles(t, dir, "client", x509.ExtKeyUsageClientAuth)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.PEM, 0o600))

	ctl := startServer(t, func(c *slserver.Config) {
		c.TLSCert, c.TLSKey, c.TLSClientCA = serverCert, serverKey, caFile
	}).ctl

	requireOK(t, ctl("", "topics", "list", "--ca-file", caFile, "--cert-file", clientCert, "--key-file", clientKey))
	requireFailure(t, ctl("", "topics", "list"), "UNAVAILABLE")
	requireFailure(t, ctl("", "topics", "list", "--tls"), "UNAVAILABLE") // unknown authority
	res := ctl("", "topics", "list", "--ca-file", caFile)                // no client certificate
	assert.Equal(t, 1, res.code)

	res = ctl("", "topics", "list", "--ca-file", filepath.Join(dir, "nope.pem"))
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "error: reading --ca-file: open ")
	res = ctl("", "topics", "list", "--cert-file", clientCert)
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "error: --cert-file and --key-file go together\n")
}

func TestE2EAddPartitions(t *testing.T) {
	t.Parallel()
	ctl := startServer(t).ctl
	requireOK(t, ctl("", "topics", "create", "grow", "--partitions", "2"))
	before := describeJSON(t, ctl, "grow")

	res := ctl("", "topics", "add-partitions", "grow", "--count", "5", "--validate-only")
	requireOK(t, res)
	assert.Equal(t, "topic grow would have 5 partitions (validate only: nothing changed)\n", res.stdout)
	assert.EqualValues(t, 2, describeJSON(t, ctl, "grow").GetPartitionCount())

	res = ctl("", "topics", "add-partitions", "grow", "--count", "5")
	requireOK(t, res)
	assert.Equal(t, "topic grow now has 5 partitions\n", res.stdout)
	after := describeJSON(t, ctl, "grow")
	assert.EqualValues(t, 5, after.GetPartitionCount())
	assert.Len(t, after.GetPartitions(), 5)
	assert.Equal(t, before.GetTopicId(), after.GetTopicId(), "the same topic")

	res = ctl("", "topics", "add-partitions", "grow", "--count", "6", "-o", "json")
	requireOK(t, res)
	var resp sharelogv1.CreatePartitionsResponse
	require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &resp))
	assert.EqualValues(t, 6, resp.GetTopic().GetPartitionCount())

	requireOK(t, ctl("on the new partition\n", "produce", "grow", "--partition", "5"))
	requireFailure(t, ctl("", "topics", "add-partitions", "grow", "--count", "6"), "INVALID_REQUEST")
	requireFailure(t, ctl("", "topics", "add-partitions", "grow", "--count", "3"), "INVALID_REQUEST")
	requireFailure(t, ctl("", "topics", "add-partitions", "nope", "--count", "3"), "UNKNOWN_TOPIC_OR_PARTITION")
	res = ctl("", "topics", "add-partitions", "grow")
	assert.NotZero(t, res.code)
	assert.Contains(t, res.stderr, `required flag(s) "count" not set`)
}

// TestE2EFetchAllPartitions: without --partition, fetch reads every partition, in partition
// order, each line with its partition (issue 34: it used to read partition 0 only).
func TestE2EFetchAllPartitions(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctl := srv.ctl
	requireOK(t, ctl("", "topics", "create", "multi", "--partitions", "3"))
	requireOK(t, ctl("a0\na1\n", "produce", "multi", "--partition", "0"))
	requireOK(t, ctl("k\tc0\nc1\nc2\n", "produce", "multi", "--partition", "2"))

	res := ctl("", "fetch", "multi")
	requireOK(t, res)
	assert.Equal(t, "0\t0\t\ta0\n0\t1\t\ta1\n2\t0\tk\tc0\n2\t1\t\tc1\n2\t2\t\tc2\n", res.stdout)

	t.Run("one partition keeps its format", func(t *testing.T) {
		res := ctl("", "fetch", "multi", "-p", "2")
		requireOK(t, res)
		assert.Equal(t, "0\tk\tc0\n1\t\tc1\n2\t\tc2\n", res.stdout)
	})
	t.Run("max records over all partitions", func(t *testing.T) {
		res := ctl("", "fetch", "multi", "--max-records", "3")
		requireOK(t, res)
		assert.Equal(t, "0\t0\t\ta0\n0\t1\t\ta1\n2\t0\tk\tc0\n", res.stdout)
	})
	t.Run("offset in every partition", func(t *testing.T) {
		res := ctl("", "fetch", "multi", "--offset", "2")
		requireOK(t, res)
		assert.Equal(t, "2\t2\t\tc2\n", res.stdout, "partitions below the offset print nothing")
	})
	t.Run("json names the partition", func(t *testing.T) {
		res := ctl("", "fetch", "multi", "--offset", "1", "-o", "json")
		requireOK(t, res)
		lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
		require.Len(t, lines, 3, res.stdout)
		var rec struct {
			Partition int32  `json:"partition"`
			Offset    string `json:"offset"`
			Value     []byte `json:"value"`
		}
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec))
		assert.EqualValues(t, 0, rec.Partition)
		assert.Equal(t, "1", rec.Offset)
		assert.Equal(t, []byte("a1"), rec.Value)
		require.NoError(t, json.Unmarshal([]byte(lines[2]), &rec))
		assert.EqualValues(t, 2, rec.Partition)
		assert.Equal(t, "2", rec.Offset)
	})
	t.Run("follow reads every partition", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var stdout, stderr syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"--addr", srv.addr, "--timeout", "5s", "fetch", "multi", "--follow", "--offset", "2"}, strings.NewReader(""), &stdout, &stderr)
		}()
		require.Eventually(t, func() bool { return stdout.String() == "2\t2\t\tc2\n" }, 10*time.Second, 10*time.Millisecond, "got %q", stdout.String())
		requireOK(t, ctl("b0\nb1\nb2\n", "produce", "multi", "--partition", "1"))
		require.Eventually(t, func() bool { return stdout.String() == "2\t2\t\tc2\n1\t2\t\tb2\n" },
			10*time.Second, 10*time.Millisecond, "got %q", stdout.String())
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, 0, code, "stderr: %s", stderr.String())
		case <-time.After(10 * time.Second):
			t.Fatal("fetch --follow did not stop when interrupted")
		}
	})
}
