package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The test binary doubles as the server: a child started with
// SHARELOG_TEST_CHILD=1 runs main(), so crash tests kill a real process.
func TestMain(m *testing.M) {
	if os.Getenv("SHARELOG_TEST_CHILD") == "1" {
		applyChildNoFile() // SHARELOG_TEST_NOFILE (fds_test.go)
		main()
		return
	}
	if conf := os.Getenv("SHARELOG_TEST_NATS_CONF"); conf != "" {
		runNATSChild(conf) // a NATS node for the cluster fault tests
		return
	}
	// In the test process itself: the children's log readers and
	// waiters, the in-process JetStream clusters and the clients must be
	// gone once the tests have killed and closed them.
	//
	// Two goroutines of nats-server itself are let through: a stream
	// store opened while its in-process server was shutting down is
	// never stopped by that server (seen once in CI: its state flusher
	// and the access-time ticker it registers outlived WaitForShutdown).
	// They belong to nats-server, not to sharelog or its tests.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	)
}

type child struct {
	cmd      *exec.Cmd
	grpcAddr string
	httpAddr string
	conn     *grpc.ClientConn
	exited   chan error
	// startup is the log up to and including "sharelog serving".
	startup []map[string]any
	// logs keeps the last log lines after startup (for failure reports).
	logs tailLog
}

// tailLog keeps the last lines written to it: the server's own log lines
// and, apart, the last per-call lines ("finished call"), which a client
// retrying in a loop would otherwise push every other line out with.
type tailLog struct {
	mu    sync.Mutex
	lines []string
	calls []string
}

func (l *tailLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if strings.Contains(line, `"msg":"finished call"`) {
		l.calls = append(l.calls, line)
		if len(l.calls) > 10 {
			l.calls = l.calls[len(l.calls)-10:]
		}
		return
	}
	l.lines = append(l.lines, line)
	if len(l.lines) > 200 {
		l.lines = l.lines[len(l.lines)-200:]
	}
}

// Tail returns the last n log lines, then the last per-call lines.
func (l *tailLog) Tail(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string(nil), l.lines[max(0, len(l.lines)-n):]...)
	if len(l.calls) > 0 {
		out = append(append(out, "(last calls:)"), l.calls...)
	}
	return out
}

// childStartTimeout bounds startChild's wait for "sharelog serving" (the
// soak tests, opening tens of thousands of partitions, raise it).
var childStartTimeout = 30 * time.Second

// startChild runs the server in a child process and waits until it serves.
func startChild(t *testing.T, dataDir string, args ...string) *child {
	t.Helper()
	return startBinary(t, os.Args[0], dataDir, args...)
}

// startBinary is startChild with another server binary (serverBinary's).
func startBinary(t *testing.T, bin, dataDir string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--data-dir", dataDir, "--grpc-addr", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "SHARELOG_TEST_CHILD=1")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, exited: make(chan error, 1)}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if c.grpcAddr != "" {
				c.logs.add(sc.Text())
				continue
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			c.startup = append(c.startup, line)
			if line["msg"] == "sharelog serving" {
				c.grpcAddr, _ = line["grpc_addr"].(string)
				c.httpAddr, _ = line["http_addr"].(string)
				close(serving)
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() { c.exited <- cmd.Wait() }()
	select {
	case <-serving:
	case err := <-c.exited:
		t.Fatalf("server exited before serving: %v", err)
	case <-time.After(childStartTimeout):
		cmd.Process.Kill()
		t.Fatalf("server did not start within %v", childStartTimeout)
	}
	c.conn, err = grpc.NewClient(c.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		c.conn.Close()
		c.cmd.Process.Kill()
	})
	return c
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	<-c.exited
	c.conn.Close()
}

func TestHealthAndReflection(t *testing.T) {
	c := startChild(t, t.TempDir(), "--fsync", "never")
	resp, err := healthpb.NewHealthClient(c.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-c.exited:
		assert.NoError(t, err, "SIGTERM is a clean exit (status 0)")
	case <-time.After(20 * time.Second):
		t.Fatal("server did not stop on SIGTERM")
	}
}

