package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"math"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/couchbase/gocbcore/v10"
	"github.com/couchbase/gocbcore/v10/memd"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// rawDCP is a memcached connection driven packet by packet with gocbcore's
// memd codec (for what the agents do not expose: flow control).
type rawDCP struct {
	t    *testing.T
	nc   net.Conn
	conn *memd.Conn
	op   uint32
}

func dialRawDCP(t *testing.T, addr string) *rawDCP {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	return &rawDCP{t: t, nc: nc, conn: memd.NewConn(nc)}
}

// call sends a request and returns its response (skipping DCP messages).
func (r *rawDCP) call(cmd memd.CmdCode, vb uint16, extras, key, value []byte) *memd.Packet {
	r.t.Helper()
	r.op++
	require.NoError(r.t, r.conn.WritePacket(&memd.Packet{Magic: memd.CmdMagicReq, Command: cmd, Vbucket: vb, Opaque: r.op,
		Extras: extras, Key: key, Value: value}))
	require.NoError(r.t, r.nc.SetReadDeadline(time.Now().Add(evTimeout)))
	for {
		p, _, err := r.conn.ReadPacket()
		require.NoError(r.t, err)
		if p.Magic == memd.CmdMagicRes && p.Opaque == r.op {
			return p
		}
	}
}

// TestDCPFlowControl: with connection_buffer_size, the producer stops
// sending when that many bytes are unacknowledged (one 64 KiB batch more
// may be in flight) and goes on after BUFFER_ACK; gocbcore, which acks,
// gets a whole backfill through a small buffer.
func TestDCPFlowControl(t *testing.T) {
	s := dcpStack(t, func(c *app.Config) { c.OSOBackfill = "disabled" })
	s.createTopic(t, "dcp-flow", 1, nil)
	value := string(make([]byte, 1024))
	var kvs []string
	for i := range 2000 {
		kvs = append(kvs, "k"+strconv.Itoa(i), value)
	}
	s.produceKV(t, "dcp-flow", kvs...)
	addr := s.srv.DCPAddr()

	t.Run("stops without acks", func(t *testing.T) {
		r := dialRawDCP(t, addr)
		require.Equal(t, memd.StatusSuccess, r.call(memd.CmdSelectBucket, 0, nil, []byte("dcp-flow"), nil).Status)
		open := binary.BigEndian.AppendUint32(make([]byte, 4), uint32(memd.DcpOpenFlagProducer))
		require.Equal(t, memd.StatusSuccess, r.call(memd.CmdDcpOpenConnection, 0, open, []byte("raw"), nil).Status)
		const size = 16 << 10
		require.Equal(t, memd.StatusSuccess, r.call(memd.CmdDcpControl, 0, nil, []byte("connection_buffer_size"), []byte(strconv.Itoa(size))).Status)
		fl := r.call(memd.CmdDcpGetFailoverLog, 0, nil, nil, nil)
		req := make([]byte, 48)
		binary.BigEndian.PutUint64(req[16:], math.MaxUint64)
		copy(req[24:], fl.Value[:8])
		require.Equal(t, memd.StatusSuccess, r.call(memd.CmdDcpStreamReq, 0, req, nil, nil).Status)
		received := func(within time.Duration) (n int) {
			require.NoError(t, r.nc.SetReadDeadline(time.Now().Add(within)))
			for {
				_, got, err := r.conn.ReadPacket()
				if err != nil {
					var ne net.Error
					require.ErrorAs(t, err, &ne)
					require.True(t, ne.Timeout(), "%v", err)
					return n
				}
				n += got
			}
		}
		first := received(300 * time.Millisecond)
		require.Greater(t, first, 0)
		require.LessOrEqual(t, first, size+64<<10+2048, "no more than the buffer and one batch unacknowledged")
		require.Less(t, first, 2000*1024, "the backfill must not all have come")
		ack := binary.BigEndian.AppendUint32(nil, uint32(first))
		require.NoError(t, r.conn.WritePacket(&memd.Packet{Magic: memd.CmdMagicReq, Command: memd.CmdDcpBufferAck, Extras: ack}))
		require.Greater(t, received(300*time.Millisecond), 0, "BUFFER_ACK releases more")
	})
	t.Run("gocbcore acks", func(t *testing.T) {
		a, err := newDCPAgent(t, addr, "dcp-flow", dcpOpts{})
		require.NoError(t, err)
		o := newObserver()
		_, err = openStream(t, a, o, 0, failoverLog(t, a, 0)[0].VbUUID, 0, 2000)
		require.NoError(t, err)
		muts := 0
		for e := o.next(t, 0); e.kind != "end"; e = o.next(t, 0) {
			if e.kind == "mut" {
				muts++
				require.Equal(t, uint64(muts), e.seqno)
			}
		}
		require.Equal(t, 2000, muts)
	})
}

