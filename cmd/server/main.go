// Command server runs sharelog: the log store, share groups and change
// streams behind gRPC (default 127.0.0.1:9090) and a JSON/REST gateway
// (default 127.0.0.1:8080). With no flags it keeps its data in ./data.
//
// Every flag has an environment variable SHARELOG_<FLAG> (upper case, dashes
// as underscores); a flag on the command line wins over the variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sharelog/sharelog/internal/app"
)

func main() {
	if len(os.Args) > 0 && os.Args[0] != "" {
		progName = filepath.Base(os.Args[0])
	}
	if err := run(os.Args[1:], os.Getenv, os.Stderr); err != nil {
		switch {
		case errors.Is(err, flag.ErrHelp):
			os.Exit(0)
		case errors.Is(err, errShowVersion):
			fmt.Println(progName, versionString())
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, progName+":", err)
		os.Exit(1)
	}
}

func run(args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, logCfg, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(logCfg, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	srv, err := app.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	// SIGHUP re-reads --auth-tokens-file (it is also watched for changes).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
wait:
	for {
		select {
		case <-hup:
			_ = srv.ReloadAuth() // logged; the tokens in force stay
		case <-ctx.Done():
			log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
			break wait
		case <-srv.Done():
			break wait
		}
	}
	closeErr := srv.Close()
	if err := srv.Err(); err != nil {
		return err
	}
	if closeErr != nil {
		return closeErr
	}
	log.Info("stopped")
	return nil
}

type logConfig struct{ level, format string }

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (app.Config, logConfig, error) {
	cfg := app.DefaultConfig()
	var lc logConfig
	fs, showVersion := newFlagSet(&cfg, &lc, stderr)
	if err := fs.Parse(args); err != nil {
		return cfg, lc, err
	}
	if *showVersion {
		return cfg, lc, errShowVersion
	}
	if fs.NArg() > 0 {
		return cfg, lc, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	// Environment variables fill the flags not given on the command line.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || envErr != nil || f.Name == "version" {
			return
		}
		name := "SHARELOG_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return cfg, lc, envErr
	}
	return cfg, lc, cfg.Validate()
}