// Every record acknowledged under --fsync always survives a SIGKILL that
// comes right after the acknowledgement.
func TestAcknowledgedWritesSurviveSIGKILL(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, dir, "--fsync", "always")
	ctx := context.Background()
	client := sharelogv1.NewLogServiceClient(c.conn)
	_, err := client.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "durable", Partitions: 2})
	require.NoError(t, err)

	type ack struct {
		partition int32
		offset    int64
		value     string
	}
	var (
		mu    sync.Mutex
		acked []ack
		wg    sync.WaitGroup
	)
	enough := make(chan struct{})
	var once sync.Once
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				p := int32(w % 2)
				vals := []string{fmt.Sprintf("w%d-%d-a", w, i), fmt.Sprintf("w%d-%d-b", w, i)}
				resp, err := client.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "durable", Partition: &p, Records: []*sharelogv1.Record{
					{Value: []byte(vals[0])}, {Value: []byte(vals[1])}}})
				if err != nil {
					return // the server was killed
				}
				mu.Lock()
				for j, r := range resp.GetResults() {
					acked = append(acked, ack{r.GetPartition(), r.GetOffset(), vals[j]})
				}
				if len(acked) >= 400 {
					once.Do(func() { close(enough) })
				}
				mu.Unlock()
			}
		})
	}
	<-enough
	mu.Lock() // no acknowledgement is recorded after this point...
	c.kill(t) // ...and the kill comes right after the last one.
	snapshot := append([]ack(nil), acked...)
	mu.Unlock()
	wg.Wait()

	c2 := startChild(t, dir, "--fsync", "always")
	client2 := sharelogv1.NewLogServiceClient(c2.conn)
	stored := map[int32]map[int64]string{}
	for p := range int32(2) {
		stored[p] = map[int64]string{}
		for off := int64(0); ; {
			resp, err := client2.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "durable", Partition: p, Offset: off, MaxRecords: 1000})
			require.NoError(t, err)
			if len(resp.GetRecords()) == 0 {
				break
			}
			for _, r := range resp.GetRecords() {
				stored[p][r.GetOffset()] = string(r.GetValue())
				off = r.GetOffset() + 1
			}
		}
	}
	require.GreaterOrEqual(t, len(snapshot), 400)
	for _, a := range snapshot {
		require.Equal(t, a.value, stored[a.partition][a.offset], "acknowledged record %d/%d lost or changed", a.partition, a.offset)
	}
}

// A purge answered under --fsync always is never undone by a SIGKILL.
func TestPurgeSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, dir, "--fsync", "always", "--segment-bytes", "4096")
	ctx := context.Background()
	client := sharelogv1.NewLogServiceClient(c.conn)
	_, err := client.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "p", Partitions: 1})
	require.NoError(t, err)
	part := int32(0)
	for range 20 {
		recs := make([]*sharelogv1.Record, 10)
		for i := range recs {
			recs[i] = &sharelogv1.Record{Value: make([]byte, 100)}
		}
		_, err := client.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "p", Partition: &part, Records: recs})
		require.NoError(t, err)
	}
	resp, err := client.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{
		{Topic: "p", Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 137}}}}})
	require.NoError(t, err)
	require.EqualValues(t, 137, resp.GetTopics()[0].GetPartitions()[0].GetLowWatermark())
	c.kill(t) // right after the response

	c2 := startChild(t, dir, "--fsync", "always", "--segment-bytes", "4096")
	client2 := sharelogv1.NewLogServiceClient(c2.conn)
	earliest, err := client2.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: "p", Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST})
	require.NoError(t, err)
	assert.EqualValues(t, 137, earliest.GetOffset())
	for _, off := range []int64{0, 50, 136} {
		_, err = client2.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "p", Offset: off})
		assert.Equal(t, codes.OutOfRange, status.Code(err), "purged offset %d must stay unreadable", off)
	}
	f, err := client2.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "p", Offset: 137, MaxRecords: 1})
	require.NoError(t, err)
	require.Len(t, f.GetRecords(), 1)
	assert.EqualValues(t, 137, f.GetRecords()[0].GetOffset())
}

func TestFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{"SHARELOG_FSYNC": "never", "SHARELOG_SEGMENT_BYTES": "2048", "SHARELOG_GRPC_ADDR": "127.0.0.1:7000"}
	cfg, _, err := parseFlags([]string{"--grpc-addr", "127.0.0.1:7001"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "never", cfg.Fsync, "environment fills unset flags")
	assert.EqualValues(t, 2048, cfg.SegmentBytes)
	assert.Equal(t, "127.0.0.1:7001", cfg.GRPCAddr, "a flag wins over its variable")
	assert.Equal(t, "./data", cfg.DataDir, "embedded default")

	for _, bad := range [][]string{
		{"--fsync", "sometimes"},
		{"--share-delivery-count-limit", "11"},
		{"--share-min-record-lock-duration", "2h"},
		{"--oso-backfill", "maybe"},
		{"--tls-cert", "x.pem"},
		{"--kafka-default-partitions", "0"},
		{"--kafka-addr", "127.0.0.1:9092", "--kafka-sasl-session-lifetime", "10ms"},
		{"--group-initial-rebalance-delay", "-1s"},
		{"--offsets-retention", "10ms"},
		{"--kafka-sasl-mechanisms", "GSSAPI"},
		{"--kafka-sasl-mechanisms", "PLAIN"}, // PLAIN needs --auth-tokens-file
		{"extra-arg"},
	} {
		_, _, err := parseFlags(bad, func(string) string { return "" }, io.Discard)
		assert.Error(t, err, "%v must be refused", bad)
	}
	kenv := map[string]string{"SHARELOG_KAFKA_ADDR": "127.0.0.1:9092", "SHARELOG_KAFKA_AUTO_CREATE_TOPICS": "true",
		"SHARELOG_KAFKA_DEFAULT_PARTITIONS": "3", "SHARELOG_KAFKA_MAX_REQUEST_BYTES": "2048", "SHARELOG_KAFKA_ADVERTISED_ADDR": "b:9092",
		"SHARELOG_KAFKA_SASL_SESSION_LIFETIME": "5m", "SHARELOG_KAFKA_SASL_MECHANISMS": "scram-sha-512, SCRAM-SHA-256"}
	cfg, _, err = parseFlags(nil, func(k string) string { return kenv[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9092", cfg.KafkaAddr)
	assert.Equal(t, "b:9092", cfg.KafkaAdvertisedAddr)
	assert.True(t, cfg.KafkaAutoCreateTopics)
	assert.Equal(t, 3, cfg.KafkaDefaultPartitions)
	assert.Equal(t, 2048, cfg.KafkaMaxRequestBytes)
	assert.Equal(t, 5*time.Minute, cfg.KafkaSASLSessionLifetime)
	assert.Equal(t, []string{"SCRAM-SHA-512", "SCRAM-SHA-256"}, cfg.KafkaSASLMechanisms)
	cfg, _, err = parseFlags(nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, cfg.KafkaAddr, "the Kafka listener is off by default")
	assert.Equal(t, 100<<20, cfg.KafkaMaxRequestBytes)
	assert.Equal(t, 3*time.Second, cfg.GroupInitialRebalanceDelay, "Kafka's group.initial.rebalance.delay.ms")
	assert.Equal(t, 7*24*time.Hour, cfg.OffsetsRetention)
	genv := map[string]string{"SHARELOG_GROUP_INITIAL_REBALANCE_DELAY": "250ms", "SHARELOG_OFFSETS_RETENTION": "48h"}
	cfg, _, err = parseFlags(nil, func(k string) string { return genv[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 250*time.Millisecond, cfg.GroupInitialRebalanceDelay)
	assert.Equal(t, 48*time.Hour, cfg.OffsetsRetention)
	_, _, err = parseFlags(nil, func(k string) string { return map[string]string{"SHARELOG_SEGMENT_BYTES": "lots"}[k] }, io.Discard)
	assert.ErrorContains(t, err, "SHARELOG_SEGMENT_BYTES")
}