// TestDCPTLS: with --tls-cert/--tls-key the DCP listener speaks TLS only;
// gocbcore's agent over TLS logs in with PLAIN (its default over TLS).
func TestDCPTLS(t *testing.T) {
	ca := testsupport.NewCA(t)
	dir := t.TempDir()
	cert, key := ca.IssueFiles(t, dir, "server", x509.ExtKeyUsageServerAuth)
	tokens := writeTokens(t, dir)
	srv := testsupport.Serve(t, func(c *app.Config) {
		c.TLSCert, c.TLSKey, c.AuthTokensFile = cert, key, tokens
		c.DCPAddr = "127.0.0.1:0"
		c.DataDir = filepath.Join(dir, "data")
	})
	tc := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+adminToken)
	lc := sharelogv1.NewLogServiceClient(conn)
	_, err = lc.CreateTopic(admin, &sharelogv1.CreateTopicRequest{Name: "dcp-tls", Partitions: 1})
	require.NoError(t, err)
	p := int32(0)
	_, err = lc.Produce(admin, &sharelogv1.ProduceRequest{Topic: "dcp-tls", Partition: &p, Records: []*sharelogv1.Record{{Key: []byte("k"), Value: []byte("v")}}})
	require.NoError(t, err)

	cfg := &gocbcore.DCPAgentConfig{
		UserAgent: "sharelog-e2e", BucketName: "dcp-tls",
		SeedConfig: gocbcore.SeedConfig{MemdAddrs: []string{srv.DCPAddr()}},
		SecurityConfig: gocbcore.SecurityConfig{UseTLS: true, TLSRootCAProvider: func() *x509.CertPool { return ca.Pool },
			Auth: gocbcore.PasswordAuthProvider{Username: "token-1", Password: adminToken}},
		EnableCCCPPoller: true,
	}
	agent, err := gocbcore.CreateDcpAgent(cfg, "tls", memd.DcpOpenFlagProducer)
	require.NoError(t, err)
	a := &dcpAgent{DCPAgent: agent}
	t.Cleanup(func() { a.Close() })
	ready := make(chan error, 1)
	_, err = a.WaitUntilReady(time.Now().Add(10*time.Second), gocbcore.WaitUntilReadyOptions{},
		func(_ *gocbcore.WaitUntilReadyResult, err error) { ready <- err })
	require.NoError(t, err)
	require.NoError(t, <-ready)
	o := newObserver()
	_, err = openStream(t, a, o, 0, failoverLog(t, a, 0)[0].VbUUID, 0, 1)
	require.NoError(t, err)
	require.Equal(t, "marker(1..1, DISK)", o.next(t, 0).String())
	require.Equal(t, "mut(k@1)", o.next(t, 0).String())

	// A client in the clear gets no memcached answer.
	r := dialRawDCP(t, srv.DCPAddr())
	require.NoError(t, r.conn.WritePacket(&memd.Packet{Magic: memd.CmdMagicReq, Command: memd.CmdNoop, Opaque: 1}))
	require.NoError(t, r.nc.SetReadDeadline(time.Now().Add(2*time.Second)))
	p2, _, err := r.conn.ReadPacket()
	require.Error(t, err, "a plain-text packet must not be answered, got %+v", p2)
}

