package dcpwire

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchbase/gocbcore/v10/memd"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/changestream"
	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/users"
)

// DefaultHandshakeTimeout bounds a TLS handshake.
const DefaultHandshakeTimeout = 30 * time.Second

// Config configures a Listener.
type Config struct {
	// Addr is the address to listen on (host:port), unless Listener is set.
	Addr string
	// Listener, if set, is served instead of listening on Addr (the server
	// passes one that enforces its connection limits); Close closes it.
	Listener net.Listener
	// AdvertisedAddr is the host:port the bucket config names for this
	// node; empty = "$HOST" and the listening port, which the client
	// replaces with the host it connected to, as against Couchbase.
	AdvertisedAddr string
	// TLS, if set, is served on every connection (--tls-cert/--tls-key;
	// with --tls-client-ca a verified client certificate names the
	// connection's principal).
	TLS *tls.Config
	// Auth authenticates connections: client certificates and, with
	// --auth-tokens-file, SASL PLAIN. nil = every connection is anonymous.
	Auth *edge.Authenticator
	// SASLMechanisms are the mechanisms served, named as the Kafka
	// listener names them (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and
	// listed to clients in Couchbase's spelling (sasl.go). None = no SASL:
	// connections are authenticated by their certificate or are
	// anonymous; any = a connection its certificate does not authenticate
	// must log in.
	SASLMechanisms []string
	// Users are the SCRAM users (the Kafka listener's).
	Users *users.Users
	// Guard authorizes SELECT_BUCKET (DESCRIBE on the topic) and stream
	// requests (READ on the topic, as StreamChanges); nil allows everything.
	Guard *authz.Guard
	// MaxFrameBytes caps a request's body; 0 = DefaultMaxFrameBytes.
	MaxFrameBytes uint32
	// Cluster, if set, is the cluster this instance is part of (cluster
	// mode, cluster.go): requests are served by the domain it gives, the
	// bucket config places each vBucket on its partition's owner, and
	// Listen's log and streams are not used (nil).
	Cluster Cluster
	// HandshakeTimeout bounds the TLS handshake; 0 = DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	Logger           *slog.Logger
}

// Listener serves the DCP producer side of the memcached binary protocol
// over the log domain (topics, partitions, bounds) and the change streams.
type Listener struct {
	cfg     Config
	log     *broker.Log
	streams *changestream.Manager
	logger  *slog.Logger
	ln      net.Listener
	host    string // advertised host, "$HOST" when none was given
	port    int

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool

	// unknown counts requests answered UNKNOWN_COMMAND (logged once per
	// opcode per connection).
	unknown atomic.Int64
}

// Listen opens the listener over log and streams (or, in cluster mode,
// cfg.Cluster's domain) and starts accepting connections.
func Listen(cfg Config, log *broker.Log, streams *changestream.Manager) (*Listener, error) {
	if cfg.Cluster == nil && (log == nil || streams == nil) {
		return nil, errors.New("dcp listener: the log and the change streams are required")
	}
	if cfg.MaxFrameBytes == 0 {
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.checkMechanisms(); err != nil {
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, fmt.Errorf("dcp listener: %w", err)
		}
	}
	host, port := "$HOST", 0
	adv := cfg.AdvertisedAddr
	if adv == "" {
		adv = ln.Addr().String()
	} else {
		h, _, err := net.SplitHostPort(adv)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("dcp advertised address %q: %w", adv, err)
		}
		host = h
	}
	_, portStr, err := net.SplitHostPort(adv)
	if err == nil {
		port, err = strconv.Atoi(portStr)
	}
	if err != nil || port <= 0 || port > 65535 {
		ln.Close()
		return nil, fmt.Errorf("dcp advertised address %q: bad port", adv)
	}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		tc.NextProtos = nil
		ln = tls.NewListener(ln, tc)
	}
	l := &Listener{cfg: cfg, log: log, streams: streams, logger: cfg.Logger.With("component", "dcp"), ln: ln,
		host: host, port: port, conns: make(map[*conn]struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// AdvertisedAddr is the host:port this instance publishes to the other
// instances of a cluster: Config.AdvertisedAddr, else the bound address.
func (l *Listener) AdvertisedAddr() string {
	if l.cfg.AdvertisedAddr != "" {
		return l.cfg.AdvertisedAddr
	}
	return l.ln.Addr().String()
}

// Addr is the bound address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops accepting, closes every connection (their streams end) and
// waits for their goroutines.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	conns := make([]*conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	l.cancel()
	err := l.ln.Close()
	for _, c := range conns {
		c.nc.Close()
	}
	l.wg.Wait()
	return err
}

func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if l.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			l.logger.Warn("dcp accept", "err", err)
			return
		}
		c := newConn(l, nc)
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			nc.Close()
			return
		}
		l.conns[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go func() {
			defer l.wg.Done()
			c.serve()
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
		}()
	}
}

