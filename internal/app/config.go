package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/sharelog/sharelog/internal/budget"
	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/transport/kafkawire"
)

// Values of Config.Authorizer (--authorizer).
const (
	AuthorizerNone = "none"
	AuthorizerACL  = "acl"
)

// Config is everything the server process is configured with.
type Config struct {
	DataDir  string
	GRPCAddr string
	HTTPAddr string

	Fsync         string        // always | interval | never
	FsyncInterval time.Duration // for Fsync "interval"
	SegmentBytes  int64         // default segment size of new topics
	// File descriptors and partitions (docs/operations.md "File
	// descriptors"): segment files held open at once (0 = half of the
	// RLIMIT_NOFILE soft limit, fdbudget.go) and partitions of all topics.
	MaxOpenSegments int
	MaxPartitions   int

	// Log compaction (docs/compaction.md).
	CompactionMaxBytesPerSec int64         // cleaner disk I/O cap, bytes/s; 0 = unlimited
	CompactionInterval       time.Duration // how often the cleaner looks for dirty partitions

	MaxRequestBytes int // largest request accepted, gRPC and REST

	// Share groups (flags accepted and validated now; used by share groups).
	MaxShareSessions             int
	ShareSessionIdleTimeout      time.Duration
	ShareRecordLockDuration      time.Duration
	ShareMinRecordLockDuration   time.Duration
	ShareMaxRecordLockDuration   time.Duration
	ShareDeliveryCountLimit      int
	SharePartitionMaxRecordLocks int
	ShareGroupMaxSize            int
	ShareSessionTimeout          time.Duration
	ShareHeartbeatInterval       time.Duration
	// RepairShareState accepts lost share state at start: share-partitions
	// whose acknowledged state was found lost come online with what is
	// readable (the loss is logged) instead of staying offline.
	RepairShareState bool
	// RepairAcceptLoss accepts at start what the data directory's manifest
	// shows lost from the log (docs/operations.md): a recorded topic whose
	// directory is missing is forgotten, a partition whose log ends below
	// its recorded high watermark continues at it; both logged at WARN.
	RepairAcceptLoss bool
	// Dead-letter topics: DLQAutoCreateTopics creates a group's missing
	// dead-letter topic at its first copy; then a group's dead_letter_topic
	// must start with DLQTopicPrefix (docs/dead-letter-topics.md).
	DLQAutoCreateTopics bool
	DLQTopicPrefix      string

	// Change streams (flags accepted and validated now; used by change streams).
	OSOBackfill             string // auto | enabled | disabled
	OSOAutoSmallRatio       float64
	OSOAutoLargeRatio       float64
	OSOAutoSmallRecordBytes int
	MaxChangeStreams        int

	// Limits and exposure: what one client, or many, may hold.
	MaxConnections               int           // per listener (gRPC and HTTP each)
	MaxConnectionsPerIP          int           // per listener and client IP
	HTTPIdleTimeout              time.Duration // idle keep-alive HTTP connections are closed after this
	HTTPReadTimeout              time.Duration // a request body must arrive within this
	GRPCMaxConcurrentStreams     int           // concurrent calls per gRPC connection
	MaxLongPolls                 int           // Fetch/ShareFetch calls waiting at once, server-wide
	HealthProbesPerSec           int           // health probes per second and client IP; 0 = no limit
	MaxShareSessionsPerPrincipal int           // 0 = half of MaxShareSessions
	MaxChangeStreamsPerPrincipal int           // 0 = half of MaxChangeStreams
	// Fair shares and the response byte budget (docs/operations.md
	// "Budgets"); 0 per principal = a quarter of the server-wide value.
	MaxLongPollsPerPrincipal     int
	MaxResponseBytesInFlight     int64
	MaxResponseBytesPerPrincipal int64
	MaxFetchBytes                int64 // record data of one response (its first record may exceed it)
	// InsecureAllowRemote lets a listener bind a non-loopback address
	// without both TLS and authentication (warned about every hour).
	InsecureAllowRemote bool

	// Security (all off by default, on loopback).
	TLSCert        string
	TLSKey         string
	TLSClientCA    string
	AuthTokensFile string
	// TrustedProxies is --trusted-proxies: comma-separated CIDRs (or
	// addresses) of proxies whose X-Forwarded-For names the client host.
	TrustedProxies string
	// Authorization (docs/security.md): "none" allows every caller
	// everything; "acl" decides with the bindings kept in the data dir,
	// SuperUsers ("User:<name>") being allowed everything.
	Authorizer string
	SuperUsers []string

	// ShutdownTimeout bounds the wait for in-flight calls on shutdown.
	ShutdownTimeout time.Duration

	// Kafka wire-protocol listener (docs/kafka.md); off when KafkaAddr is empty.
	KafkaAddr              string
	KafkaAdvertisedAddr    string // what Metadata returns; empty = the bound address
	KafkaAutoCreateTopics  bool
	KafkaDefaultPartitions int
	KafkaMaxRequestBytes   int // frame size and decompressed batch size cap
	// KafkaIdleTimeout closes a Kafka connection idle this long (Kafka's
	// connections.max.idle.ms); KafkaRequestTimeout one whose request's
	// bytes do not all arrive within it (docs/kafka.md "Limits").
	KafkaIdleTimeout, KafkaRequestTimeout time.Duration
	// KafkaSASLSessionLifetime is how long a Kafka SASL login holds before
	// the client must re-authenticate (KIP-368; docs/kafka.md "Security").
	KafkaSASLSessionLifetime time.Duration
	// Classic consumer groups (docs/consumer-groups.md): how long the
	// first rebalance of an empty group waits for more members (Kafka's
	// group.initial.rebalance.delay.ms), and how long an empty group's
	// committed offsets are kept (Kafka's offsets.retention.minutes).
	GroupInitialRebalanceDelay time.Duration
	OffsetsRetention           time.Duration
	// TransactionMaxTimeout caps a Kafka transactional producer's
	// transaction.timeout.ms, as Kafka's transaction.max.timeout.ms
	// (docs/kafka.md "Transactions").
	TransactionMaxTimeout time.Duration
	// TransactionalIDExpiration is how long an idle transactional id
	// keeps its state (--transactional-id-expiration, Kafka's
	// transactional.id.expiration.ms).
	TransactionalIDExpiration time.Duration
	// The consumer protocol (KIP-848; docs/consumer-groups.md): the
	// heartbeat interval told to members and the session after which a
	// silent member is removed (Kafka's group.consumer.heartbeat.interval.ms
	// and group.consumer.session.timeout.ms).
	GroupConsumerHeartbeatInterval time.Duration
	GroupConsumerSessionTimeout    time.Duration
	// KafkaSASLMechanisms is --kafka-sasl-mechanisms: the SASL mechanisms
	// of the Kafka listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512). Empty =
	// every one when --auth-tokens-file is set, none otherwise
	// (kafkaSASLMechanisms; docs/kafka.md "Security").
	KafkaSASLMechanisms []string
	// DCP listener (docs/dcp.md); off when DCPAddr is empty. It serves
	// the change streams to Couchbase DCP consumers, with the Kafka
	// listener's SASL mechanisms (--kafka-sasl-mechanisms) and SCRAM users.
	DCPAddr           string
	DCPAdvertisedAddr string // the node's address in the bucket config; empty = "$HOST" and the bound port
	// Cluster mode: --store and the NATS and lease settings.
	Cluster ClusterConfig
}