// TestDCPConnectionCap: the server's --max-connections-per-ip applies to
// the DCP listener at accept.
func TestDCPConnectionCap(t *testing.T) {
	s := dcpStack(t, func(c *app.Config) { c.MaxConnectionsPerIP = 1 })
	s.createTopic(t, "dcp-cap", 1, nil)
	r := dialRawDCP(t, s.srv.DCPAddr())
	require.Equal(t, memd.StatusSuccess, r.call(memd.CmdNoop, 0, nil, nil, nil).Status)
	// The second connection from the same IP is closed at accept: its
	// dial, its write or its read fails, and nothing is answered.
	if nc, err := net.Dial("tcp", s.srv.DCPAddr()); err == nil {
		t.Cleanup(func() { nc.Close() })
		second := memd.NewConn(nc)
		require.NoError(t, nc.SetDeadline(time.Now().Add(2*time.Second)))
		if err := second.WritePacket(&memd.Packet{Magic: memd.CmdMagicReq, Command: memd.CmdNoop, Opaque: 1}); err == nil {
			p, _, err := second.ReadPacket()
			require.Error(t, err, "a second connection from the same IP must not be served, got %+v", p)
		}
	}
	require.Equal(t, memd.StatusSuccess, r.call(memd.CmdNoop, 0, nil, nil, nil).Status, "the first one still works")
}

func TestDCPConfigValidation(t *testing.T) {
	base := app.DefaultConfig()
	for name, tc := range map[string]struct {
		mutate func(*app.Config)
		want   string
	}{
		"advertised alone":   {func(c *app.Config) { c.DCPAdvertisedAddr = "h:1" }, "needs --dcp-addr"},
		"advertised no port": {func(c *app.Config) { c.DCPAddr, c.DCPAdvertisedAddr = "127.0.0.1:0", "host" }, "--dcp-advertised-addr"},
	} {
		cfg := base
		tc.mutate(&cfg)
		err := cfg.Validate()
		require.ErrorContains(t, err, tc.want, name)
	}
	cfg := base
	cfg.DCPAddr, cfg.DCPAdvertisedAddr = "127.0.0.1:0", "dcp.example:11210"
	require.NoError(t, cfg.Validate())
	// Cluster mode serves it too (docs/dcp.md "Cluster mode").
	for _, mode := range []string{app.ModeActiveStandby, app.ModePartitioned} {
		cfg.Cluster.Store, cfg.Cluster.NATSURL, cfg.Cluster.Mode = app.StoreJetStream, "nats://127.0.0.1:4222", mode
		require.NoError(t, cfg.Validate(), mode)
	}
}

// TestDCPListenerExposure: a non-loopback --dcp-addr is refused like any
// listener served in the clear.
func TestDCPListenerExposure(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DCPAddr = "127.0.0.1:0", "127.0.0.1:0", "0.0.0.0:0"
	_, err := app.Start(context.Background(), cfg, nil)
	require.ErrorContains(t, err, "--dcp-addr")
}