// newFlagSet defines every server flag on cfg and lc (docs/configuration.md
// lists them; TestConfigurationDoc keeps that page current).
func newFlagSet(cfg *app.Config, lc *logConfig, stderr io.Writer) (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet(progName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s [flags]\n", progName)
		fmt.Fprintln(stderr, "Runs the sharelog server: the log, share groups and change streams over gRPC and a REST gateway.")
		fmt.Fprintln(stderr, "Every flag can also be set by the environment variable SHARELOG_<FLAG>")
		fmt.Fprintln(stderr, "(upper case, dashes as underscores, e.g. SHARELOG_MAX_CONNECTIONS); a flag wins over its variable.")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "where the log and all state live")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "gRPC listen address (port 0 = pick one and log it)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP listen address: REST gateway, OpenAPI, health, metrics")
	fs.StringVar(&cfg.Fsync, "fsync", cfg.Fsync, "always (fsync before acknowledging a write), interval, or never")
	fs.DurationVar(&cfg.FsyncInterval, "fsync-interval", cfg.FsyncInterval, "fsync period with --fsync=interval")
	fs.Int64Var(&cfg.SegmentBytes, "segment-bytes", cfg.SegmentBytes, "default segment size for new topics")
	fs.IntVar(&cfg.MaxOpenSegments, "max-open-segments", cfg.MaxOpenSegments, "segment files held open at once; idle ones beyond it are closed (0 = half of the RLIMIT_NOFILE soft limit, which the server raises to the hard limit at start)")
	fs.IntVar(&cfg.MaxPartitions, "max-partitions", cfg.MaxPartitions, "partitions of all topics together; a CreateTopic beyond it is refused with POLICY_VIOLATION")
	fs.Int64Var(&cfg.CompactionMaxBytesPerSec, "compaction-max-bytes-per-sec", cfg.CompactionMaxBytesPerSec, "log compaction disk I/O limit in bytes per second (read plus written); 0 = unlimited")
	fs.DurationVar(&cfg.CompactionInterval, "compaction-interval", cfg.CompactionInterval, "how often the cleaner looks for compacted partitions dirty enough to clean")
	fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", cfg.MaxRequestBytes, "largest request accepted (gRPC and REST)")
	fs.IntVar(&cfg.MaxShareSessions, "max-share-sessions", cfg.MaxShareSessions, "share session cache capacity")
	fs.DurationVar(&cfg.ShareSessionIdleTimeout, "share-session-idle-timeout", cfg.ShareSessionIdleTimeout, "evict a share session idle this long and release its records")
	fs.DurationVar(&cfg.ShareRecordLockDuration, "share-record-lock-duration", cfg.ShareRecordLockDuration, "default acquisition lock duration")
	fs.DurationVar(&cfg.ShareMinRecordLockDuration, "share-min-record-lock-duration", cfg.ShareMinRecordLockDuration, "lower bound of a group's record_lock_duration_ms")
	fs.DurationVar(&cfg.ShareMaxRecordLockDuration, "share-max-record-lock-duration", cfg.ShareMaxRecordLockDuration, "upper bound of a group's record_lock_duration_ms")
	fs.IntVar(&cfg.ShareDeliveryCountLimit, "share-delivery-count-limit", cfg.ShareDeliveryCountLimit, "default delivery count limit (2..10)")
	fs.IntVar(&cfg.SharePartitionMaxRecordLocks, "share-partition-max-record-locks", cfg.SharePartitionMaxRecordLocks, "default in-flight records per share-partition (100..10000)")
	fs.IntVar(&cfg.ShareGroupMaxSize, "share-group-max-size", cfg.ShareGroupMaxSize, "members per share group")
	fs.DurationVar(&cfg.ShareSessionTimeout, "share-session-timeout", cfg.ShareSessionTimeout, "member session timeout")
	fs.DurationVar(&cfg.ShareHeartbeatInterval, "share-heartbeat-interval", cfg.ShareHeartbeatInterval, "member heartbeat interval")
	fs.BoolVar(&cfg.DLQAutoCreateTopics, "dlq-auto-create-topics", cfg.DLQAutoCreateTopics, "create a share group's missing dead-letter topic (1 partition) at its first copy; names must then start with --dlq-topic-prefix")
	fs.StringVar(&cfg.DLQTopicPrefix, "dlq-topic-prefix", cfg.DLQTopicPrefix, "with --dlq-auto-create-topics, the prefix every dead_letter_topic must have")
	fs.BoolVar(&cfg.RepairShareState, "repair-share-state", cfg.RepairShareState, "at start, accept lost share state: bring its share-partitions online with what is readable (damaged files go to quarantine)")
	fs.BoolVar(&cfg.RepairAcceptLoss, "repair-accept-loss", cfg.RepairAcceptLoss, "at start, accept what the data directory manifest shows lost from the log: forget missing topics, continue partitions whose last records are gone at their recorded high watermark (no offset is reused)")
	fs.StringVar(&cfg.OSOBackfill, "oso-backfill", cfg.OSOBackfill, "OSO snapshots for full backfills: auto, enabled or disabled")
	fs.Float64Var(&cfg.OSOAutoSmallRatio, "oso-auto-small-ratio", cfg.OSOAutoSmallRatio, "auto: max matching keys / records for OSO with small records")
	fs.Float64Var(&cfg.OSOAutoLargeRatio, "oso-auto-large-ratio", cfg.OSOAutoLargeRatio, "auto: the same with large records")
	fs.IntVar(&cfg.OSOAutoSmallRecordBytes, "oso-auto-small-record-bytes", cfg.OSOAutoSmallRecordBytes, "auto: mean stored record size separating small from large")
	fs.IntVar(&cfg.MaxChangeStreams, "max-change-streams", cfg.MaxChangeStreams, "open StreamChanges calls server-wide")
	fs.IntVar(&cfg.MaxConnections, "max-connections", cfg.MaxConnections, "open connections per listener (gRPC, HTTP and Kafka each); beyond it a new connection is closed at once")
	fs.IntVar(&cfg.MaxConnectionsPerIP, "max-connections-per-ip", cfg.MaxConnectionsPerIP, "open connections per listener from one client IP")
	fs.DurationVar(&cfg.HTTPIdleTimeout, "http-idle-timeout", cfg.HTTPIdleTimeout, "close an idle keep-alive HTTP connection after this")
	fs.DurationVar(&cfg.HTTPReadTimeout, "http-read-timeout", cfg.HTTPReadTimeout, "a REST request body must arrive within this")
	fs.IntVar(&cfg.GRPCMaxConcurrentStreams, "grpc-max-concurrent-streams", cfg.GRPCMaxConcurrentStreams, "concurrent calls per gRPC connection")
	fs.IntVar(&cfg.HealthProbesPerSec, "health-probes-per-sec", cfg.HealthProbesPerSec, "unauthenticated health probes (/healthz, /readyz, gRPC health) per second and client IP, burst twice that; 0 = no limit")
	fs.IntVar(&cfg.MaxLongPolls, "max-long-polls", cfg.MaxLongPolls, "Fetch/ShareFetch calls waiting for records at once; beyond it they return at once, empty")
	fs.IntVar(&cfg.MaxLongPollsPerPrincipal, "max-long-polls-per-principal", 0, "long polls one client may hold; beyond it its own calls return at once (0 = a quarter of --max-long-polls)")
	fs.Int64Var(&cfg.MaxResponseBytesInFlight, "max-response-bytes-in-flight", cfg.MaxResponseBytesInFlight, "estimated bytes of all responses carrying records (Fetch, ShareFetch, change streams, Kafka) being built or written at once")
	fs.Int64Var(&cfg.MaxResponseBytesPerPrincipal, "max-response-bytes-per-principal", 0, "the share of --max-response-bytes-in-flight one client may hold; beyond it its own fetches wait, then are refused (0 = a quarter)")
	fs.Int64Var(&cfg.MaxFetchBytes, "max-fetch-bytes", cfg.MaxFetchBytes, "record bytes in one fetch response at most, whatever it asks for (its first record may exceed it), as Kafka's fetch.max.bytes")
	fs.IntVar(&cfg.MaxShareSessionsPerPrincipal, "max-share-sessions-per-principal", 0, "share sessions one client may hold (0 = half of --max-share-sessions)")
	fs.IntVar(&cfg.MaxChangeStreamsPerPrincipal, "max-change-streams-per-principal", 0, "change streams one client may have open (0 = half of --max-change-streams)")
	fs.BoolVar(&cfg.InsecureAllowRemote, "insecure-allow-remote", false, "allow a non-loopback listener without both TLS and --auth-tokens-file (logged as a warning every hour)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate: serve gRPC and HTTP over TLS")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.StringVar(&cfg.TLSClientCA, "tls-client-ca", "", "PEM CA bundle: require client certificates signed by it (mTLS)")
	fs.StringVar(&cfg.AuthTokensFile, "auth-tokens-file", "", "file of bearer tokens, lines '<name> <token>', '<name> sha256:<hex>' or '<token>': require 'authorization: Bearer <token>'; re-read on change and on SIGHUP (docs/principals.md)")
	fs.StringVar(&cfg.TrustedProxies, "trusted-proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For names the client host (client_host); others' is ignored")
	fs.StringVar(&cfg.Authorizer, "authorizer", cfg.Authorizer, "none (every caller may do everything) or acl (ACL bindings in the data dir decide; see docs/security.md)")
	fs.Func("super-users", "comma-separated principals allowed everything with --authorizer acl, e.g. User:admin,User:ops", func(v string) error {
		cfg.SuperUsers = nil
		for u := range strings.SplitSeq(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				cfg.SuperUsers = append(cfg.SuperUsers, u)
			}
		}
		return nil
	})
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long shutdown waits for in-flight calls")
	fs.StringVar(&cfg.KafkaAddr, "kafka-addr", cfg.KafkaAddr, "Kafka wire-protocol listen address, e.g. 127.0.0.1:9092 (empty = off)")
	fs.StringVar(&cfg.KafkaAdvertisedAddr, "kafka-advertised-addr", cfg.KafkaAdvertisedAddr, "host:port Kafka clients are told to connect to (default: the listen address)")
	fs.StringVar(&cfg.DCPAddr, "dcp-addr", cfg.DCPAddr, "DCP (Couchbase Database Change Protocol) listen address for the change streams, e.g. 127.0.0.1:11210 (empty = off; docs/dcp.md)")
	fs.StringVar(&cfg.DCPAdvertisedAddr, "dcp-advertised-addr", cfg.DCPAdvertisedAddr, "host:port the DCP bucket config names for this node (default: $HOST, the address the client connected to, and the bound port)")
	fs.BoolVar(&cfg.KafkaAutoCreateTopics, "kafka-auto-create-topics", cfg.KafkaAutoCreateTopics, "create unknown topics named by Kafka Metadata or Produce requests")
	fs.IntVar(&cfg.KafkaDefaultPartitions, "kafka-default-partitions", cfg.KafkaDefaultPartitions, "partitions of topics created by Kafka clients without a count")
	fs.IntVar(&cfg.KafkaMaxRequestBytes, "kafka-max-request-bytes", cfg.KafkaMaxRequestBytes, "largest Kafka request frame, and largest decompressed record data in one request")
	fs.DurationVar(&cfg.KafkaIdleTimeout, "kafka-idle-timeout", cfg.KafkaIdleTimeout, "close a Kafka connection with no request (and no response being sent) for this long, as Kafka's connections.max.idle.ms")
	fs.DurationVar(&cfg.KafkaSASLSessionLifetime, "kafka-sasl-session-lifetime", cfg.KafkaSASLSessionLifetime, "how long a Kafka SASL login holds; SaslAuthenticate v1+ tells the client, which re-authenticates before it ends (KIP-368); a connection used past it is closed")
	fs.Func("kafka-sasl-mechanisms", "comma-separated SASL mechanisms of the Kafka listener: PLAIN (needs --auth-tokens-file), SCRAM-SHA-256, SCRAM-SHA-512 (the SCRAM users); default: all three with --auth-tokens-file, none without. With any, a connection its client certificate does not authenticate must log in", func(v string) error {
		cfg.KafkaSASLMechanisms = nil
		for m := range strings.SplitSeq(v, ",") {
			if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
				cfg.KafkaSASLMechanisms = append(cfg.KafkaSASLMechanisms, m)
			}
		}
		return nil
	})
	fs.DurationVar(&cfg.KafkaRequestTimeout, "kafka-request-timeout", cfg.KafkaRequestTimeout, "close a Kafka connection whose request's bytes do not all arrive within this, from its first byte")
	fs.DurationVar(&cfg.TransactionMaxTimeout, "transaction-max-timeout", cfg.TransactionMaxTimeout, "the longest transaction.timeout.ms a Kafka transactional producer may ask for, as Kafka's transaction.max.timeout.ms; a transaction open longer than its timeout is aborted by the coordinator (docs/kafka.md \"Transactions\")")
	fs.DurationVar(&cfg.TransactionalIDExpiration, "transactional-id-expiration", cfg.TransactionalIDExpiration, "how long a Kafka transactional id with no transaction open keeps its state after its last change, as Kafka's transactional.id.expiration.ms; then it is forgotten and its producer is a new one (docs/kafka.md \"Transactions\")")
	fs.DurationVar(&cfg.GroupInitialRebalanceDelay, "group-initial-rebalance-delay", cfg.GroupInitialRebalanceDelay, "how long the first rebalance of an empty consumer group waits for more members, as Kafka's group.initial.rebalance.delay.ms (0 = none)")
	fs.DurationVar(&cfg.GroupConsumerHeartbeatInterval, "group-consumer-heartbeat-interval", cfg.GroupConsumerHeartbeatInterval, "the heartbeat interval the coordinator tells consumer-protocol (KIP-848) group members, as Kafka's group.consumer.heartbeat.interval.ms")
	fs.DurationVar(&cfg.GroupConsumerSessionTimeout, "group-consumer-session-timeout", cfg.GroupConsumerSessionTimeout, "how long a consumer-protocol (KIP-848) group member may go without a heartbeat before it is removed, as Kafka's group.consumer.session.timeout.ms")
	fs.DurationVar(&cfg.OffsetsRetention, "offsets-retention", cfg.OffsetsRetention, "how long the committed offsets of an empty consumer group are kept, as Kafka's offsets.retention.minutes")
	clusterFlags(fs, &cfg.Cluster)
	fs.StringVar(&lc.level, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&lc.format, "log-format", "text", "text or json")
	showVersion := fs.Bool("version", false, "print the version and exit (no environment variable)")
	return fs, showVersion
}

func newLogger(lc logConfig, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(lc.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch lc.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format must be text or json, got %q", lc.format)
	}
}