// conn is one client connection. The reading goroutine (serve) handles
// requests in order; each open DCP stream runs on its own goroutine and
// writes through out, which also carries the responses.
type conn struct {
	l  *Listener
	nc net.Conn
	r  *bufio.Reader

	// ctx ends when the connection does (every stream's context).
	ctx    context.Context
	cancel context.CancelFunc

	out *writer

	// Negotiated by HELLO.
	features map[memd.HelloFeature]bool

	// Authentication (sasl.go).
	user     string
	authed   bool
	saslMech string
	scram    *users.Login
	unbind   func()

	// The selected bucket (a topic name) and whether a DCP producer
	// connection was opened on it (DCP_OPEN).
	bucket  string
	dcpName string
	dcpOpen bool
	ctl     controls

	smu     sync.Mutex
	streams map[streamKey]*dcpStream
	swg     sync.WaitGroup

	lastRead    atomic.Int64 // unix nanoseconds of the last packet read (NOOP liveness)
	noopOnce    sync.Once
	noopEvery   atomic.Int64  // the NOOP interval (time.Duration), read by the NOOP goroutine
	noopChanged chan struct{} // signals a new interval to it
	unknown     map[memd.CmdCode]bool
}

func newConn(l *Listener, nc net.Conn) *conn {
	c := &conn{l: l, nc: nc, r: bufio.NewReaderSize(nc, 64<<10), features: make(map[memd.HelloFeature]bool),
		streams: make(map[streamKey]*dcpStream), unknown: make(map[memd.CmdCode]bool), noopChanged: make(chan struct{}, 1)}
	c.ctx, c.cancel = context.WithCancel(l.ctx)
	c.out = newWriter(nc)
	return c
}

// serve runs the connection until the peer goes, a malformed packet
// arrives or the listener closes.
func (c *conn) serve() {
	remote := c.nc.RemoteAddr().String()
	defer func() {
		if r := recover(); r != nil {
			c.l.logger.Error("dcp connection panic", "remote", remote, "panic", r, "stack", string(debug.Stack()))
		}
		c.cancel()
		c.out.close()
		c.nc.Close()
		c.swg.Wait()
		if c.unbind != nil {
			c.unbind()
		}
	}()
	if err := c.handshake(); err != nil {
		c.l.logger.Info("dcp connection refused", "remote", remote, "err", err)
		return
	}
	var buf []byte
	for {
		p, b, err := readPacket(c.r, buf, c.l.cfg.MaxFrameBytes)
		buf = b
		if err != nil {
			if !errors.Is(err, io.EOF) && c.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				c.l.logger.Info("dcp connection closed", "remote", remote, "err", err)
			}
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		if !p.isRequest() {
			continue // the answer to one of our NOOPs: liveness only
		}
		if err := c.handle(&p); err != nil {
			c.l.logger.Info("dcp connection closed", "remote", remote, "opcode", fmt.Sprintf("0x%02x", byte(p.opcode)), "err", err)
			return
		}
		if cap(buf) > 256<<10 {
			buf = nil // do not keep one large request's buffer
		}
	}
}