// TestDCPAdvertisedAddr: --dcp-advertised-addr names the node in the
// bucket config (without it, "$HOST").
func TestDCPAdvertisedAddr(t *testing.T) {
	s := dcpStack(t, func(c *app.Config) { c.DCPAdvertisedAddr = "dcp.example:11299" })
	s.createTopic(t, "dcp-adv", 2, nil)
	r := dialRawDCP(t, s.srv.DCPAddr())
	require.Equal(t, memd.StatusSuccess, r.call(memd.CmdSelectBucket, 0, nil, []byte("dcp-adv"), nil).Status)
	cfgResp := r.call(memd.CmdGetClusterConfig, 0, nil, nil, nil)
	require.Equal(t, memd.StatusSuccess, cfgResp.Status)
	require.Contains(t, string(cfgResp.Value), `"serverList":["dcp.example:11299"]`)
	require.Contains(t, string(cfgResp.Value), `"vBucketMap":[[0],[0]]`)

	plain := dcpStack(t)
	plain.createTopic(t, "dcp-adv", 1, nil)
	r = dialRawDCP(t, plain.srv.DCPAddr())
	require.Equal(t, memd.StatusSuccess, r.call(memd.CmdSelectBucket, 0, nil, []byte("dcp-adv"), nil).Status)
	_, port, _ := net.SplitHostPort(plain.srv.DCPAddr())
	require.Contains(t, string(r.call(memd.CmdGetClusterConfig, 0, nil, nil, nil).Value), `"serverList":["$HOST:`+port+`"]`)
	// An unknown opcode is UNKNOWN_COMMAND, an unknown DCP control EINVAL.
	require.Equal(t, memd.StatusUnknownCommand, r.call(memd.CmdSet, 0, make([]byte, 8), []byte("k"), []byte("v")).Status)
	open := binary.BigEndian.AppendUint32(make([]byte, 4), uint32(memd.DcpOpenFlagProducer))
	require.Equal(t, memd.StatusSuccess, r.call(memd.CmdDcpOpenConnection, 0, open, []byte("raw"), nil).Status)
	require.Equal(t, memd.StatusInvalidArgs, r.call(memd.CmdDcpControl, 0, nil, []byte("no_such_control"), []byte("true")).Status)
	require.Equal(t, memd.StatusInvalidArgs, r.call(memd.CmdDcpControl, 0, nil, []byte("enable_out_of_order_snapshots"), []byte("maybe")).Status)
	// A filter naming a collection other than the default one is refused.
	req := make([]byte, 48)
	binary.BigEndian.PutUint64(req[16:], math.MaxUint64)
	require.Equal(t, memd.StatusCollectionUnknown, r.call(memd.CmdDcpStreamReq, 0, req, nil, []byte(`{"collections":["8"]}`)).Status)
	require.Equal(t, memd.StatusNotMyVBucket, r.call(memd.CmdDcpStreamReq, 5, req, nil, nil).Status)
}

// TestDCPNoops: with enable_noop the producer sends DCP_NOOP every
// set_noop_interval and closes a connection that sent nothing (no NOOP
// answer) for two intervals.
func TestDCPNoops(t *testing.T) {
	s := dcpStack(t)
	s.createTopic(t, "dcp-noop", 1, nil)
	r := dialRawDCP(t, s.srv.DCPAddr())
	require.Equal(t, memd.StatusSuccess, r.call(memd.CmdSelectBucket, 0, nil, []byte("dcp-noop"), nil).Status)
	open := binary.BigEndian.AppendUint32(make([]byte, 4), uint32(memd.DcpOpenFlagProducer))
	require.Equal(t, memd.StatusSuccess, r.call(memd.CmdDcpOpenConnection, 0, open, []byte("raw"), nil).Status)
	// gocbcore's order: enable_noop (the default interval, 120 s), then
	// set_noop_interval.
	require.Equal(t, memd.StatusSuccess, r.call(memd.CmdDcpControl, 0, nil, []byte("enable_noop"), []byte("true")).Status)
	require.Equal(t, memd.StatusSuccess, r.call(memd.CmdDcpControl, 0, nil, []byte("set_noop_interval"), []byte("1")).Status)

	// Answered NOOPs keep the connection.
	start := time.Now()
	require.NoError(t, r.nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	for answered := 0; answered < 3; answered++ {
		p, _, err := r.conn.ReadPacket()
		require.NoError(t, err)
		require.Equal(t, memd.CmdMagicReq, p.Magic)
		require.Equal(t, memd.CmdDcpNoop, p.Command)
		require.NoError(t, r.conn.WritePacket(&memd.Packet{Magic: memd.CmdMagicRes, Command: memd.CmdDcpNoop, Opaque: p.Opaque}))
	}
	require.Greater(t, time.Since(start), 2*time.Second, "one NOOP a second")

	// Unanswered ones close it after two intervals.
	silent := time.Now()
	require.NoError(t, r.nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	for {
		p, _, err := r.conn.ReadPacket()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the connection was not closed")
			}
			break
		}
		require.Equal(t, memd.CmdDcpNoop, p.Command)
	}
	require.Less(t, time.Since(silent), 5*time.Second)
}
