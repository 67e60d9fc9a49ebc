package e2e

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// TestKafkaListenerWiring: with --kafka-addr the server serves Kafka over
// the same store as gRPC, and Close stops the listener.
func TestKafkaListenerWiring(t *testing.T) {
	st := newStack(t, app.Options{}, func(c *app.Config) { c.KafkaAddr = "127.0.0.1:0" })
	addr := st.srv.KafkaAddr()
	require.NotEmpty(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := st.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "k", Partitions: 1})
	require.NoError(t, err)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("k"))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte("a"), Value: []byte("via kafka")}).FirstErr())

	resp, err := st.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "k", Partition: 0, Offset: 0})
	require.NoError(t, err)
	require.Len(t, resp.GetRecords(), 1)
	require.Equal(t, "via kafka", string(resp.GetRecords()[0].GetValue()))

	require.NoError(t, st.srv.Close())
	_, err = net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err, "the Kafka listener still accepts after Close")
}

func TestKafkaConfigValidation(t *testing.T) {
	base := app.DefaultConfig()
	for name, tc := range map[string]struct {
		mutate func(*app.Config)
		want   string
	}{
		"partitions":         {func(c *app.Config) { c.KafkaDefaultPartitions = 0 }, "--kafka-default-partitions"},
		"max request bytes":  {func(c *app.Config) { c.KafkaMaxRequestBytes = 10 }, "--kafka-max-request-bytes"},
		"advertised alone":   {func(c *app.Config) { c.KafkaAdvertisedAddr = "h:1" }, "needs --kafka-addr"},
		"advertised no port": {func(c *app.Config) { c.KafkaAddr, c.KafkaAdvertisedAddr = "127.0.0.1:0", "host" }, "--kafka-advertised-addr"},
		"sasl lifetime":      {func(c *app.Config) { c.KafkaSASLSessionLifetime = time.Millisecond }, "--kafka-sasl-session-lifetime"},
	} {
		cfg := base
		tc.mutate(&cfg)
		err := cfg.Validate()
		require.Error(t, err, name)
		require.True(t, strings.Contains(err.Error(), tc.want), "%s: %v", name, err)
	}
	cfg := base
	cfg.KafkaAddr, cfg.KafkaAdvertisedAddr = "127.0.0.1:0", "broker.example:9092"
	require.NoError(t, cfg.Validate())
	// The Kafka listener serves TLS and SASL (docs/kafka.md "Security").
	cfg.TLSCert, cfg.TLSKey, cfg.AuthTokensFile = "c.pem", "k.pem", "t"
	require.NoError(t, cfg.Validate())
}

// TestKafkaListenerExposure: a non-loopback --kafka-addr is refused like
// any listener served in the clear.
func TestKafkaListenerExposure(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.KafkaAddr = "127.0.0.1:0", "127.0.0.1:0", "0.0.0.0:0"
	_, err := app.Start(context.Background(), cfg, nil)
	require.ErrorContains(t, err, "--kafka-addr")
}

// TestKafkaListenerConnectionLimit: --max-connections applies to the Kafka
// listener too; a connection over it is closed at once.
func TestKafkaListenerConnectionLimit(t *testing.T) {
	st := newStack(t, app.Options{}, func(c *app.Config) { c.KafkaAddr, c.MaxConnections = "127.0.0.1:0", 1 })
	first, err := net.Dial("tcp", st.srv.KafkaAddr())
	require.NoError(t, err)
	defer first.Close()
	// ApiVersions v0 on the first connection is answered.
	_, err = first.Write([]byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff})
	require.NoError(t, err)
	require.NoError(t, first.SetDeadline(time.Now().Add(10*time.Second)))
	var size [4]byte
	_, err = first.Read(size[:])
	require.NoError(t, err)

	// The listener accepts the second connection and closes it at once: the
	// client sees that as a reset while dialling or as an error on its first
	// read, depending on timing. Either way it is never served.
	second, err := net.Dial("tcp", st.srv.KafkaAddr())
	if err != nil {
		require.ErrorIs(t, err, syscall.ECONNRESET, "a connection over --max-connections must be closed")
		return
	}
	defer second.Close()
	require.NoError(t, second.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = second.Read(size[:])
	require.Error(t, err, "a connection over --max-connections must be closed")
}
