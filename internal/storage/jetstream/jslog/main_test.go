package jslog

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/logstore/logstoretest"
)

// cluster is the package's 3-node JetStream cluster (fsync before every
// acknowledgement), shared by every test.
var cluster *jstest.Cluster

// The tests share one JetStream cluster; once it is shut down, nothing
// they started (connections, watchers, loops) may still run.
func TestMain(m *testing.M) {
	jstest.Main(m, jstest.Options{SyncAlways: true}, func(c *jstest.Cluster) { cluster = c })
}

// newStore opens a store with its own prefix on a connection of its own,
// closed (and its streams deleted) at t's cleanup.
func newStore(t *testing.T) *Store {
	t.Helper()
	nc := cluster.Connect(t)
	prefix := cluster.Prefix()
	cluster.Cleanup(t, nc, prefix)
	return openStore(t, nc, Options{Prefix: prefix, Replicas: 3})
}

// openStore opens a store on nc with o, closed at t's cleanup.
func openStore(t *testing.T, nc *nats.Conn, o Options) *Store {
	t.Helper()
	if o.Timeout == 0 {
		// The parallel conformance cases create many replicated streams at
		// once on three in-process servers under -race on two cores: the
		// meta layer can take longer than the production default of 10 s.
		o.Timeout = 30 * time.Second
	}
	s, err := Open(context.Background(), nc, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	logstoretest.Run(t, func(t *testing.T) logstore.Store { return newStore(t) })
}

func TestKeyIndexConformance(t *testing.T) {
	logstoretest.RunKeyIndex(t, func(t *testing.T) (logstore.Store, logstore.KeyIndexer) {
		s := newStore(t)
		return s, s
	})
}
