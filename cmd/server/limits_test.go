package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// A listener beyond loopback without TLS and auth refuses to start, naming
// its flag; --insecure-allow-remote lets it start with a warning. (Binding
// 0.0.0.0 is harmless here: traffic goes to 127.0.0.1 only.)
func TestExposureRefusal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "--data-dir", t.TempDir(), "--grpc-addr", "127.0.0.1:0",
		"--http-addr", "0.0.0.0:0", "--fsync", "never")
	cmd.Env = append(os.Environ(), "SHARELOG_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "must refuse to start: %s", out)
	assert.Contains(t, string(out), "--http-addr 0.0.0.0:0")
	assert.Contains(t, string(out), "--insecure-allow-remote")

	c := startChild(t, t.TempDir(), "--fsync", "never", "--http-addr", "0.0.0.0:0", "--insecure-allow-remote")
	i := slices.IndexFunc(c.startup, func(l map[string]any) bool {
		return l["level"] == "WARN" && strings.Contains(fmt.Sprint(l["msg"]), "without TLS and authentication")
	})
	require.GreaterOrEqual(t, i, 0, "a startup WARN: %v", c.startup)
	assert.Contains(t, fmt.Sprint(c.startup[i]["listeners"]), "--http-addr 0.0.0.0:0")
	_, port, err := net.SplitHostPort(c.httpAddr)
	require.NoError(t, err)
	resp, err := http.Get("http://127.0.0.1:" + port + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// Exhaustion: another client (127.0.0.2) opens twice --max-connections idle
// keep-alive HTTP connections and some requests whose bodies never finish,
// while a well-behaved client on 127.0.0.1 produces and fetches over gRPC
// and REST. It is served quickly and without error, refusals are counted,
// and every partition stays writable.
func TestConnectionExhaustion(t *testing.T) {
	const maxConns, perIP, slowBodies = 200, 150, 20
	c := startChild(t, t.TempDir(), "--fsync", "never",
		"--max-connections", strconv.Itoa(maxConns), "--max-connections-per-ip", strconv.Itoa(perIP),
		"--http-read-timeout", "2s", "--http-idle-timeout", "1m")
	ctx := context.Background()
	client := sharelogv1.NewLogServiceClient(c.conn)
	_, err := client.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "ex", Partitions: 3})
	require.NoError(t, err)

	attacker := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Second}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, cn := range conns {
			cn.Close()
		}
	})
	keep := func(cn net.Conn) {
		mu.Lock()
		conns = append(conns, cn)
		mu.Unlock()
	}
	// Slow bodies: headers promise 1000 bytes, 10 arrive.
	for range slowBodies {
		cn, err := attacker.Dial("tcp", c.httpAddr)
		require.NoError(t, err)
		keep(cn)
		fmt.Fprintf(cn, "POST /v1/topics/ex/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"records\"")
	}
	// Idle keep-alive connections, one /healthz each, never closed.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 2 * maxConns / 8 {
				cn, err := attacker.Dial("tcp", c.httpAddr)
				if err != nil {
					continue // refused at once is fine too
				}
				keep(cn)
				fmt.Fprintf(cn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			}
		})
	}

	// The well-behaved client, meanwhile, over gRPC and REST.
	rest := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + c.httpAddr
	var lat []time.Duration
	measure := func(what string, fn func() error) {
		start := time.Now()
		require.NoError(t, fn(), what)
		lat = append(lat, time.Since(start))
	}
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		p := int32(i % 3)
		measure("grpc produce", func() error {
			_, err := client.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "ex", Partition: &p, Records: []*sharelogv1.Record{{Value: []byte("v")}}})
			return err
		})
		measure("grpc fetch", func() error {
			_, err := client.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "ex", Partition: p, Offset: 0, MaxRecords: 10})
			return err
		})
		measure("rest produce", func() error {
			return restCall(rest, http.MethodPost, base+"/v1/topics/ex/records", fmt.Sprintf(`{"partition":%d,"records":[{"value":"dg=="}]}`, p))
		})
		measure("rest fetch", func() error {
			return restCall(rest, http.MethodGet, fmt.Sprintf("%s/v1/topics/ex/partitions/%d/records?offset=0&maxRecords=10", base, p), "")
		})
	}
	wg.Wait()
	slices.Sort(lat)
	p99 := lat[len(lat)*99/100]
	t.Logf("%d calls under attack: p50 %v, p99 %v, max %v", len(lat), lat[len(lat)/2], p99, lat[len(lat)-1])
	assert.Less(t, p99, 100*time.Millisecond, "p99 of the well-behaved client")

	metrics := restBody(t, rest, base+"/metrics")
	m := regexp.MustCompile(`sharelog_connections_refused_total\{[^}]*cause="max_connections_per_ip"[^}]*listener="http"[^}]*\} (\d+)`).FindStringSubmatch(metrics)
	require.NotNil(t, m, "refusals are counted:\n%s", metrics)
	refused, _ := strconv.Atoi(m[1])
	assert.GreaterOrEqual(t, refused, 2*maxConns-perIP, "every connection over the per-IP cap was refused")

	for p := range int32(3) {
		_, err := client.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "ex", Partition: &p, Records: []*sharelogv1.Record{{Value: []byte("after")}}})
		require.NoError(t, err, "partition %d writable afterwards", p)
	}
}

func restCall(c *http.Client, method, url, body string) error {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	return nil
}

func restBody(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(bufio.NewReader(resp.Body))
	require.NoError(t, err)
	return string(raw)
}

// The limit flags: environment variables, defaults, and out-of-range
// values refused naming the flag; --help names the variables.
func TestLimitFlags(t *testing.T) {
	env := map[string]string{"SHARELOG_MAX_CONNECTIONS": "500", "SHARELOG_INSECURE_ALLOW_REMOTE": "true", "SHARELOG_HTTP_READ_TIMEOUT": "5s"}
	cfg, _, err := parseFlags([]string{"--max-long-polls", "7"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 500, cfg.MaxConnections)
	assert.True(t, cfg.InsecureAllowRemote)
	assert.Equal(t, 5*time.Second, cfg.HTTPReadTimeout)
	assert.Equal(t, 7, cfg.MaxLongPolls)
	assert.Equal(t, 1000, cfg.MaxConnectionsPerIP)
	assert.Equal(t, 2*time.Minute, cfg.HTTPIdleTimeout)
	assert.Equal(t, 1000, cfg.GRPCMaxConcurrentStreams)
	assert.Equal(t, 0, cfg.MaxShareSessionsPerPrincipal, "0 = half of --max-share-sessions")

	for _, bad := range [][]string{
		{"--max-connections", "0"},
		{"--max-connections-per-ip", "0"},
		{"--http-idle-timeout", "0s"},
		{"--http-read-timeout", "-1s"},
		{"--grpc-max-concurrent-streams", "0"},
		{"--max-long-polls", "-1"},
		{"--max-share-sessions-per-principal", "3000"},
		{"--max-change-streams-per-principal", "-2"},
	} {
		_, _, err := parseFlags(bad, func(string) string { return "" }, io.Discard)
		assert.ErrorContains(t, err, bad[0], "%v must be refused naming the flag", bad)
	}

	var help strings.Builder
	_, _, err = parseFlags([]string{"--help"}, func(string) string { return "" }, &help)
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.Contains(t, help.String(), "SHARELOG_<FLAG>")
	assert.Contains(t, help.String(), "-max-connections-per-ip")
}
