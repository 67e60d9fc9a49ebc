package changestream

// Routing by partition owner (docs/cluster.md "Phase 2"): in a cluster
// whose instances each serve a share of the partitions, a change stream
// of a partition served elsewhere is streamed from its owner, which runs
// the call (validation after the request's own fields, the limits, the
// events) and whose events and errors the caller gets as the owner gave
// them. A single node has no Owners: every stream is local.

import (
	"context"

	"github.com/sharelog/sharelog/internal/broker"
)

// Peers streams changes from another instance, the owner of the partition
// named, as the caller of this instance (its identity goes along). A peer
// that cannot be reached answers OWNER_UNREACHABLE.
type Peers interface {
	// Stream is [Manager.Stream] at the peer: req.Started is called when
	// the peer started the stream, every event the peer sent is handed to
	// send in order, send is flushed where the peer's transport flushed
	// (one message of events), and the peer's error is returned as it
	// answered it.
	Stream(ctx context.Context, peer string, req Request, send Sender) error
}

// ownerOf is the address of the peer that serves req's partition, "" when
// it is this instance's (always, without Owners). The partition's hold is
// released at once: a stream is a read, and the partition may move while
// it runs (the stream then ends as the store's watch tells it).
func (m *Manager) ownerOf(ctx context.Context, req *Request) (string, error) {
	if m.cfg.Owners == nil {
		return "", nil
	}
	hold, peer, err := broker.Locate(ctx, m.cfg.Owners, req.Topic, req.Partition)
	if err != nil {
		return "", err
	}
	if hold != nil {
		hold.Release(nil)
		return "", nil
	}
	return peer, nil
}