// DefaultConfig is the embedded default: data in ./data, gRPC on
// 127.0.0.1:9090, HTTP on 127.0.0.1:8080, fsync before every acknowledgement.
func DefaultConfig() Config {
	return Config{
		DataDir:                        "./data",
		GRPCAddr:                       "127.0.0.1:9090",
		HTTPAddr:                       "127.0.0.1:8080",
		Fsync:                          "always",
		FsyncInterval:                  time.Second,
		SegmentBytes:                   64 << 20,
		MaxPartitions:                  100_000,
		CompactionInterval:             15 * time.Second,
		MaxRequestBytes:                16 << 20,
		MaxShareSessions:               2000,
		ShareSessionIdleTimeout:        2 * time.Minute,
		ShareRecordLockDuration:        30 * time.Second,
		ShareMinRecordLockDuration:     time.Second,
		ShareMaxRecordLockDuration:     time.Hour,
		ShareDeliveryCountLimit:        5,
		SharePartitionMaxRecordLocks:   2000,
		ShareGroupMaxSize:              200,
		ShareSessionTimeout:            45 * time.Second,
		ShareHeartbeatInterval:         5 * time.Second,
		DLQTopicPrefix:                 "dlq.",
		OSOBackfill:                    "auto",
		OSOAutoSmallRatio:              0.02,
		OSOAutoLargeRatio:              0.15,
		OSOAutoSmallRecordBytes:        256,
		MaxChangeStreams:               1024,
		MaxConnections:                 10000,
		MaxConnectionsPerIP:            1000,
		HTTPIdleTimeout:                2 * time.Minute,
		HTTPReadTimeout:                time.Minute,
		GRPCMaxConcurrentStreams:       1000,
		MaxLongPolls:                   10000,
		MaxResponseBytesInFlight:       256 << 20,
		MaxFetchBytes:                  50 << 20,
		HealthProbesPerSec:             20,
		ShutdownTimeout:                10 * time.Second,
		KafkaDefaultPartitions:         1,
		Authorizer:                     AuthorizerNone,
		KafkaMaxRequestBytes:           100 << 20,
		KafkaIdleTimeout:               10 * time.Minute,
		KafkaSASLSessionLifetime:       time.Hour,
		GroupInitialRebalanceDelay:     3 * time.Second,
		TransactionMaxTimeout:          15 * time.Minute,
		TransactionalIDExpiration:      7 * 24 * time.Hour,
		GroupConsumerHeartbeatInterval: 5 * time.Second,
		GroupConsumerSessionTimeout:    45 * time.Second,
		OffsetsRetention:               7 * 24 * time.Hour,
		KafkaRequestTimeout:            30 * time.Second,
		Cluster:                        DefaultClusterConfig(),
	}
}