// handshake completes a TLS handshake and sets the first principal: the
// certificate's, else none yet when a SASL login may follow, else
// anonymous without authentication (as the Kafka listener does).
func (c *conn) handshake() error {
	var certUser string
	if tc, ok := c.nc.(*tls.Conn); ok {
		hctx, cancel := context.WithTimeout(c.ctx, c.l.cfg.HandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		st := tc.ConnectionState()
		certUser = edge.CertPrincipal(&st)
	}
	a := c.l.cfg.Auth
	switch {
	case certUser != "" && a != nil && a.ClientCerts():
		c.user, c.authed = certUser, true
	case len(c.l.cfg.SASLMechanisms) > 0:
		// A SASL login must follow.
	case a == nil || !a.Enabled():
		c.authed = true
	default:
		_, err := a.WithoutToken(certUser)
		return err
	}
	return nil
}

// reply writes a response to req (from the reading goroutine).
func (c *conn) reply(req *packet, status memd.StatusCode, extras, key, value []byte) error {
	return c.out.write(appendPacket(nil, answerHeader(req, status, value, c.features[memd.FeatureJSON]), extras, key, value), false)
}

func answerHeader(req *packet, status memd.StatusCode, value []byte, jsonOK bool) header {
	h := response(req, status)
	if len(value) > 0 && status == memd.StatusSuccess && isJSON(value) && jsonOK {
		h.datatype = datatypeJSON
	}
	return h
}

// fail answers req with status and a short reason text (from the reading
// goroutine).
func (c *conn) fail(req *packet, status memd.StatusCode, reason string) error {
	return c.out.write(failure(req, status, reason, c.features[memd.FeatureXerror]), false)
}

// failure is the answer to req with status and a reason text: XERROR
// clients read a JSON error context, others the text.
func failure(req *packet, status memd.StatusCode, reason string, xerror bool) []byte {
	var value []byte
	if reason != "" {
		if xerror {
			value = []byte(`{"error":{"context":` + strconv.Quote(reason) + `}}`)
		} else {
			value = []byte(reason)
		}
	}
	h := response(req, status)
	if xerror && value != nil {
		h.datatype = datatypeJSON
	}
	return appendPacket(nil, h, nil, nil, value)
}

const datatypeJSON = 0x01

func isJSON(b []byte) bool { return len(b) > 0 && (b[0] == '{' || b[0] == '[') }

// handle answers one request. An error closes the connection.
func (c *conn) handle(p *packet) error {
	if !c.authed && !preAuth(p.opcode) {
		return c.fail(p, memd.StatusAccessError, "authentication is required first (SASL_AUTH)")
	}
	switch p.opcode {
	case memd.CmdHello:
		return c.hello(p)
	case memd.CmdNoop:
		return c.reply(p, memd.StatusSuccess, nil, nil, nil)
	case memd.CmdGetErrorMap:
		return c.errorMap(p)
	case memd.CmdSASLListMechs:
		return c.listMechs(p)
	case memd.CmdSASLAuth, memd.CmdSASLStep:
		return c.sasl(p)
	case memd.CmdSelectBucket:
		return c.selectBucket(p)
	case memd.CmdGetClusterConfig:
		return c.clusterConfig(p)
	case memd.CmdDcpOpenConnection:
		return c.dcpOpenConn(p)
	case memd.CmdDcpControl:
		return c.dcpControl(p)
	case memd.CmdDcpGetFailoverLog:
		return c.failoverLog(p)
	case memd.CmdGetAllVBSeqnos:
		return c.allSeqnos(p)
	case memd.CmdDcpStreamReq:
		return c.streamReq(p)
	case memd.CmdDcpCloseStream:
		return c.closeStream(p)
	case memd.CmdDcpBufferAck:
		return c.bufferAck(p)
	case memd.CmdDcpNoop:
		return nil // a client's NOOP request is not expected; nothing to answer
	case memd.CmdCollectionsGetManifest:
		return c.collectionsManifest(p)
	case memd.CmdCollectionsGetID:
		return c.collectionID(p)
	}
	if !c.unknown[p.opcode] {
		c.unknown[p.opcode] = true
		c.l.unknown.Add(1)
		c.l.logger.Info("dcp: unknown opcode answered UNKNOWN_COMMAND", "remote", c.nc.RemoteAddr().String(),
			"opcode", fmt.Sprintf("0x%02x", byte(p.opcode)), "name", p.opcode.Name())
	}
	return c.fail(p, memd.StatusUnknownCommand, "")
}

// preAuth are the requests a connection may send before its login.
func preAuth(op memd.CmdCode) bool {
	switch op {
	case memd.CmdHello, memd.CmdNoop, memd.CmdGetErrorMap, memd.CmdSASLListMechs, memd.CmdSASLAuth, memd.CmdSASLStep:
		return true
	}
	return false
}

// writer serializes the connection's writes: responses and the streams'
// event batches, each one call of write; flow control (controls.go) is
// accounted by the streams before they write.
type writer struct {
	mu  sync.Mutex
	bw  *bufio.Writer
	err error
}

func newWriter(w io.Writer) *writer { return &writer{bw: bufio.NewWriterSize(w, 64<<10)} }

// write writes b and, unless more is true, flushes.
func (w *writer) write(b []byte, more bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if _, err := w.bw.Write(b); err != nil {
		w.err = err
		return err
	}
	if !more {
		if err := w.bw.Flush(); err != nil {
			w.err = err
			return err
		}
	}
	return nil
}

func (w *writer) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = net.ErrClosed
	}
}
