package app

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/telemetry"
)

func newTestMetrics(t *testing.T, offline func() int) (*serverMetrics, *telemetry.Telemetry) {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	m, err := newServerMetrics(tel.Meter, offline, func() int64 { return 0 }, nil)
	require.NoError(t, err)
	return m, tel
}

func scrape(t *testing.T, tel *telemetry.Telemetry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

func TestErrnoName(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, "ENOSPC"},
		{fmt.Errorf("append: %w", &os.SyscallError{Syscall: "fsync", Err: syscall.EIO}), "EIO"},
		{&fs.PathError{Op: "open", Path: "x", Err: syscall.EMFILE}, "EMFILE"},
		{syscall.EROFS, "EROFS"},
		{syscall.EACCES, "other"},
		{io.ErrUnexpectedEOF, "other"},
	} {
		assert.Equal(t, tc.want, errnoName(tc.err), "%v", tc.err)
	}
}

// recordStorageError and the offline gauge reach Prometheus under the
// names operators alert on.
func TestStorageMetrics(t *testing.T) {
	offline := 0
	m, tel := newTestMetrics(t, func() int { return offline })
	s := &Server{metrics: m}
	s.recordStorageError("append", &fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC})
	s.recordStorageError("append", &fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC})
	s.recordStorageError("fsync", syscall.EIO)
	offline = 3
	out := scrape(t, tel)
	assert.Regexp(t, `sharelog_storage_errors_total\{[^}]*errno="ENOSPC"[^}]*op="append"[^}]*\} 2`, out)
	assert.Regexp(t, `sharelog_storage_errors_total\{[^}]*errno="EIO"[^}]*op="fsync"[^}]*\} 1`, out)
	assert.Regexp(t, `(?m)^sharelog_partitions_offline(\{[^}]*\})? 3$`, out)
}

func TestExposedListeners(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		grpc, http string
		tls, auth  bool
		clientCA   bool
		overridden bool
		kafka, dcp string
		mechs      []string
		want       []string
	}{
		{name: "loopback", grpc: "127.0.0.1:9090", http: "localhost:8080"},
		{name: "ipv6 loopback", grpc: "[::1]:9090", http: "127.0.0.2:0"},
		{name: "all interfaces", grpc: "127.0.0.1:0", http: "0.0.0.0:0", want: []string{"--http-addr 0.0.0.0:0"}},
		{name: "empty host", grpc: ":9090", http: "127.0.0.1:0", want: []string{"--grpc-addr :9090"}},
		{name: "ipv6 any", grpc: "[::]:1", http: "[::]:2", want: []string{"--grpc-addr [::]:1", "--http-addr [::]:2"}},
		{name: "tls alone is not enough", grpc: "0.0.0.0:1", http: "127.0.0.1:0", tls: true, want: []string{"--grpc-addr 0.0.0.0:1"}},
		{name: "auth alone is not enough", grpc: "127.0.0.1:0", http: "0.0.0.0:1", auth: true, want: []string{"--http-addr 0.0.0.0:1"}},
		{name: "tls and auth", grpc: "0.0.0.0:1", http: "0.0.0.0:2", tls: true, auth: true},
		{name: "tls and client certificates", grpc: "0.0.0.0:1", http: "0.0.0.0:2", tls: true, clientCA: true},
		{name: "grpc listener given", grpc: "0.0.0.0:1", http: "127.0.0.1:0", overridden: true},
		{name: "kafka in the clear", grpc: "127.0.0.1:0", http: "127.0.0.1:0", kafka: "0.0.0.0:9092", want: []string{"--kafka-addr 0.0.0.0:9092"}},
		{name: "kafka SCRAM without TLS", grpc: "127.0.0.1:0", http: "127.0.0.1:0", kafka: "0.0.0.0:9092", mechs: []string{"SCRAM-SHA-512"},
			want: []string{"--kafka-addr 0.0.0.0:9092"}},
		{name: "kafka SASL_SSL with SCRAM only", grpc: "127.0.0.1:0", http: "127.0.0.1:0", kafka: "0.0.0.0:9092", tls: true, mechs: []string{"SCRAM-SHA-512"}},
		{name: "dcp in the clear", grpc: "127.0.0.1:0", http: "127.0.0.1:0", dcp: "0.0.0.0:11210", want: []string{"--dcp-addr 0.0.0.0:11210"}},
		{name: "dcp on loopback", grpc: "127.0.0.1:0", http: "127.0.0.1:0", dcp: "127.0.0.1:11210"},
		{name: "dcp with TLS and SCRAM", grpc: "127.0.0.1:0", http: "127.0.0.1:0", dcp: "0.0.0.0:11210", tls: true, mechs: []string{"SCRAM-SHA-512"}},
		{name: "kafka and dcp in the clear", grpc: "127.0.0.1:0", http: "127.0.0.1:0", kafka: "0.0.0.0:9092", dcp: "0.0.0.0:11210",
			want: []string{"--kafka-addr 0.0.0.0:9092", "--dcp-addr 0.0.0.0:11210"}},
		{name: "SCRAM does not secure gRPC", grpc: "0.0.0.0:1", http: "127.0.0.1:0", kafka: "0.0.0.0:9092", tls: true, mechs: []string{"SCRAM-SHA-256"},
			want: []string{"--grpc-addr 0.0.0.0:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.GRPCAddr, cfg.HTTPAddr = tc.grpc, tc.http
			if tc.tls {
				cfg.TLSCert, cfg.TLSKey = "c.pem", "k.pem"
			}
			if tc.auth {
				cfg.AuthTokensFile = "tokens"
			}
			if tc.clientCA {
				cfg.TLSClientCA = "ca.pem"
			}
			cfg.KafkaAddr, cfg.KafkaSASLMechanisms, cfg.DCPAddr = tc.kafka, tc.mechs, tc.dcp
			got, err := exposedListeners(ctx, cfg, tc.overridden)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := exposedListeners(ctx, Config{GRPCAddr: "no-port", HTTPAddr: "127.0.0.1:0"}, false)
	assert.ErrorContains(t, err, "--grpc-addr")
}

// --trusted-proxies is validated with the rest of the configuration
// (edge.ParseTrustedProxies parses it).
func TestTrustedProxiesFlag(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TrustedProxies = "nope"
	require.ErrorContains(t, cfg.Validate(), "--trusted-proxies")
	cfg.TrustedProxies = " 10.0.0.0/8, 192.168.1.7 ,::1"
	require.NoError(t, cfg.Validate())
}
