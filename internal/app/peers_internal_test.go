package app

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// A transactional batch or a marker is never forwarded over the gRPC
// Produce, which would drop their bits: NOT_OWNER, before any peer is
// dialed (there is none here: the node is nil).
func TestForwardRefusesTransactionalAppends(t *testing.T) {
	for name, rec := range map[string]logstore.Record{
		"transactional": {ProducerID: 3, Sequence: 0, Transactional: true, Value: []byte("v")},
		"marker":        {ProducerID: 3, Sequence: -1, Transactional: true, Control: true, Value: broker.MarkerValue(true, 0)},
	} {
		_, err := grpcPeers{}.Append(context.Background(), "peer:1", "t", 0, []logstore.Record{rec})
		assert.Equal(t, apierr.NotOwner, broker.ReasonOf(err), name)
	}
}
