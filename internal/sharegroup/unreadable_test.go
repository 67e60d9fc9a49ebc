package sharegroup

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// rangeCorrupt is a corruption error that names its range, as the log
// store's does (a CorruptRange method).
type rangeCorrupt struct{ from, to int64 }

func (e *rangeCorrupt) Error() string {
	return fmt.Sprintf("offsets %d-%d: %v", e.from, e.to, logstore.ErrCorrupt)
}
func (e *rangeCorrupt) Unwrap() error                  { return logstore.ErrCorrupt }
func (e *rangeCorrupt) CorruptRange() (from, to int64) { return e.from, e.to }

// corruptStore fails every read that touches [from, to] with a corruption
// error, naming the range if withRange.
type corruptStore struct {
	logstore.Store
	mu        sync.Mutex
	from, to  int64
	withRange bool
	reads     int
}

func (c *corruptStore) Read(ctx context.Context, topic string, part int32, off int64, n, maxBytes int) ([]logstore.Record, error) {
	c.mu.Lock()
	from, to, withRange := c.from, c.to, c.withRange
	c.reads++
	c.mu.Unlock()
	if off <= to && off+int64(n)-1 >= from {
		if withRange {
			return nil, fmt.Errorf("reading %s/%d: %w", topic, part, &rangeCorrupt{from, to})
		}
		return nil, fmt.Errorf("reading %s/%d at %d: %w", topic, part, off, logstore.ErrCorrupt)
	}
	return c.Store.Read(ctx, topic, part, off, n, maxBytes)
}

// Unreadable offsets are archived (logged, counted) and acquisition
// delivers the rest: the group is not wedged.
func TestUnreadableRecordsArchived(t *testing.T) {
	for _, withRange := range []bool{true, false} {
		t.Run(fmt.Sprintf("range=%v", withRange), func(t *testing.T) {
			mem := logstore.NewMem()
			t.Cleanup(func() { mem.Close() })
			cs := &corruptStore{Store: mem, from: 5, to: 7, withRange: withRange}
			e := newEnvOn(t, cs, t.TempDir(), nil)
			e.topic("t", 1)
			x := tp("t", 0)
			e.update(GroupConfig{AutoOffsetReset: str("earliest")})
			e.produce("t", 0, 20, 10)
			resp := e.open("m", x)
			require.Equal(t, apierr.None, part(t, resp, x).ErrorCode, part(t, resp, x).ErrorMessage)
			assert.Equal(t, []AcquiredRange{rng(0, 4, 1), rng(8, 19, 1)}, acquired(t, resp, x))
			assert.Len(t, part(t, resp, x).Records, 17)
			assert.Equal(t, "spso=0 [0-4 ACQUIRED(1)] [5-7 ARCHIVED(0)] [8-19 ACQUIRED(1)]", e.state(x))
			assert.Equal(t, uint64(3), e.m.Stats().UnreadableArchived)

			// Acknowledged: SPSO passes the archived range; new records flow.
			require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 4, AckAccept), batch(8, 19, AckAccept))).Partitions[0].ErrorCode)
			assert.Equal(t, "spso=20", e.state(x))
			e.produce("t", 0, 3, 10)
			assert.Equal(t, []AcquiredRange{rng(20, 22, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))
			assert.Equal(t, uint64(3), e.m.Stats().UnreadableArchived, "archived once, never read again")
		})
	}
}

// A long-poll whose dry run meets only unreadable records still ends: the
// final attempt archives them.
func TestUnreadableRecordsLongPoll(t *testing.T) {
	mem := logstore.NewMem()
	t.Cleanup(func() { mem.Close() })
	cs := &corruptStore{Store: mem, from: 0, to: 9, withRange: true}
	e := newEnvOn(t, cs, t.TempDir(), nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.produce("t", 0, 12, 10)
	resp, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "m", MaxWaitMs: 50, MinBytes: 1000, Partitions: entries(x)})
	require.NoError(t, err)
	assert.Equal(t, []AcquiredRange{rng(10, 11, 1)}, acquired(t, resp, x))
	assert.Equal(t, uint64(10), e.m.Stats().UnreadableArchived)
}
