package shareconsumer

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"google.golang.org/grpc"

	"github.com/sharelog/sharelog/client/backoff"
)

// Defaults of Config.
const (
	DefaultMaxRecords     = 500
	DefaultMaxWait        = 500 * time.Millisecond
	DefaultRequestTimeout = 30 * time.Second
	// DefaultCloseTimeout bounds Close when its context has no deadline.
	DefaultCloseTimeout = 30 * time.Second
)

// Config configures a Consumer. GroupID and Topics are required.
type Config struct {
	// GroupID is the share group (1..249 characters).
	GroupID string
	// MemberID identifies this consumer in the group and keys its share
	// session (1..36 characters). Default: a random UUID. Two live consumers
	// must never share a member ID.
	MemberID string
	// Topics is the subscription.
	Topics []string
	// RackID is sent with heartbeats (informational).
	RackID string
	// ClientID is sent as the "x-client-id" request metadata (shown by
	// DescribeShareGroup).
	ClientID string

	// MaxRecords caps the records returned by one Poll, across all
	// partitions. Default 500.
	MaxRecords int
	// MaxWait is how long the server holds a fetch waiting for records (its
	// long poll). Default 500 ms; negative = do not wait.
	MaxWait time.Duration
	// AckMode: AckImplicit (default) or AckExplicit.
	AckMode AckMode
	// RequestTimeout bounds each request beyond its long poll, so a silent
	// network cannot block a call forever. Default 30 s.
	RequestTimeout time.Duration

	// Dial opens a connection to another instance of a cluster, at the
	// gRPC address DescribeCluster advertises, with the caller's
	// credentials (as router.Dialer). In a partitioned cluster the consumer
	// keeps a share session on each owner of a partition it fetches, and
	// reaches them through Dial; Close closes what it opened. Unset, the
	// consumer uses the dialer of a *router.Conn given to New, or else
	// keeps its one session on the given connection, and in a partitioned
	// cluster fetches only the partitions of that connection's instance
	// (see "Clusters" in the package documentation).
	Dial func(addr string) (grpc.ClientConnInterface, error)

	// Backoff paces retries after transport failures.
	Backoff Backoff
	// Logger receives the consumer's diagnostics (reconnects, session
	// reopenings, dropped acknowledgements). Default: discarded.
	Logger *slog.Logger
	// OnAcknowledgement, when set, is called with the outcome of every
	// acknowledgement sent with Poll, Commit or Close, and of those dropped
	// because their share session ended. It runs on the goroutine calling
	// Poll, Commit or Close and must not call them (Acknowledge is fine).
	OnAcknowledgement func(AckResult)
}

// Backoff is the retry schedule of the consumer's requests; zero fields
// take the defaults of package backoff (100 ms, ×2, at most 5 s, ± 20 %).
type Backoff = backoff.Backoff

func (c Config) withDefaults() Config {
	if c.MemberID == "" {
		c.MemberID = newUUID()
	}
	if c.MaxRecords == 0 {
		c.MaxRecords = DefaultMaxRecords
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	} else if c.MaxWait < 0 {
		c.MaxWait = 0
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	c.Backoff = c.Backoff.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Topics = append([]string(nil), c.Topics...)
	return c
}

func (c Config) validate() error {
	var errs []error
	if n := len(c.GroupID); n < 1 || n > 249 {
		errs = append(errs, fmt.Errorf("GroupID must be 1..249 characters, got %d", n))
	}
	if n := len(c.MemberID); n > 36 {
		errs = append(errs, fmt.Errorf("MemberID must be 1..36 characters, got %d", n))
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("no topic in Topics: name at least one"))
	}
	seen := map[string]bool{}
	for _, t := range c.Topics {
		if t == "" {
			errs = append(errs, errors.New("an empty name in Topics"))
		} else if seen[t] {
			errs = append(errs, fmt.Errorf("topic %q twice in Topics", t))
		}
		seen[t] = true
	}
	if c.MaxRecords < 0 || c.MaxRecords > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("MaxRecords must be >= 0, got %d", c.MaxRecords))
	}
	if c.MaxWait > time.Duration(math.MaxInt32)*time.Millisecond {
		errs = append(errs, fmt.Errorf("MaxWait is too long: %v", c.MaxWait))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout must be >= 0, got %v", c.RequestTimeout))
	}
	if c.AckMode != AckImplicit && c.AckMode != AckExplicit {
		errs = append(errs, fmt.Errorf("unknown AckMode %d", c.AckMode))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shareconsumer: invalid config: %w", err)
	}
	return nil
}

// newUUID returns a random (version 4) UUID: 36 characters, the longest
// member ID the server accepts.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
