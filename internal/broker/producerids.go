package broker

import (
	"context"
	"fmt"
	"sync"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// ProducerIDBlocks is where producer ids are reserved durably: the file
// store's data directory (internal/storage/producerids) or, in cluster
// mode, the cluster's metadata bucket (jslog). Every id of a reserved
// block is used at most once, so a crash wastes the rest of the block and
// never reuses an id.
type ProducerIDBlocks interface {
	// ReserveProducerIDs durably reserves n ids and returns the first;
	// the ids first..first+n-1 are never returned again, by this instance
	// or another one sharing the store.
	ReserveProducerIDs(ctx context.Context, n int64) (first int64, err error)
}

// ProducerIDBlock is how many ids one reservation takes.
const ProducerIDBlock = 1000

// producerIDs hands out the ids of the reserved blocks one by one.
type producerIDs struct {
	mu         sync.Mutex
	next, last int64 // the unused ids of the current block: next..last
}

// AllocatesProducerIDs reports whether InitProducer can answer: whether
// the server was given a place to reserve producer ids (Config.ProducerIDs).
func (l *Log) AllocatesProducerIDs() bool { return l.cfg.ProducerIDs != nil }

// InitProducer allocates a new producer id, with epoch 0, for idempotent
// produces (docs/produce.md). An id is never answered twice, across
// restarts and, in cluster mode, across instances.
func (l *Log) InitProducer(ctx context.Context) (id int64, epoch int16, err error) {
	if l.cfg.ProducerIDs == nil {
		return 0, 0, apierr.New(apierr.Unavailable, "this server does not allocate producer ids")
	}
	p := &l.pids
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next == 0 || p.next > p.last {
		first, err := l.cfg.ProducerIDs.ReserveProducerIDs(ctx, ProducerIDBlock)
		if err != nil {
			return 0, 0, fmt.Errorf("reserve producer ids: %w", err)
		}
		if first <= 0 {
			return 0, 0, fmt.Errorf("reserve producer ids: the store answered the id %d: %w", first, logstore.ErrStorage)
		}
		p.next, p.last = first, first+ProducerIDBlock-1
	}
	id = p.next
	p.next++
	return id, 0, nil
}
