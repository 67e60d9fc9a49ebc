package jsusers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsusers"
	"github.com/sharelog/sharelog/internal/storage/scramcreds"
	"github.com/sharelog/sharelog/internal/storage/scramcreds/scramcredstest"
)

var cluster *jstest.Cluster

func TestMain(m *testing.M) {
	jstest.Main(m, jstest.Options{SyncAlways: true}, func(c *jstest.Cluster) { cluster = c })
}

// The bucket passes the suite the file store passes; "reopen" is another
// instance's connection opening the same bucket.
func TestConformance(t *testing.T) {
	scramcredstest.Run(t, func(t *testing.T) (scramcreds.Store, func() scramcreds.Store) {
		nc := cluster.Connect(t)
		prefix := cluster.Prefix()
		cluster.Cleanup(t, nc, prefix)
		open := func() scramcreds.Store {
			s, err := jsusers.Open(context.Background(), cluster.Connect(t), jsusers.Options{Prefix: prefix, Replicas: 3})
			require.NoError(t, err)
			return s
		}
		return open(), open
	})
}
