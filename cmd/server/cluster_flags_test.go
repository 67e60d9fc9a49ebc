package main

import (
	"bytes"
	"flag"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/app"
)

func TestClusterFlags(t *testing.T) {
	none := func(string) string { return "" }
	cfg, _, err := parseFlags(nil, none, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, app.DefaultClusterConfig(), cfg.Cluster, "file store by default")
	assert.Equal(t, app.StoreFile, cfg.Cluster.Store)

	env := map[string]string{"SHARELOG_STORE": "jetstream", "SHARELOG_NATS_URL": "nats://a:4222,nats://b:4222",
		"SHARELOG_NATS_REPLICAS": "5", "SHARELOG_NATS_PREFIX": "PROD", "SHARELOG_INSTANCE_ID": "i1",
		"SHARELOG_ADVERTISE_ADDR": "10.0.0.1:9090", "SHARELOG_LEASE_TTL": "3s", "SHARELOG_NATS_CREDS": "/c.creds",
		"SHARELOG_NATS_TLS_CA": "ca.pem", "SHARELOG_NATS_TLS_CERT": "c.pem", "SHARELOG_NATS_TLS_KEY": "k.pem",
		"SHARELOG_CLUSTER_MODE": "partitioned", "SHARELOG_NATS_WRITE_TIMEOUT": "1500ms"}
	cfg, _, err = parseFlags([]string{"--lease-ttl", "7s"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, app.ClusterConfig{Store: "jetstream", NATSURL: "nats://a:4222,nats://b:4222", NATSCreds: "/c.creds",
		NATSTLSCA: "ca.pem", NATSTLSCert: "c.pem", NATSTLSKey: "k.pem", NATSReplicas: 5, NATSPrefix: "PROD",
		InstanceID: "i1", AdvertiseAddr: "10.0.0.1:9090", LeaseTTL: 7 * time.Second, Mode: "partitioned",
		NATSWriteTimeout: 1500 * time.Millisecond}, cfg.Cluster)

	for _, bad := range [][]string{
		{"--store", "s3"},
		{"--store", "jetstream", "--nats-url", " "},
		{"--store", "jetstream", "--nats-replicas", "2"},
		{"--store", "jetstream", "--nats-write-timeout", "10ms"},
		{"--store", "jetstream", "--nats-prefix", "a.b"},
		{"--store", "jetstream", "--lease-ttl", "500ms"},
		{"--store", "jetstream", "--nats-tls-cert", "c.pem"},
		{"--store", "jetstream", "--advertise-addr", "host"},
		{"--store", "jetstream", "--advertise-addr", "host:0"},
		{"--store", "jetstream", "--cluster-mode", "multi"},
	} {
		_, _, err := parseFlags(bad, none, io.Discard)
		assert.Error(t, err, "%v must be refused", bad)
	}

	var help bytes.Buffer
	_, _, err = parseFlags([]string{"--help"}, none, &help)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, f := range []string{"-store", "-nats-url", "-nats-creds", "-nats-tls-ca", "-nats-tls-cert", "-nats-tls-key",
		"-nats-replicas", "-nats-prefix", "-instance-id", "-advertise-addr", "-lease-ttl", "-cluster-mode"} {
		assert.Contains(t, help.String(), f+" ", "--help lists %s", f)
	}
}

// The NATS server is a test-only dependency: the service binary links the
// NATS client alone.
func TestServerBinaryDoesNotLinkNATSServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/sharelog/sharelog/cmd/server").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "github.com/nats-io/nats.go\n")
	for line := range strings.SplitSeq(string(out), "\n") {
		require.False(t, strings.HasPrefix(line, "github.com/nats-io/nats-server"), "cmd/server links %s", line)
	}
}
