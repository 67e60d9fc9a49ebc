package testsupport

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// Config is the configuration tests start from: app.DefaultConfig with a
// data dir in t.TempDir(), loopback listeners on free ports and no fsync,
// then each mutate in order.
func Config(t testing.TB, mutate ...func(*app.Config)) app.Config {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Fsync = "never"
	for _, m := range mutate {
		m(&cfg)
	}
	return cfg
}

// Start runs the server with cfg (and log, nil for the default), failing
// the test if it does not start, and closes it at t's cleanup. Closing it
// earlier is fine: Close is idempotent.
func Start(t testing.TB, cfg app.Config, log *slog.Logger, opts ...app.Options) *app.Server {
	t.Helper()
	srv, err := app.Start(context.Background(), cfg, log, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, srv.Close()) })
	return srv
}

// Serve is Start(t, Config(t, mutate...), nil): the real server on
// loopback, for tests that dial it by address (srv.GRPCAddr()).
func Serve(t testing.TB, mutate ...func(*app.Config)) *app.Server {
	t.Helper()
	return Start(t, Config(t, mutate...), nil)
}

// Dial is an insecure client connection to addr, closed at t's cleanup.
func Dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Stack is the real server in-process: gRPC over bufconn, the REST
// gateway over httptest, a file store in t.TempDir().
type Stack struct {
	Srv     *app.Server
	Conn    *grpc.ClientConn // to the gRPC server over bufconn
	Log     sharelogv1.LogServiceClient
	HTTP    *httptest.Server // the server's HTTP handler (gateway, /metrics, /readyz)
	DataDir string
}

// StackOptions are NewStack's knobs beyond the configuration.
type StackOptions struct {
	App    app.Options // passed to app.Start; its GRPCListener is set to the bufconn
	Logger *slog.Logger
	// Dial is added after the stack's own dial options (which allow 64 MiB
	// messages each way), so it may override them.
	Dial []grpc.DialOption
}

// NewStack starts the server with Config(t, mutate...) and o, its gRPC
// listener a bufconn, and returns it with a client connection and the
// HTTP handler served by httptest; all are closed at t's cleanup.
func NewStack(t testing.TB, o StackOptions, mutate ...func(*app.Config)) *Stack {
	t.Helper()
	cfg := Config(t, mutate...)
	lis := bufconn.Listen(1 << 20)
	o.App.GRPCListener = lis
	srv, err := app.Start(context.Background(), cfg, o.Logger, o.App)
	require.NoError(t, err)
	conn, err := grpc.NewClient("passthrough:///bufnet", append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)),
	}, o.Dial...)...)
	if err != nil {
		srv.Close()
		require.NoError(t, err)
	}
	hs := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(func() {
		hs.Close()
		conn.Close()
		assert.NoError(t, srv.Close())
	})
	return &Stack{Srv: srv, Conn: conn, Log: sharelogv1.NewLogServiceClient(conn), HTTP: hs, DataDir: cfg.DataDir}
}

// FastReconnect makes a client connection retry a lost server every
// 20-200 ms instead of gRPC's default of up to two minutes, so a client
// finds a restarted server (or a new owner) quickly.
func FastReconnect() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
		MinConnectTimeout: time.Second,
	})
}

// ClusterConfig is the configuration of one in-process instance of a
// cluster on the JetStream cluster at natsURL: instance id, names under
// prefix, a one-second lease (so a takeover is quick), loopback
// listeners, a data dir in t.TempDir() and a five-second shutdown, then
// each mutate in order. Start it with ClusterOptions.
func ClusterConfig(t testing.TB, natsURL, prefix, id string, mutate ...func(*app.Config)) app.Config {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Cluster.Store = app.StoreJetStream
	cfg.Cluster.NATSURL = natsURL
	cfg.Cluster.NATSPrefix = prefix
	cfg.Cluster.InstanceID = id
	cfg.Cluster.LeaseTTL = time.Second
	cfg.ShutdownTimeout = 5 * time.Second
	for _, m := range mutate {
		m(&cfg)
	}
	return cfg
}

// ClusterOptions are the app.Options of a cluster instance in tests: its
// readiness (lease, membership) is re-checked every 50 ms, so WaitReadyz
// sees a change quickly.
func ClusterOptions() app.Options { return app.Options{ReadinessInterval: 50 * time.Millisecond} }
