package kafkawire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/budget"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/principal"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/txn"
	"github.com/sharelog/sharelog/internal/users"
)

// DefaultMaxRequestBytes is the default --kafka-max-request-bytes.
const DefaultMaxRequestBytes = 100 << 20

// Config configures a Listener.
type Config struct {
	// Addr is the address to listen on (host:port), unless Listener is set.
	Addr string
	// Listener, if set, is served instead of listening on Addr (the server
	// passes one that enforces its connection limits); Close closes it.
	Listener net.Listener
	// AdvertisedAddr is the host:port Metadata returns; empty = the
	// listening address.
	AdvertisedAddr string
	// AutoCreateTopics creates an unknown topic named by Metadata or Produce
	// with DefaultPartitions partitions and the broker's default settings.
	AutoCreateTopics  bool
	DefaultPartitions int32
	// MaxRequestBytes caps a request frame and the decompressed size of
	// every record batch in it; 0 = DefaultMaxRequestBytes.
	MaxRequestBytes int32
	// IdleTimeout closes a connection with no request for so long
	// (--kafka-idle-timeout); RequestTimeout closes one whose request's
	// bytes do not all arrive within it (--kafka-request-timeout);
	// timeouts.go. 0 = DefaultIdleTimeout, DefaultRequestTimeout.
	IdleTimeout, RequestTimeout time.Duration
	// DataDir holds the persisted cluster id (file kafka-cluster-id).
	DataDir string
	// Share is the share-group manager; nil = share-group APIs are not
	// advertised (unless Cluster is set).
	Share *sharegroup.Manager
	// Groups is the classic consumer-group coordinator; nil = the
	// consumer-group APIs are not advertised (docs/consumer-groups.md).
	Groups *consumergroup.Coordinator
	// Txn is the transaction coordinator (docs/kafka.md "Transactions");
	// nil = transactional ids are refused and the transaction APIs are
	// not advertised.
	Txn *txn.Coordinator
	// Cluster, in cluster mode, names the brokers, leaders and
	// coordinators and gives each call the backend this instance serves
	// with (its log domain and share groups; Listen's log and Share are
	// then unused). nil = a single node (cluster.go).
	Cluster Cluster
	Logger  *slog.Logger
	// Budget is the response byte budget Fetch draws from, and its
	// --max-fetch-bytes cap (internal/budget); nil = none.
	Budget *budget.Bytes
	// TLS, if set, is served on every connection (--tls-cert/--tls-key;
	// with --tls-client-ca a verified client certificate names the
	// connection's principal). docs/kafka.md "Security".
	TLS *tls.Config
	// Auth authenticates connections: client certificates and, with
	// --auth-tokens-file, SASL PLAIN (sasl.go). nil = nobody is
	// authenticated (every connection is anonymous).
	Auth *edge.Authenticator
	// SASLMechanisms are the SASL mechanisms served (--kafka-sasl-mechanisms;
	// of Mechanisms): PLAIN needs Auth's tokens, SCRAM-SHA-256 and
	// SCRAM-SHA-512 need Users. None = no SASL (connections are
	// authenticated by their certificate or are anonymous); any = a
	// connection its certificate does not authenticate must log in.
	SASLMechanisms []string
	// Users are the SCRAM users: the logins of the SCRAM mechanisms and
	// DescribeUserScramCredentials / AlterUserScramCredentials; nil = those
	// APIs are not served.
	Users *users.Users
	// SASLSessionLifetime is how long a SASL login holds before the client
	// must re-authenticate (KIP-368; --kafka-sasl-session-lifetime);
	// 0 = DefaultSASLSessionLifetime.
	SASLSessionLifetime time.Duration
	// Guard authorizes every API and writes the audit log (authz.go); nil
	// allows everything. ACL is the binding store of DescribeAcls,
	// CreateAcls and DeleteAcls (the AclService's); nil answers them
	// SECURITY_DISABLED, as does a Guard that is not enforcing.
	Guard *authz.Guard
	ACL   *authz.ACL
	// DLQAutoCreate is --dlq-auto-create-topics: naming a dead-letter topic
	// then also needs CREATE on it, as over gRPC.
	DLQAutoCreate bool
}

// Listener serves the Kafka protocol over the log domain (a *broker.Log).
type Listener struct {
	cfg       Config
	log       *broker.Log
	logger    *slog.Logger
	ln        net.Listener
	clusterID string
	host      string
	port      int32
	handlers  map[int16]handler

	// panics counts recovered handler panics (each closed its connection).
	panics atomic.Int64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// idNames caches Kafka topic id → name (checked against the log on use).
	idNames sync.Map

	mu          sync.Mutex
	conns       map[*conn]struct{}
	shareOwners map[shareSessionKey]*conn // the connection that opened each share session
	closed      bool
}

