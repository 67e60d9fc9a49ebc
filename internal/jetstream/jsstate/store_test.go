package jsstate_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	sljs "github.com/sharelog/sharelog/internal/jetstream"
	"github.com/sharelog/sharelog/internal/jetstream/jsstate"
	"github.com/sharelog/sharelog/internal/jetstream/jstest"
	"github.com/sharelog/sharelog/internal/sharestate"
	"github.com/sharelog/sharelog/internal/sharestate/sharestatetest"
)

// cluster is the package's 3-node JetStream cluster (fsync before every
// acknowledgement), shared by every test.
var cluster *jstest.Cluster

func TestMain(m *testing.M) {
	c, err := jstest.Start(jstest.Options{SyncAlways: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the JetStream test cluster:", err)
		os.Exit(1)
	}
	cluster = c
	code := m.Run()
	c.Shutdown()
	os.Exit(code)
}

// medium is one share state bucket.
type medium struct {
	t      *testing.T
	nc     *nats.Conn
	prefix string
}

func newMedium(t *testing.T) medium {
	nc := cluster.Connect(t)
	prefix := cluster.Prefix()
	cluster.Cleanup(t, nc, prefix)
	return medium{t: t, nc: nc, prefix: prefix}
}

func (m medium) Open(t *testing.T) sharestate.Store {
	t.Helper()
	s, err := jsstate.Open(context.Background(), m.nc, jsstate.Options{Prefix: m.prefix, Replicas: 3})
	require.NoError(t, err)
	return s
}

// Crash returns the same bucket: the bucket is the durable medium, and a
// crash of the sharelog process loses only what its store has not written
// yet, which is nothing the suite has waited for.
func (m medium) Crash(*testing.T) sharestatetest.Medium { return m }

// SetFailing makes the bucket refuse writes as a full disk would, by
// lowering its stream's largest accepted message to one byte.
func (m medium) SetFailing(on bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := njs.New(m.nc)
	require.NoError(m.t, err)
	st, err := js.Stream(ctx, "KV_"+sljs.ShareBucket(m.prefix))
	require.NoError(m.t, err)
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = -1
	if on {
		cfg.MaxMsgSize = 1
	}
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(m.t, err)
	return true
}

func TestConformance(t *testing.T) {
	sharestatetest.Run(t, func(t *testing.T) sharestatetest.Medium { return newMedium(t) })
}