// Validate reports every flag value the server refuses to start with.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.DataDir == "" {
		bad("--data-dir must not be empty")
	}
	switch c.Fsync {
	case "always", "never":
	case "interval":
		if c.FsyncInterval <= 0 {
			bad("--fsync-interval must be positive with --fsync=interval")
		}
	default:
		bad("--fsync must be always, interval or never, got %q", c.Fsync)
	}
	if c.CompactionMaxBytesPerSec < 0 {
		bad("--compaction-max-bytes-per-sec must not be negative, got %d", c.CompactionMaxBytesPerSec)
	}
	if c.CompactionInterval <= 0 {
		bad("--compaction-interval must be positive, got %s", c.CompactionInterval)
	}
	if c.SegmentBytes < 1024 || c.SegmentBytes > 1<<30 {
		bad("--segment-bytes must be between 1024 and 1073741824, got %d", c.SegmentBytes)
	}
	if c.MaxOpenSegments < 0 || c.MaxOpenSegments > maxOpenSegmentsCap {
		bad("--max-open-segments must be between 0 (half of RLIMIT_NOFILE) and %d, got %d", maxOpenSegmentsCap, c.MaxOpenSegments)
	}
	if c.MaxPartitions < 1 || c.MaxPartitions > 10_000_000 {
		bad("--max-partitions must be between 1 and 10000000, got %d", c.MaxPartitions)
	}
	if c.MaxRequestBytes < 1024 {
		bad("--max-request-bytes must be at least 1024, got %d", c.MaxRequestBytes)
	}
	if c.MaxShareSessions < 1 {
		bad("--max-share-sessions must be at least 1")
	}
	if c.ShareSessionIdleTimeout <= 0 {
		bad("--share-session-idle-timeout must be positive")
	}
	if c.ShareMinRecordLockDuration > c.ShareMaxRecordLockDuration {
		bad("--share-min-record-lock-duration (%v) exceeds --share-max-record-lock-duration (%v)", c.ShareMinRecordLockDuration, c.ShareMaxRecordLockDuration)
	}
	if c.ShareRecordLockDuration < c.ShareMinRecordLockDuration || c.ShareRecordLockDuration > c.ShareMaxRecordLockDuration {
		bad("--share-record-lock-duration %v is outside [%v, %v]", c.ShareRecordLockDuration, c.ShareMinRecordLockDuration, c.ShareMaxRecordLockDuration)
	}
	if c.ShareDeliveryCountLimit < 2 || c.ShareDeliveryCountLimit > 10 {
		bad("--share-delivery-count-limit must be between 2 and 10, got %d", c.ShareDeliveryCountLimit)
	}
	if c.SharePartitionMaxRecordLocks < 100 || c.SharePartitionMaxRecordLocks > 10000 {
		bad("--share-partition-max-record-locks must be between 100 and 10000, got %d", c.SharePartitionMaxRecordLocks)
	}
	if c.ShareGroupMaxSize < 1 || c.ShareGroupMaxSize > c.MaxShareSessions {
		bad("--share-group-max-size must be between 1 and --max-share-sessions (%d), got %d", c.MaxShareSessions, c.ShareGroupMaxSize)
	}
	if c.ShareSessionTimeout < time.Second || c.ShareSessionTimeout > time.Hour {
		bad("--share-session-timeout must be between 1s and 1h, got %v", c.ShareSessionTimeout)
	}
	if c.ShareHeartbeatInterval < 100*time.Millisecond || c.ShareHeartbeatInterval > 10*time.Minute || c.ShareHeartbeatInterval >= c.ShareSessionTimeout {
		bad("--share-heartbeat-interval must be between 100ms and 10m and below --share-session-timeout, got %v", c.ShareHeartbeatInterval)
	}
	if c.DLQTopicPrefix == "" || strings.HasPrefix(c.DLQTopicPrefix, "__") || len(c.DLQTopicPrefix) > 249 ||
		strings.Trim(c.DLQTopicPrefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		bad("--dlq-topic-prefix must be 1..249 characters of [a-zA-Z0-9._-] not starting with \"__\", got %q", c.DLQTopicPrefix)
	}
	switch c.OSOBackfill {
	case "auto", "enabled", "disabled":
	default:
		bad("--oso-backfill must be auto, enabled or disabled, got %q", c.OSOBackfill)
	}
	if c.OSOAutoSmallRatio < 0 || c.OSOAutoSmallRatio > 1 || c.OSOAutoLargeRatio < 0 || c.OSOAutoLargeRatio > 1 {
		bad("--oso-auto-small-ratio and --oso-auto-large-ratio must be within [0, 1]")
	}
	if c.OSOAutoSmallRecordBytes < 0 {
		bad("--oso-auto-small-record-bytes must not be negative")
	}
	if c.MaxChangeStreams < 1 {
		bad("--max-change-streams must be at least 1")
	}
	if c.MaxConnections < 1 || c.MaxConnections > 1_000_000 {
		bad("--max-connections must be between 1 and 1000000, got %d", c.MaxConnections)
	}
	// A per-IP cap above the total is allowed (the total then binds), so
	// lowering --max-connections alone needs no second flag.
	if c.MaxConnectionsPerIP < 1 || c.MaxConnectionsPerIP > 1_000_000 {
		bad("--max-connections-per-ip must be between 1 and 1000000, got %d", c.MaxConnectionsPerIP)
	}
	if c.HTTPIdleTimeout < time.Second || c.HTTPIdleTimeout > 24*time.Hour {
		bad("--http-idle-timeout must be between 1s and 24h, got %v", c.HTTPIdleTimeout)
	}
	if c.HTTPReadTimeout < 100*time.Millisecond || c.HTTPReadTimeout > time.Hour {
		bad("--http-read-timeout must be between 100ms and 1h, got %v", c.HTTPReadTimeout)
	}
	if c.GRPCMaxConcurrentStreams < 1 || c.GRPCMaxConcurrentStreams > 100_000 {
		bad("--grpc-max-concurrent-streams must be between 1 and 100000, got %d", c.GRPCMaxConcurrentStreams)
	}
	if c.HealthProbesPerSec < 0 {
		bad("--health-probes-per-sec must be 0 (no limit) or more, got %d", c.HealthProbesPerSec)
	}
	if c.MaxLongPolls < 0 || c.MaxLongPolls > 1_000_000 {
		bad("--max-long-polls must be between 0 and 1000000, got %d", c.MaxLongPolls)
	}
	if c.MaxShareSessionsPerPrincipal < 0 || c.MaxShareSessionsPerPrincipal > c.MaxShareSessions {
		bad("--max-share-sessions-per-principal must be between 0 (half of --max-share-sessions) and --max-share-sessions (%d), got %d",
			c.MaxShareSessions, c.MaxShareSessionsPerPrincipal)
	}
	if c.MaxChangeStreamsPerPrincipal < 0 || c.MaxChangeStreamsPerPrincipal > c.MaxChangeStreams {
		bad("--max-change-streams-per-principal must be between 0 (half of --max-change-streams) and --max-change-streams (%d), got %d",
			c.MaxChangeStreams, c.MaxChangeStreamsPerPrincipal)
	}
	if c.MaxLongPollsPerPrincipal < 0 || c.MaxLongPollsPerPrincipal > c.MaxLongPolls {
		bad("--max-long-polls-per-principal must be between 0 (a quarter of --max-long-polls) and --max-long-polls (%d), got %d",
			c.MaxLongPolls, c.MaxLongPollsPerPrincipal)
	}
	if c.MaxResponseBytesInFlight < 1<<20 || c.MaxResponseBytesInFlight > 1<<40 {
		bad("--max-response-bytes-in-flight must be between 1048576 (1 MiB) and 1099511627776 (1 TiB), got %d", c.MaxResponseBytesInFlight)
	}
	if c.MaxResponseBytesPerPrincipal != 0 && (c.MaxResponseBytesPerPrincipal < budget.MinGrant || c.MaxResponseBytesPerPrincipal > c.MaxResponseBytesInFlight) {
		bad("--max-response-bytes-per-principal must be 0 (a quarter of --max-response-bytes-in-flight) or between %d and --max-response-bytes-in-flight (%d), got %d",
			budget.MinGrant, c.MaxResponseBytesInFlight, c.MaxResponseBytesPerPrincipal)
	}
	if c.MaxFetchBytes < 1024 || c.MaxFetchBytes > 1<<30 {
		bad("--max-fetch-bytes must be between 1024 and 1073741824, got %d", c.MaxFetchBytes)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("--tls-cert and --tls-key go together")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		bad("--tls-client-ca needs --tls-cert and --tls-key")
	}
	if _, err := edge.ParseTrustedProxies(c.TrustedProxies); err != nil {
		bad("--trusted-proxies: %v", err)
	}
	if c.ShutdownTimeout <= 0 {
		bad("shutdown timeout must be positive")
	}
	if c.KafkaDefaultPartitions < 1 || c.KafkaDefaultPartitions > 10000 {
		bad("--kafka-default-partitions must be between 1 and 10000, got %d", c.KafkaDefaultPartitions)
	}
	if c.KafkaMaxRequestBytes < 1024 || c.KafkaMaxRequestBytes > 1<<30 {
		bad("--kafka-max-request-bytes must be between 1024 and 1073741824, got %d", c.KafkaMaxRequestBytes)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--kafka-idle-timeout", c.KafkaIdleTimeout}, {"--kafka-request-timeout", c.KafkaRequestTimeout}} {
		if d.v < 100*time.Millisecond || d.v > 24*time.Hour {
			bad("%s must be between 100ms and 24h, got %s", d.flag, d.v)
		}
	}
	if c.KafkaAdvertisedAddr != "" {
		if c.KafkaAddr == "" {
			bad("--kafka-advertised-addr needs --kafka-addr")
		} else if _, port, err := net.SplitHostPort(c.KafkaAdvertisedAddr); err != nil || port == "" || port == "0" {
			bad("--kafka-advertised-addr must be host:port with a non-zero port, got %q", c.KafkaAdvertisedAddr)
		}
	}
	if c.DCPAdvertisedAddr != "" {
		if c.DCPAddr == "" {
			bad("--dcp-advertised-addr needs --dcp-addr")
		} else if _, port, err := net.SplitHostPort(c.DCPAdvertisedAddr); err != nil || port == "" || port == "0" {
			bad("--dcp-advertised-addr must be host:port with a non-zero port, got %q", c.DCPAdvertisedAddr)
		}
	}
	if c.GroupConsumerHeartbeatInterval < 100*time.Millisecond || c.GroupConsumerSessionTimeout < 2*c.GroupConsumerHeartbeatInterval {
		bad("--group-consumer-heartbeat-interval must be at least 100ms and --group-consumer-session-timeout at least twice it, got %s and %s",
			c.GroupConsumerHeartbeatInterval, c.GroupConsumerSessionTimeout)
	}
	if c.TransactionMaxTimeout < time.Second || c.TransactionMaxTimeout > 24*time.Hour {
		bad("--transaction-max-timeout must be between 1s and 24h, got %s", c.TransactionMaxTimeout)
	}
	if c.TransactionalIDExpiration < time.Second {
		bad("--transactional-id-expiration must be at least 1s, got %s", c.TransactionalIDExpiration)
	}
	if c.GroupInitialRebalanceDelay < 0 || c.GroupInitialRebalanceDelay > 5*time.Minute {
		bad("--group-initial-rebalance-delay must be between 0 and 5m, got %s", c.GroupInitialRebalanceDelay)
	}
	if c.OffsetsRetention < time.Second {
		bad("--offsets-retention must be at least 1s, got %s", c.OffsetsRetention)
	}
	if c.KafkaSASLSessionLifetime < time.Second || c.KafkaSASLSessionLifetime > 7*24*time.Hour {
		bad("--kafka-sasl-session-lifetime must be between 1s and 168h, got %s", c.KafkaSASLSessionLifetime)
	}
	for _, m := range c.KafkaSASLMechanisms {
		switch {
		case !slices.Contains(kafkawire.Mechanisms, m):
			bad("--kafka-sasl-mechanisms: %q is none of %s", m, strings.Join(kafkawire.Mechanisms, ", "))
		case m == "PLAIN" && c.AuthTokensFile == "":
			bad("--kafka-sasl-mechanisms PLAIN needs --auth-tokens-file (its tokens are PLAIN's passwords)")
		}
	}
	switch c.Authorizer {
	case AuthorizerNone:
	case AuthorizerACL:
		// The bindings live in the data dir; instances of a cluster share
		// no data dir, so each would enforce its own set.
		if c.Cluster.Store == StoreJetStream {
			bad("--authorizer acl is not supported with --store jetstream yet: bindings are kept in the local data dir only")
		}
	default:
		bad("--authorizer must be none or acl, got %q", c.Authorizer)
	}
	for _, u := range c.SuperUsers {
		if name, ok := strings.CutPrefix(u, "User:"); !ok || name == "" || name == "*" {
			bad("--super-users: %q is not a principal User:<name>", u)
		}
	}
	c.Cluster.validate(bad)
	return errors.Join(errs...)
}

