package jsoffsets

import (
	"context"

	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
)

// syncKey is the key every read writes before it reads: the read is
// complete once its watch has delivered this write (doc.go "Reads"). Its
// value is empty; it names no group.
const syncKey = "sync"

// read returns the last entry of every key filter matches (a delete
// marker included), with every write acknowledged before the call
// (sljs.ReadSynced).
func (s *Store) read(ctx context.Context, filter string) (map[string]njs.KeyValueEntry, error) {
	return sljs.ReadSynced(ctx, s.kv, filter, syncKey)
}
