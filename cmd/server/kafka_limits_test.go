package main

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// kafkaAddr is the Kafka listener's address from the child's start-up line.
func (c *child) kafkaAddr(t *testing.T) string {
	t.Helper()
	for _, l := range c.startup {
		if l["msg"] == "sharelog serving" {
			if a, _ := l["kafka_addr"].(string); a != "" {
				return a
			}
		}
	}
	t.Fatal("the child serves no Kafka listener")
	return ""
}

// kafkaCall writes req on nc and reads its response frame (the bytes after
// the correlation id), failing on any error.
func kafkaCall(t *testing.T, nc net.Conn, req kmsg.Request, corr int32) []byte {
	t.Helper()
	body, err := kafkaRoundTrip(nc, req, corr)
	require.NoError(t, err)
	return body
}

func kafkaRoundTrip(nc net.Conn, req kmsg.Request, corr int32) ([]byte, error) {
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("limits-test")).AppendRequest(nil, req, corr)
	if _, err := nc.Write(frame); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		return nil, err
	}
	resp := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(nc, resp); err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(resp)); got != corr {
		return nil, errors.New("wrong correlation id")
	}
	return resp[4:], nil
}

func apiVersions() kmsg.Request {
	r := kmsg.NewPtrApiVersionsRequest()
	r.Version = 0 // a v0 response header and body: no client software fields
	return r
}

// closedWithin waits for the server to close nc and returns how long that
// took from start; it fails if nc is still open after limit.
func closedWithin(t *testing.T, nc net.Conn, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	require.NoError(t, nc.SetReadDeadline(start.Add(limit)))
	_, err := nc.Read(make([]byte, 1))
	require.Error(t, err)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "still open after %s", limit)
	return time.Since(start)
}

func (c *child) loggedClose(reason string) bool {
	for _, l := range c.logs.Tail(200) {
		if strings.Contains(l, `"msg":"kafka connection closed"`) && strings.Contains(l, reason) {
			return true
		}
	}
	return false
}

// --kafka-idle-timeout closes a connection that sent no request for that
// long, but neither one that keeps sending requests nor one whose long
// poll outlasts it (docs/kafka.md "Limits").
func TestKafkaIdleTimeout(t *testing.T) {
	const idle = time.Second
	c := startChild(t, t.TempDir(), "--fsync", "never", "--kafka-addr", "127.0.0.1:0", "--kafka-idle-timeout", idle.String())
	addr := c.kafkaAddr(t)
	_, err := sharelogv1.NewLogServiceClient(c.conn).CreateTopic(t.Context(), &sharelogv1.CreateTopicRequest{Name: "idle", Partitions: 1})
	require.NoError(t, err)

	quiet, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer quiet.Close()
	busy, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer busy.Close()
	poll, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer poll.Close()

	// The server's idle clock starts when it has written the answer:
	// after sent, before last. The close is judged from sent (not before
	// the timeout) and from last (not much after it).
	sent := time.Now()
	kafkaCall(t, quiet, apiVersions(), 1)
	last := time.Now()
	quietClosed := make(chan time.Duration, 1)
	go func() { // measured while the others work
		_ = quiet.SetReadDeadline(last.Add(10 * idle))
		_, err := quiet.Read(make([]byte, 1))
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			quietClosed <- -1
			return
		}
		quietClosed <- time.Since(sent)
	}()
	// A long poll of 3 idle timeouts on an empty partition.
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version, fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes, fetch.ReplicaID = 12, int32(3*idle/time.Millisecond), 1, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "idle"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	polled := make(chan error, 1)
	go func() {
		start := time.Now()
		_, err := kafkaRoundTrip(poll, fetch, 7)
		if err == nil && time.Since(start) < 2*idle {
			err = errors.New("the fetch did not long-poll")
		}
		if err == nil { // still open after it
			_, err = kafkaRoundTrip(poll, apiVersions(), 8)
		}
		polled <- err
	}()

	// The busy connection sends a request every quarter timeout, for
	// three timeouts: it stays open.
	for i := int32(0); i < 12; i++ {
		time.Sleep(idle / 4)
		kafkaCall(t, busy, apiVersions(), 10+i)
	}
	took := <-quietClosed
	require.Positive(t, took, "the quiet connection is still open after 10 idle timeouts")
	assert.GreaterOrEqual(t, took, idle, "not before the idle timeout")
	assert.Less(t, took-last.Sub(sent), idle+2*time.Second, "closed at the idle timeout (took %s)", took)
	require.NoError(t, <-polled, "a long poll longer than the idle timeout is answered")
	if _, err := kafkaRoundTrip(busy, apiVersions(), 99); err != nil {
		t.Fatalf("busy connection: %v; server log:\n%s", err, strings.Join(c.logs.Tail(30), "\n"))
	}
	assert.Eventually(t, func() bool { return c.loggedClose("idle for longer than --kafka-idle-timeout") }, 5*time.Second, 20*time.Millisecond)
}

