package sharegroup

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// A transaction marker is never delivered: it is archived as an offset
// without a record, whatever the isolation level (docs/kafka.md
// "Transactions").
func TestMarkersAreNeverDelivered(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	recs := []logstore.Record{
		{Value: []byte("plain")},
		{Value: []byte("in-txn"), ProducerID: 7, Sequence: 0, Transactional: true},
		{Value: []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, ProducerID: 7, Sequence: -1, Transactional: true, Control: true},
		{Value: []byte("after")},
	}
	_, err := e.store.Append(context.Background(), "t", 0, recs)
	require.NoError(t, err)
	e.join("m", x)
	r := e.fetch("m", FetchRequest{})
	assert.Equal(t, []int64{0, 1, 3}, offsetsOf(got(r, x)), "offset 2 is the marker")
	for _, p := range r.Partitions {
		for _, rec := range p.Records {
			assert.False(t, rec.Control, "offset %d delivered a marker", rec.Offset)
		}
	}
}
