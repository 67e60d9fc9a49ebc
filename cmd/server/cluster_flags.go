package main

import (
	"flag"

	"github.com/sharelog/sharelog/internal/app"
)

// clusterFlags declares the cluster mode's flags (docs/cluster.md).
func clusterFlags(fs *flag.FlagSet, c *app.ClusterConfig) {
	fs.StringVar(&c.Store, "store", c.Store, "where the log and share state live: file (the data directory) or jetstream (a NATS JetStream cluster)")
	fs.StringVar(&c.NATSURL, "nats-url", c.NATSURL, "with --store=jetstream: comma-separated NATS server URLs")
	fs.StringVar(&c.NATSCreds, "nats-creds", "", "NATS credentials file (JWT and nkey)")
	fs.StringVar(&c.NATSTLSCA, "nats-tls-ca", "", "PEM CA bundle the NATS servers' certificates must be signed by")
	fs.StringVar(&c.NATSTLSCert, "nats-tls-cert", "", "PEM client certificate for NATS (with --nats-tls-key)")
	fs.StringVar(&c.NATSTLSKey, "nats-tls-key", "", "PEM private key for --nats-tls-cert")
	fs.IntVar(&c.NATSReplicas, "nats-replicas", c.NATSReplicas, "replicas of every JetStream stream and bucket (1, 3 or 5)")
	fs.DurationVar(&c.NATSWriteTimeout, "nats-write-timeout", c.NATSWriteTimeout, "how long one append to a partition stream may wait for JetStream's acknowledgement before it fails with KAFKA_STORAGE_ERROR (retryable), e.g. while the stream elects a leader; /readyz names the partitions whose last append failed (docs/cluster.md)")
	fs.StringVar(&c.NATSPrefix, "nats-prefix", c.NATSPrefix, "prefix of every stream, subject and bucket (two deployments with different prefixes share nothing)")
	fs.StringVar(&c.InstanceID, "instance-id", "", "this instance's name in the cluster (default: hostname:gRPC port)")
	fs.StringVar(&c.AdvertiseAddr, "advertise-addr", "", "the gRPC address other instances forward calls to (default: the bound --grpc-addr)")
	fs.StringVar(&c.Mode, "cluster-mode", c.Mode, "with --store=jetstream: active-standby (one active instance serves, the others forward to it) or partitioned (partitions spread over every live instance)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "ownership lease time to live: a standby takes over this long after the active instance stops renewing; the default rides through a NATS leader election of the lease bucket (up to 9 s) without a failover (docs/cluster.md \"Lease TTL and NATS elections\")")
}
