package broker

// Routing by partition owner (docs/cluster.md "Phase 2"): in a cluster
// whose instances each serve a share of the partitions, the log API
// serves the partitions this instance owns and asks the owner of every
// other one; topics are created and deleted by one instance, the
// controller, and the others ask it. A single node has no Owners and no
// Controller: everything is local.

import (
	"context"
	"fmt"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Owners says which instance serves each partition. It is consulted at
// the entry of Produce, Fetch, ListOffsets and Purge (and of a change
// stream, internal/changestream).
type Owners interface {
	// Owner is who serves topic's partition part right now: this instance
	// (Owner.Hold set) or a peer (Owner.Peer). A partition that does not
	// exist is this instance's, so that the store answers for it. The
	// error (a retryable NOT_OWNER) says that no instance serves it.
	Owner(ctx context.Context, topic string, part int32) (Owner, error)
}

// Owner is the owner of one partition as [Owners.Owner] found it.
type Owner struct {
	// Hold, when this instance serves the partition, keeps it here until
	// released: appends and purges run under it, reads release it at once.
	Hold Hold
	// Peer is the address of the instance that serves the partition, when
	// this one does not.
	Peer string
}

// Hold keeps a partition at this instance: giving it up waits for the
// holds taken before.
type Hold interface {
	// Release ends the hold; err is the outcome of the write made under
	// it, so that a write refused by the fence (another instance wrote the
	// partition) gives the partition up.
	Release(err error)
}

// Peers calls the log operations of another instance, the owner of the
// partitions named, as the caller of this instance (its identity goes
// along). A peer that cannot be reached answers OWNER_UNREACHABLE.
type Peers interface {
	// Append appends recs (timestamps already set) to one partition and
	// returns the first record's offset. Records with a ProducerID are an
	// idempotent batch (idempotence.go): the peer checks it against its
	// producer state, and answers a resend with the original offset.
	Append(ctx context.Context, peer, topic string, part int32, recs []logstore.Record) (int64, error)
	// Fetch is [Log.Fetch] at the peer.
	Fetch(ctx context.Context, peer string, req FetchRequest) (Fetched, error)
	// ListOffsets is [Log.ListOffsets] at the peer.
	ListOffsets(ctx context.Context, peer, topic string, part int32, spec OffsetSpec, ts int64) (offset, timestamp int64, err error)
	// Purge is [Log.Purge] at the peer, answered in request order.
	Purge(ctx context.Context, peer string, topics []PurgeTopic) ([]PurgeTopicResult, error)
	// CreateTopic is [Log.CreateTopic] at the peer (the controller).
	CreateTopic(ctx context.Context, peer, name string, partitions int32, s TopicSettings) (Topic, error)
	// DeleteTopic is [Log.DeleteTopic] at the peer (the controller).
	DeleteTopic(ctx context.Context, peer, name string) error
	// CreatePartitions is [Log.CreatePartitions] at the peer (the
	// controller).
	CreatePartitions(ctx context.Context, peer, name string, count int32, validateOnly bool) (TopicInfo, error)
}

// Controller says which instance creates and deletes topics: the topic
// lifecycle has one holder at a time. It is consulted at the entry of
// CreateTopic, DeleteTopic, RemoveTopic and CreatePartitions (EnsureTopic
// creates through CreateTopic). Config alterations need none: the store
// orders them.
type Controller interface {
	// Controller is where topics are created and deleted right now: ""
	// for this instance, else the address of the peer that does. The
	// error (a retryable NOT_OWNER or OWNER_UNREACHABLE) says that no
	// instance is known to.
	Controller(ctx context.Context) (peer string, err error)
}

// forwardedKey marks a context whose call another instance forwarded.
type forwardedKey struct{}

// WithForwardedBy marks ctx as a call forwarded by the instance named by:
// a partition this instance does not serve then answers NOT_OWNER instead
// of being forwarded again (one hop only). The transports set it from what
// the forwarding instance sent.
func WithForwardedBy(ctx context.Context, by string) context.Context {
	if by == "" {
		return ctx
	}
	return context.WithValue(ctx, forwardedKey{}, by)
}

// OwnLookups is ctx for the look-ups a domain makes on its own behalf
// while serving a call forwarded to it (a consumer group's coordinator
// reading the log end offsets for the lag): they are not the forwarded
// call travelling on, and reach the partitions' owners (one hop from
// here).
func OwnLookups(ctx context.Context) context.Context {
	if ForwardedBy(ctx) == "" {
		return ctx
	}
	return context.WithValue(ctx, forwardedKey{}, "")
}

// ForwardedBy is the instance that forwarded ctx's call, "" for a call
// that came from a client.
func ForwardedBy(ctx context.Context) string {
	by, _ := ctx.Value(forwardedKey{}).(string)
	return by
}

// owner is where topic's partition part is served: a hold (here) or a
// peer's address. Without Owners every partition is here, with no hold.
func (l *Log) owner(ctx context.Context, topic string, part int32) (Hold, string, error) {
	if l.cfg.Owners == nil {
		return noHold{}, "", nil
	}
	if l.cfg.Peers == nil {
		return nil, "", fmt.Errorf("broker: Owners without Peers")
	}
	return Locate(ctx, l.cfg.Owners, topic, part)
}

// Locate asks owners where topic's partition part is served: a hold when
// here, else the address of the peer that serves it. A call another
// instance forwarded (ForwardedBy) that does not find the partition here
// answers NOT_OWNER rather than travelling on, and so does a partition
// that has no owner right now. Every domain that routes by partition
// (the log API, change streams) asks through it, so that they answer
// alike.
func Locate(ctx context.Context, owners Owners, topic string, part int32) (Hold, string, error) {
	o, err := owners.Owner(ctx, topic, part)
	switch {
	case err == nil && o.Hold != nil:
		return o.Hold, "", nil
	case ForwardedBy(ctx) != "":
		return nil, "", apierr.New(apierr.NotOwner, "this instance does not own %s-%d (any more); retry", topic, part)
	case err != nil:
		return nil, "", err
	case o.Peer == "":
		return nil, "", apierr.New(apierr.NotOwner, "%s-%d has no owner serving it right now (one is being chosen); retry", topic, part)
	}
	return nil, o.Peer, nil
}

type noHold struct{}

func (noHold) Release(error) {}

// controller is where topics are created and deleted: "" here (always,
// without a Controller), else the controller's address.
func (l *Log) controller(ctx context.Context) (string, error) {
	if l.cfg.Controller == nil {
		return "", nil
	}
	if l.cfg.Peers == nil {
		return "", fmt.Errorf("broker: Controller without Peers")
	}
	peer, err := l.cfg.Controller.Controller(ctx)
	switch {
	case err != nil:
		return "", err
	case peer != "" && ForwardedBy(ctx) != "":
		return "", apierr.New(apierr.NotOwner, "this instance does not create or delete topics (any more); retry")
	}
	return peer, nil
}

// AppendPartition appends recs to one partition, at its owner: records a
// component of this instance writes on its own behalf (a share group's
// dead-letter copies). Their timestamps are kept; offsets are ignored.
func (l *Log) AppendPartition(ctx context.Context, topic string, part int32, recs []logstore.Record) (int64, error) {
	return l.appendTo(ctx, topic, part, recs)
}

// appendTo appends one partition's batch here, under the partition's
// hold, or at its owner.
func (l *Log) appendTo(ctx context.Context, topic string, part int32, recs []logstore.Record) (int64, error) {
	hold, peer, err := l.owner(ctx, topic, part)
	if err != nil {
		return 0, err
	}
	if hold == nil {
		return l.cfg.Peers.Append(ctx, peer, topic, part, recs)
	}
	var base int64
	if recs[0].ProducerID != 0 {
		base, err = l.appendIdempotent(ctx, topic, part, recs)
	} else {
		base, err = l.store.Append(ctx, topic, part, recs)
	}
	hold.Release(err)
	return base, err
}

// fetchElsewhere serves a fetch of a partition another instance owns
// (done), or says it is this instance's to serve.
func (l *Log) fetchElsewhere(ctx context.Context, req FetchRequest) (res Fetched, done bool, err error) {
	if l.cfg.Owners == nil {
		return Fetched{}, false, nil
	}
	hold, peer, err := l.owner(ctx, req.Topic, req.Partition)
	switch {
	case err != nil:
		return Fetched{}, true, err
	case hold != nil:
		hold.Release(nil) // a read: the partition may move meanwhile
		return Fetched{}, false, nil
	}
	res, err = l.cfg.Peers.Fetch(ctx, peer, req)
	return res, true, err
}

// listOffsetsElsewhere is fetchElsewhere for ListOffsets.
func (l *Log) listOffsetsElsewhere(ctx context.Context, topic string, part int32, spec OffsetSpec, ts int64) (offset, timestamp int64, done bool, err error) {
	if l.cfg.Owners == nil {
		return 0, 0, false, nil
	}
	hold, peer, err := l.owner(ctx, topic, part)
	switch {
	case err != nil:
		return 0, 0, true, err
	case hold != nil:
		hold.Release(nil)
		return 0, 0, false, nil
	}
	offset, timestamp, err = l.cfg.Peers.ListOffsets(ctx, peer, topic, part, spec, ts)
	return offset, timestamp, true, err
}

// deleteBefore moves one partition's log start here, under its hold. The
// partition was found here when the purge was split; ownership may have
// moved since.
func (l *Log) deleteBefore(ctx context.Context, topic string, part int32, offset int64) (int64, error) {
	hold, _, err := l.owner(ctx, topic, part)
	if err != nil || hold == nil {
		return 0, fmt.Errorf("this instance stopped owning %s-%d during the purge; retry: %w", topic, part, logstore.ErrStorage)
	}
	start, err := l.store.DeleteRecordsBefore(ctx, topic, part, offset)
	hold.Release(err)
	return start, err
}

// Purge moves log start offsets (Kafka's DeleteRecords), each partition
// judged alone so one bad partition never fails the others:
//  1. unknown topic or partition  → UNKNOWN_TOPIC_OR_PARTITION;
//  2. cleanup policy "compact"     → POLICY_VIOLATION, nothing changes;
//  3. the same partition twice     → INVALID_REQUEST for that partition;
//  4. offset -1 = high watermark; any other negative, or above the high
//     watermark → OFFSET_OUT_OF_RANGE;
//  5. offset at or below the log start → NONE, the current log start;
//  6. otherwise the log start moves to offset, durably before the result.
//
// With Owners the request is split by the partitions' owners, each part
// purged at its owner (or here), and the answers put back in request
// order. The error is for a failure of the whole call (the store itself
// failing, an owner not answering).
func (l *Log) Purge(ctx context.Context, topics []PurgeTopic) ([]PurgeTopicResult, error) {
	if l.cfg.Owners == nil {
		return l.purgeHere(ctx, topics)
	}
	type part struct {
		topics []PurgeTopic
		pos    [][2]int // per partition of topics, in order: (topic entry, partition entry) of the request
	}
	const here = ""
	parts := map[string]*part{} // by owner address, here = this instance
	var order []string
	for ti, t := range topics {
		for pi, p := range t.Partitions {
			hold, target, err := l.owner(ctx, t.Topic, p.Partition)
			if err != nil {
				return nil, err
			}
			if hold != nil {
				hold.Release(nil) // purgeHere holds it again for the write
			}
			pt := parts[target]
			if pt == nil {
				pt = &part{}
				parts[target] = pt
				order = append(order, target)
			}
			if len(pt.pos) == 0 || pt.pos[len(pt.pos)-1][0] != ti {
				pt.topics = append(pt.topics, PurgeTopic{Topic: t.Topic})
			}
			last := &pt.topics[len(pt.topics)-1]
			last.Partitions = append(last.Partitions, p)
			pt.pos = append(pt.pos, [2]int{ti, pi})
		}
	}
	if len(order) == 0 || len(order) == 1 && order[0] == here {
		return l.purgeHere(ctx, topics)
	}
	out := make([]PurgeTopicResult, len(topics))
	for ti, t := range topics {
		out[ti] = PurgeTopicResult{Topic: t.Topic, Partitions: make([]PurgePartitionResult, len(t.Partitions))}
	}
	for _, target := range order {
		pt := parts[target]
		var res []PurgeTopicResult
		var err error
		if target == here {
			res, err = l.purgeHere(ctx, pt.topics)
		} else {
			res, err = l.cfg.Peers.Purge(ctx, target, pt.topics)
		}
		if err != nil {
			return nil, err
		}
		k := 0
		for _, tr := range res {
			for _, pr := range tr.Partitions {
				if k >= len(pt.pos) {
					return nil, fmt.Errorf("a purge answer has more partitions than its request: %w", logstore.ErrStorage)
				}
				pos := pt.pos[k]
				out[pos[0]].Partitions[pos[1]] = pr
				k++
			}
		}
		if k != len(pt.pos) {
			return nil, fmt.Errorf("a purge answer has %d partitions for %d asked: %w", k, len(pt.pos), logstore.ErrStorage)
		}
	}
	return out, nil
}