// Listen opens the listener over log (nil with Config.Cluster) and starts
// accepting connections.
// Topic deletions reach the share groups through log's topic events, as
// for every transport.
func Listen(cfg Config, log *broker.Log) (*Listener, error) {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SASLSessionLifetime <= 0 {
		cfg.SASLSessionLifetime = DefaultSASLSessionLifetime
	}
	if err := cfg.checkMechanisms(); err != nil {
		return nil, err
	}
	id, err := loadClusterID(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, fmt.Errorf("kafka listener: %w", err)
		}
	}
	adv := cfg.AdvertisedAddr
	if adv == "" {
		adv = ln.Addr().String()
	}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		tc.NextProtos = nil // Kafka negotiates no application protocol
		ln = tls.NewListener(ln, tc)
	}
	host, portStr, err := net.SplitHostPort(adv)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("kafka advertised address %q: %w", adv, err)
	}
	port, err := strconv.ParseInt(portStr, 10, 32)
	if err != nil || port <= 0 || port > 65535 {
		ln.Close()
		return nil, fmt.Errorf("kafka advertised address %q: bad port", adv)
	}
	l := &Listener{
		cfg: cfg, log: log, logger: cfg.Logger.With("component", "kafka"), ln: ln,
		clusterID: id, host: host, port: int32(port), conns: map[*conn]struct{}{},
	}
	l.handlers = l.handlerTable()
	l.addSASL()
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// AdvertisedAddr is the host:port Metadata names this broker by
// (Config.AdvertisedAddr, else the listening address).
func (l *Listener) AdvertisedAddr() string {
	return net.JoinHostPort(l.host, strconv.Itoa(int(l.port)))
}

// ClusterID is the cluster id of this listener's data dir (Metadata's,
// unless Config.Cluster names the cluster's).
func (l *Listener) ClusterID() string { return l.clusterID }

// Close stops accepting, closes every connection (ending their share
// sessions) and waits for their handlers to return.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for c := range l.conns {
		c.nc.Close()
	}
	l.mu.Unlock()
	l.cancel()
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			l.logger.Warn("kafka accept", "error", err)
			continue
		}
		c := &conn{l: l, nc: nc}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			nc.Close()
			return
		}
		l.conns[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go c.serve()
	}
}

// conn is one client connection. Its requests are handled one at a time, in
// the order they arrive.
type conn struct {
	l  *Listener
	nc net.Conn

	// shareSessions are the (group, member) share sessions opened on this
	// connection; they end when it closes. Only the serving goroutine
	// touches it.
	shareSessions map[shareSessionKey]struct{}
	// clientID is the client id of the request being handled.
	clientID *string

	// The connection's authentication (sasl.go); only the serving
	// goroutine touches it. user is its principal ("" = anonymous);
	// authed is false while a SASL login is still required.
	user   string
	authed bool
	// saslMech is the mechanism of a SaslHandshake awaiting its
	// SaslAuthenticate; saslRaw is set after a v0 handshake, whose token
	// follows as a bare frame rather than a SaslAuthenticate request.
	saslMech string
	saslRaw  bool
	// saslExpires ends a SASL login (zero = never); a request other than
	// re-authentication after it closes the connection.
	saslExpires time.Time
	// scram is the SCRAM exchange under way (between its rounds);
	// loginMech is the mechanism of the session's login, which
	// re-authentication must use again.
	scram     *users.Login
	loginMech string
	// saslSum is the SHA-256 of a PLAIN login's token, and unbind releases
	// its revocation watch (nil = none).
	saslSum [sha256.Size]byte
	unbind  func()
	// closeAfter closes the connection once the response is written (a
	// refused login).
	closeAfter bool
}

