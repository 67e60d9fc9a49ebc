package app

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
)

// Store backends (--store).
const (
	StoreFile      = "file"
	StoreJetStream = "jetstream"
)

// Cluster modes (--cluster-mode), also what DescribeCluster reports.
const (
	// ModeSingle is the file store: one instance owns everything.
	ModeSingle = "single"
	// ModeActiveStandby is phase 1: one active instance owns everything.
	ModeActiveStandby = "active-standby"
	// ModePartitioned is phase 2: partitions and share groups are spread
	// over the live instances.
	ModePartitioned = "partitioned"
)

// ClusterConfig is the cluster mode's part of Config (docs/cluster.md).
type ClusterConfig struct {
	Store         string        // file | jetstream
	NATSURL       string        // comma-separated NATS server URLs
	NATSCreds     string        // NATS credentials file
	NATSTLSCA     string        // PEM CA for the NATS servers' certificates
	NATSTLSCert   string        // PEM client certificate for NATS
	NATSTLSKey    string        // its key
	NATSReplicas  int           // replicas of every stream and bucket
	NATSPrefix    string        // prefix of every stream, subject and bucket
	InstanceID    string        // default: hostname + ":" + gRPC port
	AdvertiseAddr string        // gRPC address other instances forward to; default: the bound gRPC address
	LeaseTTL      time.Duration // lease time to live
	Mode          string        // active-standby | partitioned
	// NATSWriteTimeout bounds each write to a partition stream: one not
	// acknowledged by JetStream within it fails with KAFKA_STORAGE_ERROR
	// (retryable) instead of waiting for the client's deadline, e.g.
	// while the stream elects a leader (--nats-write-timeout).
	NATSWriteTimeout time.Duration
}

// DefaultClusterConfig is the file store; the NATS settings are the
// defaults cluster mode starts with.
func DefaultClusterConfig() ClusterConfig {
	return ClusterConfig{Store: StoreFile, NATSURL: "nats://127.0.0.1:4222", NATSReplicas: 3, NATSPrefix: sljs.DefaultPrefix,
		LeaseTTL: 15 * time.Second, Mode: ModeActiveStandby, NATSWriteTimeout: 2 * time.Second}
}

func (c ClusterConfig) validate(bad func(format string, args ...any)) {
	switch c.Store {
	case StoreFile:
		return
	case StoreJetStream:
	default:
		bad("--store must be file or jetstream, got %q", c.Store)
		return
	}
	if c.Mode != ModeActiveStandby && c.Mode != ModePartitioned {
		bad("--cluster-mode must be active-standby or partitioned, got %q", c.Mode)
	}
	if strings.TrimSpace(c.NATSURL) == "" {
		bad("--nats-url must not be empty with --store=jetstream")
	}
	if c.NATSReplicas != 1 && c.NATSReplicas != 3 && c.NATSReplicas != 5 {
		bad("--nats-replicas must be 1, 3 or 5, got %d", c.NATSReplicas)
	}
	if err := sljs.CheckPrefix(c.NATSPrefix); err != nil {
		bad("--nats-prefix: %v", err)
	}
	if c.NATSWriteTimeout < 100*time.Millisecond || c.NATSWriteTimeout > time.Minute {
		bad("--nats-write-timeout must be between 100ms and 1m, got %v", c.NATSWriteTimeout)
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL > time.Minute {
		bad("--lease-ttl must be between 1s and 1m, got %v", c.LeaseTTL)
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		bad("--nats-tls-cert and --nats-tls-key go together")
	}
	if c.AdvertiseAddr != "" {
		if _, port, err := net.SplitHostPort(c.AdvertiseAddr); err != nil || port == "0" {
			bad("--advertise-addr must be host:port with a fixed port, got %q", c.AdvertiseAddr)
		}
	}
}

// instanceID is c.InstanceID or, by default, the hostname and the bound
// gRPC port.
func (c ClusterConfig) instanceID(grpcAddr string) string {
	if c.InstanceID != "" {
		return c.InstanceID
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "sharelog"
	}
	_, port, _ := net.SplitHostPort(grpcAddr)
	return fmt.Sprintf("%s:%s", host, port)
}
