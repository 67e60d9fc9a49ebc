package edge

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// LimitListener caps the open connections of one listener, in total
// (--max-connections) and per client IP (--max-connections-per-ip). A
// connection over a cap is accepted and closed at once: left in the
// kernel's accept queue it would still count against the backlog and its
// client would wait for a timeout, and kept open it would hold a file
// descriptor the log store needs. Each refusal is counted in
// sharelog_connections_refused_total{listener,cause}. Any listener (gRPC,
// HTTP, Kafka) wraps its net.Listener in one and serves that.
type LimitListener struct {
	net.Listener
	name       string
	max, perIP int
	log        *slog.Logger
	refused    metric.Int64Counter

	mu    sync.Mutex
	total int
	byIP  map[string]int

	lastWarn atomic.Int64 // unix nanoseconds of the last refusal warning
}

// NewLimitListener wraps l, named name in logs and in the listener label
// of refused, the counter of refusals, with the caps max (in total) and
// perIP.
func NewLimitListener(l net.Listener, name string, max, perIP int, log *slog.Logger, refused metric.Int64Counter) *LimitListener {
	return &LimitListener{Listener: l, name: name, max: max, perIP: perIP, log: log, refused: refused, byIP: make(map[string]int)}
}

// HostOf is the client IP of a connection address ("" keys unknown peers
// together, e.g. in-memory listeners): the per-IP limits key.
func HostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// Accept returns the next connection within the caps; those over a cap are
// closed and counted on the way.
func (l *LimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := HostOf(c.RemoteAddr().String())
		cause := ""
		l.mu.Lock()
		switch {
		case l.total >= l.max:
			cause = "max_connections"
		case l.byIP[ip] >= l.perIP:
			cause = "max_connections_per_ip"
		default:
			l.total++
			l.byIP[ip]++
		}
		l.mu.Unlock()
		if cause == "" {
			return &limitedConn{Conn: c, l: l, ip: ip}, nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // reset: no lingering socket for a refused peer
		}
		c.Close()
		l.refused.Add(context.Background(), 1, metric.WithAttributes(
			attribute.String("listener", l.name), attribute.String("cause", cause)))
		l.warnRefused(cause, ip)
	}
}

// warnRefused logs refusals at most once a minute per listener.
func (l *LimitListener) warnRefused(cause, ip string) {
	now := time.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last < int64(time.Minute) || !l.lastWarn.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn("refusing connections over the limit (further refusals are only counted for a minute)",
		"listener", l.name, "cause", cause, "client_ip", ip, "max_connections", l.max, "max_connections_per_ip", l.perIP)
}

func (l *LimitListener) release(ip string) {
	l.mu.Lock()
	l.total--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
	l.mu.Unlock()
}

// open reports the connections counted now (tests).
func (l *LimitListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

type limitedConn struct {
	net.Conn
	l    *LimitListener
	ip   string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// CloseWrite keeps the half-close of the wrapped TCP connection, which
// net/http uses to deliver an error response before closing a connection
// whose request it did not read in full.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
