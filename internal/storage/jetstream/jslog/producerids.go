package jslog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// producerIDsKey is the metadata bucket's entry holding the next producer
// id never handed out (decimal), shared by every instance of the cluster
// (docs/produce.md). applyMeta ignores it: it is not a topic.
const producerIDsKey = "producer-ids.next"

// ReserveProducerIDs durably reserves n producer ids for this instance and
// returns the first: a compare-and-set of the bucket's counter on the
// revision read, retried when another instance reserved meanwhile, so two
// instances never get the same block. The entry is replicated like the
// topic metadata; an answer means a quorum has it. A missing entry (a new
// cluster) starts at the current time in milliseconds times 1000, as the
// file counter does (internal/storage/producerids).
func (s *Store) ReserveProducerIDs(ctx context.Context, n int64) (int64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("reserve %d producer ids: %w", n, logstore.ErrInvalidArgument)
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	for {
		var first int64
		var rev uint64
		e, err := s.kv.Get(octx, producerIDsKey)
		switch {
		case errors.Is(err, njs.ErrKeyNotFound):
			first = max(1, time.Now().UnixMilli()*1000)
		case err != nil:
			return 0, sljs.Wrap(ctx, "read the producer id counter", err, logstore.ErrStorage)
		default:
			if first, err = strconv.ParseInt(string(e.Value()), 10, 64); err != nil || first <= 0 {
				return 0, fmt.Errorf("the producer id counter %s holds %q, not a positive id: %w", producerIDsKey, e.Value(), logstore.ErrStorage)
			}
			rev = e.Revision()
		}
		if first > math.MaxInt64-n {
			return 0, fmt.Errorf("producer ids are exhausted (next %d): %w", first, logstore.ErrStorage)
		}
		val := []byte(strconv.FormatInt(first+n, 10))
		if rev == 0 {
			_, err = s.kv.Create(octx, producerIDsKey, val)
		} else {
			_, err = s.kv.Update(octx, producerIDsKey, val, rev)
		}
		switch {
		case err == nil:
			return first, nil
		case errors.Is(err, njs.ErrKeyExists) || sljs.IsWrongLastSequence(err):
			continue // another instance reserved first: read again
		default:
			return 0, sljs.Wrap(ctx, "reserve producer ids", err, logstore.ErrStorage)
		}
	}
}