// kafkaSASLMechanisms is --kafka-sasl-mechanisms, its default (empty)
// being every mechanism when --auth-tokens-file is set — the tokens' PLAIN
// and the SCRAM users, who exist independently of the tokens, as in Kafka —
// and none otherwise, so that a listener without authentication stays
// open to anonymous clients.
func (c Config) kafkaSASLMechanisms() []string {
	if len(c.KafkaSASLMechanisms) > 0 {
		return c.KafkaSASLMechanisms
	}
	if c.AuthTokensFile != "" {
		return kafkawire.Mechanisms
	}
	return nil
}

// longPollsPerPrincipal is --max-long-polls-per-principal, its default
// (0) being a quarter of --max-long-polls, at least 1.
func (c Config) longPollsPerPrincipal() int {
	if c.MaxLongPollsPerPrincipal > 0 {
		return c.MaxLongPollsPerPrincipal
	}
	return max(c.MaxLongPolls/4, min(c.MaxLongPolls, 1))
}

// responseBytesPerPrincipal is --max-response-bytes-per-principal, its
// default (0) being a quarter of --max-response-bytes-in-flight.
func (c Config) responseBytesPerPrincipal() int64 {
	if c.MaxResponseBytesPerPrincipal > 0 {
		return c.MaxResponseBytesPerPrincipal
	}
	return c.MaxResponseBytesInFlight / 4
}