func (c *conn) serve() {
	defer c.l.wg.Done()
	// The reader reads at most one frame ahead of the handler, and cancels
	// ctx as soon as the client goes away, so that a long-polling fetch or
	// the share sessions of a closed connection end at once.
	ctx, cancel := context.WithCancel(c.l.ctx)
	// An anonymous connection's client, for every per-client share (long
	// polls, response bytes), is its IP; an authenticated one's is its
	// principal (withPrincipal).
	ctx = principal.WithName(ctx, "ip:"+hostOf(c.nc.RemoteAddr()))
	if err := c.handshake(ctx); err != nil {
		cancel()
		c.nc.Close()
		c.l.logger.Info("kafka connection refused", "remote", c.nc.RemoteAddr().String(), "reason", err)
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		return
	}
	frames := make(chan []byte)
	var act activity
	act.touch()
	go func() {
		defer close(frames)
		defer cancel()
		r := bufio.NewReaderSize(c.nc, 64<<10)
		for {
			var in bytes.Buffer
			frame, err := nextRequest(c.nc, r, &in, c.l.cfg.MaxRequestBytes, c.l.cfg.IdleTimeout, c.l.cfg.RequestTimeout, &act)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
					c.l.logger.Info("kafka connection closed", "remote", c.nc.RemoteAddr().String(), "reason", err)
				}
				return
			}
			select {
			case frames <- frame:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() {
		cancel()
		c.nc.Close()
		for range frames { // wait for the reader to stop
		}
		c.endShareSessions()
		if c.unbind != nil {
			c.unbind()
		}
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	}()
	var out []byte
	for frame := range frames {
		act.busy.Store(true)
		// The response bytes a handler reserves are held until its
		// response is written (internal/budget).
		hold := budget.NewHolder(budget.Binary)
		var err error
		out, err = c.handle(budget.WithHolder(c.withPrincipal(ctx), hold), frame, out[:0])
		if err != nil {
			hold.Release()
			c.l.logger.Info("kafka connection closed", "remote", c.nc.RemoteAddr().String(), "reason", err)
			return
		}
		if len(out) > 0 {
			// A client that takes no bytes of its response for the idle
			// timeout is gone as much as one that sends nothing.
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.l.cfg.IdleTimeout))
			if _, err := c.nc.Write(out); err != nil {
				hold.Release()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					c.l.logger.Info("kafka connection closed", "remote", c.nc.RemoteAddr().String(), "reason", "a response was not taken within --kafka-idle-timeout")
				}
				return
			}
		}
		hold.Release()
		if c.closeAfter {
			return
		}
		act.touch()
		act.busy.Store(false)
		if cap(out) > 1<<20 {
			out = nil // do not pin a large response's buffer
		}
	}
}

// hostOf is the host of a connection's remote address.
func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// handle decodes and serves one request and appends its response frame to
// out (nothing for acks=0 produce). An error closes the connection.
func (c *conn) handle(ctx context.Context, frame, out []byte) (_ []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.l.panics.Add(1)
			c.l.logger.Error("kafka handler panic", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("internal error")
		}
	}()
	if c.saslRaw {
		return c.rawSASL(ctx, frame, out)
	}
	h, req, body, err := parseHeader(frame)
	if err != nil {
		return nil, err
	}
	if err := c.admit(h.key); err != nil {
		return nil, err
	}
	c.clientID = h.clientID
	hd, ok := c.l.handlers[h.key]
	if !ok {
		return nil, fmt.Errorf("%w: api key %d is not served", errFrame, h.key)
	}
	if h.version < hd.min || h.version > hd.max {
		if h.key == apiVersionsKey {
			return appendResponse(out, h.correlationID, c.l.unsupportedAPIVersions()), nil
		}
		return nil, fmt.Errorf("%w: api key %d version %d outside [%d, %d]", errFrame, h.key, h.version, hd.min, hd.max)
	}
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%w: %s v%d body: %w", errFrame, apiName(h.key), h.version, err)
	}
	var resp kmsg.Response
	if h.key == apiVersionsKey || h.key == saslHandshakeKey || h.key == saslAuthenticateKey {
		resp, err = hd.fn(c.l, ctx, c, req) // need no backend
	} else {
		// In cluster mode, the backend this instance serves with now
		// (cluster.go).
		dctx, release, derr := c.l.withDomain(ctx)
		if derr != nil {
			return nil, derr
		}
		defer release()
		if resp = notCoordinatorResponse(req); resp == nil || c.l.shareOf(dctx) != nil {
			resp, err = hd.fn(c.l, dctx, c, req)
		}
	}
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return out, nil
	}
	resp.SetVersion(h.version)
	return appendResponse(out, h.correlationID, resp), nil
}

// loadClusterID returns the cluster id persisted in dir, creating it on
// first use. An empty dir gives a fresh id per process (tests).
func loadClusterID(dir string) (string, error) {
	newID := func() string {
		var b [16]byte
		_, _ = rand.Read(b[:])
		return base64.RawURLEncoding.EncodeToString(b[:])
	}
	if dir == "" {
		return newID(), nil
	}
	path := filepath.Join(dir, "kafka-cluster-id")
	if b, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("kafka cluster id file %s is empty", path)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read kafka cluster id: %w", err)
	}
	id := newID()
	tmp := path + ".tmp"
	if err := writeSynced(tmp, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("write kafka cluster id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write kafka cluster id: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return id, nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