// --kafka-request-timeout closes a connection whose request trickles in a
// byte at a time (slowloris), while an idle connection stays open, and the
// listener keeps serving.
func TestKafkaRequestTimeout(t *testing.T) {
	const reqTimeout = 800 * time.Millisecond
	c := startChild(t, t.TempDir(), "--fsync", "never", "--kafka-addr", "127.0.0.1:0", "--kafka-request-timeout", reqTimeout.String())
	addr := c.kafkaAddr(t)
	slow, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer slow.Close()
	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer idle.Close()

	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("slowloris")).AppendRequest(nil, apiVersions(), 1)
	start := time.Now()
	_, err = slow.Write(frame[:6])
	require.NoError(t, err)
	done := make(chan struct{})
	defer close(done)
	go func() { // a byte every 100ms: the whole frame would take seconds
		for _, b := range frame[6 : len(frame)-1] {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := slow.Write([]byte{b}); err != nil {
				return
			}
		}
	}()
	took := closedWithin(t, slow, start, 10*reqTimeout)
	assert.GreaterOrEqual(t, took, reqTimeout-50*time.Millisecond, "not before the request timeout")
	assert.Less(t, took, reqTimeout+2*time.Second, "closed at the request timeout (took %s)", took)
	assert.Eventually(t, func() bool {
		return c.loggedClose("did not all arrive within --kafka-request-timeout")
	}, 5*time.Second, 20*time.Millisecond)

	// The request timeout counts from a request's first byte: a
	// connection that sends nothing for longer is merely idle.
	time.Sleep(reqTimeout - time.Since(start) + 200*time.Millisecond)
	kafkaCall(t, idle, apiVersions(), 2)
	fresh, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer fresh.Close()
	kafkaCall(t, fresh, apiVersions(), 3)
}

// --max-connections-per-ip and --max-connections apply to the Kafka
// listener: a connection over a cap is closed at once, and a slot freed is
// usable again.
func TestKafkaConnectionCaps(t *testing.T) {
	for _, tc := range []struct{ name, flag string }{
		{"per IP", "--max-connections-per-ip"},
		{"in total", "--max-connections"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startChild(t, t.TempDir(), "--fsync", "never", "--kafka-addr", "127.0.0.1:0", tc.flag, "2")
			addr := c.kafkaAddr(t)
			var open []net.Conn
			for i := range 2 {
				nc, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				defer nc.Close()
				kafkaCall(t, nc, apiVersions(), int32(i))
				open = append(open, nc)
			}
			// The server closes an over-cap connection at accept; under load
			// its reset can reach the client before connect returns, so the
			// refusal shows either at the dial or at the first request.
			over, err := net.Dial("tcp", addr)
			if err == nil {
				defer over.Close()
				require.NoError(t, over.SetDeadline(time.Now().Add(5*time.Second)))
				_, err = kafkaRoundTrip(over, apiVersions(), 3)
			}
			require.Error(t, err, "the third connection is refused")
			var ne net.Error
			assert.False(t, errors.As(err, &ne) && ne.Timeout(), "closed at once, not left hanging: %v", err)

			open[0].Close()
			require.Eventually(t, func() bool {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					return false
				}
				defer nc.Close()
				_ = nc.SetDeadline(time.Now().Add(2 * time.Second))
				_, err = kafkaRoundTrip(nc, apiVersions(), 4)
				return err == nil
			}, 5*time.Second, 50*time.Millisecond, "a freed slot is usable again")
			kafkaCall(t, open[1], apiVersions(), 5)
		})
	}
}

// The Kafka timeouts have their environment variables and defaults, and a
// value out of range is refused at start naming the flag.
func TestKafkaTimeoutFlags(t *testing.T) {
	none := func(string) string { return "" }
	cfg, _, err := parseFlags(nil, none, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 10*time.Minute, cfg.KafkaIdleTimeout, "Kafka's connections.max.idle.ms")
	assert.Equal(t, 30*time.Second, cfg.KafkaRequestTimeout)
	env := map[string]string{"SHARELOG_KAFKA_IDLE_TIMEOUT": "90s", "SHARELOG_KAFKA_REQUEST_TIMEOUT": "5s"}
	cfg, _, err = parseFlags(nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, cfg.KafkaIdleTimeout)
	assert.Equal(t, 5*time.Second, cfg.KafkaRequestTimeout)
	for _, args := range [][]string{
		{"--kafka-idle-timeout", "0s"}, {"--kafka-idle-timeout", "48h"},
		{"--kafka-request-timeout", "10ms"}, {"--kafka-request-timeout", "-1s"},
	} {
		cfg, _, err := parseFlags(args, none, io.Discard)
		if err == nil {
			err = cfg.Validate()
		}
		assert.ErrorContains(t, err, args[0], "%v", args)
	}
	var help strings.Builder
	_, _, _ = parseFlags([]string{"--help"}, none, &help)
	assert.Contains(t, help.String(), "-kafka-idle-timeout duration")
	assert.Contains(t, help.String(), "-kafka-request-timeout duration")
}