// exposedListeners returns the flags (with their values) of the listeners
// bound beyond loopback without both TLS and authentication (see
// edge.Exposed). Client certificates (--tls-client-ca) authenticate as
// tokens do; a gRPC listener the embedder passed (Options.GRPCListener)
// is not checked.
func exposedListeners(ctx context.Context, cfg Config, grpcOverridden bool) ([]string, error) {
	secured := cfg.TLSCert != "" && (cfg.AuthTokensFile != "" || cfg.TLSClientCA != "")
	var ls []edge.Listen
	if !grpcOverridden {
		ls = append(ls, edge.Listen{Flag: "--grpc-addr", Addr: cfg.GRPCAddr})
	}
	ls = append(ls, edge.Listen{Flag: "--http-addr", Addr: cfg.HTTPAddr})
	exposed, err := edge.Exposed(ctx, secured, ls...)
	if err != nil {
		return exposed, err
	}
	// The Kafka and DCP listeners carry their own credentials too: TLS with
	// SCRAM secures them without tokens or client certificates.
	saslSecured := secured || cfg.TLSCert != "" && len(cfg.kafkaSASLMechanisms()) > 0
	var own []edge.Listen
	if cfg.KafkaAddr != "" {
		own = append(own, edge.Listen{Flag: "--kafka-addr", Addr: cfg.KafkaAddr})
	}
	if cfg.DCPAddr != "" {
		own = append(own, edge.Listen{Flag: "--dcp-addr", Addr: cfg.DCPAddr})
	}
	k, err := edge.Exposed(ctx, saslSecured, own...)
	return append(exposed, k...), err
}
