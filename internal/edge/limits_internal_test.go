package edge

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"

	"github.com/sharelog/sharelog/internal/telemetry"
)

// newRefusedCounter is a refusals counter of the name internal/app gives
// it, and the telemetry to scrape it from.
func newRefusedCounter(t *testing.T) (metric.Int64Counter, *telemetry.Telemetry) {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	c, err := tel.Meter.Meter("test").Int64Counter("sharelog.connections.refused", metric.WithUnit("{connection}"))
	require.NoError(t, err)
	return c, tel
}

func scrape(t *testing.T, tel *telemetry.Telemetry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// The listener closes connections over the total or per-IP cap at accept,
// counts each refusal, and frees a slot when a connection closes.
func TestLimitListener(t *testing.T) {
	refusedCounter, tel := newRefusedCounter(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := NewLimitListener(inner, "http", 3, 2, slog.New(slog.DiscardHandler), refusedCounter)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dialErr := func(src string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	dial := func(src string) net.Conn {
		c, err := dialErr(src)
		require.NoError(t, err)
		return c
	}
	// refused reports whether the server closed c without serving it.
	refused := func(c net.Conn) bool {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false // still open: accepted
		}
		return true // EOF or reset
	}
	// refusedDial is refused for a new connection from src: the reset may
	// already fail the dial.
	refusedDial := func(src string) bool {
		c, err := dialErr(src)
		if err != nil {
			require.ErrorIs(t, err, syscall.ECONNRESET)
			return true
		}
		return refused(c)
	}
	take := func() net.Conn {
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("no connection accepted")
			return nil
		}
	}

	a1, a2 := dial("127.0.0.1"), dial("127.0.0.1")
	s1, s2 := take(), take()
	assert.True(t, refusedDial("127.0.0.1"), "third connection from one IP is over --max-connections-per-ip")
	b1 := dial("127.0.0.2")
	take()
	assert.False(t, refused(b1), "another IP still connects")
	assert.True(t, refusedDial("127.0.0.3"), "fourth connection is over --max-connections")
	assert.False(t, refused(a1))
	assert.False(t, refused(a2))
	assert.Equal(t, 3, l.open())

	s1.Close()
	s2.Close() // closing twice must not free two slots
	s2.Close()
	require.Eventually(t, func() bool { return l.open() == 1 }, 5*time.Second, 5*time.Millisecond)
	c := dial("127.0.0.1")
	take()
	assert.False(t, refused(c), "a closed connection frees its slot")

	out := scrape(t, tel)
	assert.Regexp(t, `sharelog_connections_refused_total\{[^}]*cause="max_connections_per_ip"[^}]*listener="http"[^}]*\} 1`, out)
	assert.Regexp(t, `sharelog_connections_refused_total\{[^}]*cause="max_connections"[^}]*listener="http"[^}]*\} 1`, out)
}

func TestIPLimiterBounded(t *testing.T) {
	l := NewIPLimiter(1, 2, 3)
	assert.True(t, l.Allow("a"))
	assert.True(t, l.Allow("a"))
	assert.False(t, l.Allow("a"), "burst spent")
	for _, ip := range []string{"b", "c", "d"} {
		assert.True(t, l.Allow(ip))
	}
	assert.Len(t, l.m, 3, "bounded")
	assert.Equal(t, 3, l.lru.Len())
	_, kept := l.m["a"]
	assert.False(t, kept, "the least recently used is evicted")
}

// countingHandler counts WARN records whose message mentions a phrase.
type countingHandler struct {
	slog.Handler
	phrase string
	seen   chan struct{}
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, h.phrase) {
		select {
		case h.seen <- struct{}{}:
		default: // counted enough
		}
	}
	return nil
}

// With --insecure-allow-remote the warning repeats every interval.
func TestExposureWarningRepeats(t *testing.T) {
	h := countingHandler{Handler: slog.DiscardHandler, phrase: "without TLS and authentication", seen: make(chan struct{}, 10)}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		ExposureLoop(slog.New(h), []string{"--http-addr 0.0.0.0:0"}, time.Millisecond, stop)
		close(done)
	}()
	for range 3 {
		select {
		case <-h.seen:
		case <-time.After(5 * time.Second):
			t.Fatal("the warning did not repeat")
		}
	}
	close(stop)
	<-done
}
