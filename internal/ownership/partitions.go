package ownership

import (
	"context"
	"errors"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Topics looks a topic up by name (the log store).
type Topics interface {
	TopicInfo(ctx context.Context, name string) (logstore.TopicInfo, error)
}

// Partitions is the broker.Owners of an instance in a partitioned
// cluster: a partition is served here while its gate is open (its lease
// held, its stream read), else by the owner its lease names.
type Partitions struct {
	Gates  *Gates
	Topics Topics
	// Leases is this instance's partition leases and its instance ID;
	// nil leases while the lease bucket is not open yet.
	Leases func() (*cluster.Items, string)
}

var _ broker.Owners = (*Partitions)(nil)

// Owner implements broker.Owners. A topic or partition that does not
// exist is served here, so that the store answers for it.
func (p *Partitions) Owner(ctx context.Context, topic string, part int32) (broker.Owner, error) {
	info, err := p.Topics.TopicInfo(ctx, topic)
	if err != nil || part < 0 || part >= info.Partitions {
		return broker.Owner{Hold: noHold{}}, nil
	}
	item := cluster.PartitionItem(info.ID, part)
	its, self := p.Leases()
	if h, ok := p.Gates.Hold(item); ok {
		return broker.Owner{Hold: partitionHold{h: h, item: item, leases: its}}, nil
	}
	if its == nil {
		return broker.Owner{}, nil // no owner known: broker answers NOT_OWNER
	}
	o, ok := its.Owner(item)
	if !ok || o.Owner.Addr == "" || o.Owner.ID == self {
		return broker.Owner{}, nil
	}
	return broker.Owner{Peer: o.Owner.Addr}, nil
}

type noHold struct{}

func (noHold) Release(error) {}

// partitionHold is a partition's gate held for an append or a purge.
type partitionHold struct {
	h      *Held
	item   string
	leases *cluster.Items
}

// Release ends the hold; a write refused by the stream's fence (another
// instance appended) gives the partition's lease up at once.
func (p partitionHold) Release(err error) {
	epoch := p.h.Epoch
	p.h.Release()
	if errors.Is(err, logstore.ErrFenced) && p.leases != nil {
		p.leases.Fenced(p.item, epoch)
	}
}
