package consumergroup

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

// Defaults of Options (Kafka's group.min.session.timeout.ms,
// group.max.session.timeout.ms, offsets.retention.minutes,
// offset.metadata.max.bytes).
const (
	DefaultMinSessionTimeout     = 6 * time.Second
	DefaultMaxSessionTimeout     = 30 * time.Minute
	DefaultOffsetsRetention      = 7 * 24 * time.Hour
	DefaultInitialRebalanceDelay = 3 * time.Second
	DefaultMaxMetadataBytes      = 4096
	// The consumer protocol's (KIP-848) defaults, Kafka's
	// group.consumer.heartbeat.interval.ms and session.timeout.ms.
	DefaultConsumerHeartbeatInterval = 5 * time.Second
	DefaultConsumerSessionTimeout    = 45 * time.Second
)

// Options configures a Coordinator.
type Options struct {
	// Store holds the committed offsets; the Coordinator owns it (Close
	// closes it). Required.
	Store groupoffsets.Store
	// InitialRebalanceDelay is how long the first rebalance of an empty
	// group waits for more members (--group-initial-rebalance-delay,
	// Kafka's group.initial.rebalance.delay.ms); 0 = none.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound a member's session
	// timeout; 0 = the defaults.
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// OffsetsRetention is how long the offsets of an empty group are kept
	// (--offsets-retention); 0 = DefaultOffsetsRetention.
	OffsetsRetention time.Duration
	// RetentionCheckInterval is how often expired offsets are removed;
	// 0 = min(OffsetsRetention/4, 10 minutes), at least 100ms.
	RetentionCheckInterval time.Duration
	// MaxMetadataBytes bounds a committed offset's metadata; 0 = 4096.
	MaxMetadataBytes int
	// MaxGroupSize bounds a group's members; 0 = no bound.
	MaxGroupSize int
	// Partitions returns the partition count of a topic, or an error with
	// the reason UNKNOWN_TOPIC_OR_PARTITION; nil = every topic exists.
	// It is called with no lock of this package held.
	Partitions func(ctx context.Context, topic string) (int32, error)
	// Topics returns every topic with its partition count, for the
	// consumer protocol's regex subscriptions; nil = a regex matches
	// nothing. It is called with no lock of this package held.
	Topics func(ctx context.Context) (map[string]int32, error)
	// ListOffsets resolves an offset of a partition (OffsetEarliest,
	// OffsetLatest, or OffsetByTimestamp at ts: -1 when no record is at or
	// after it), with the reason UNKNOWN_TOPIC_OR_PARTITION for a partition
	// that does not exist: the log bounds of AlterOffsets and the log end
	// offsets of OffsetsWithLag. nil = AlterOffsets is UNAVAILABLE and no
	// lag is known. It is called with no lock of this package held.
	ListOffsets func(ctx context.Context, topic string, partition int32, q OffsetQuery, ts int64) (int64, error)
	// ConsumerHeartbeatInterval and ConsumerSessionTimeout are the
	// consumer protocol's (KIP-848) heartbeat interval told to members
	// and the session after which a silent member is removed; 0 = the
	// defaults.
	ConsumerHeartbeatInterval, ConsumerSessionTimeout time.Duration
	// Taken reports whether a group id belongs to a group of another kind
	// (a share group); such an id is refused here. nil = none.
	Taken func(group string) bool
	// Coordinates, in a cluster where each instance coordinates some of
	// the groups, is called with no lock held before a call about group:
	// nil when this instance coordinates it (after taking it over, if
	// nobody did and create is set or it has committed offsets: it calls
	// AdoptGroup first), else an error (NOT_OWNER: the client finds the
	// coordinator again). Serves is the same check without taking over,
	// made under the group table's lock when a call creates a group, so
	// that a group released meanwhile is not created again here. nil =
	// every group is coordinated here.
	Coordinates func(ctx context.Context, group string, create bool) error
	Serves      func(group string) bool
	Logger      *slog.Logger
	// Now is the clock; nil = time.Now.
	Now func() time.Time
}

// Coordinator is the classic consumer-group coordinator of this instance:
// every group, its members and its committed offsets.
type Coordinator struct {
	o     Options
	store groupoffsets.Store
	log   *slog.Logger

	mu     sync.Mutex // groups, closed; taken before any group.mu
	groups map[string]*group
	closed bool
	seq    atomic.Uint64 // member join order

	stop chan struct{}
	done chan struct{}
}

// Open loads the committed offsets from o.Store and starts the retention
// loop. Every loaded group is Empty: members do not outlive the process.
func Open(o Options) (*Coordinator, error) {
	if o.Store == nil {
		return nil, errors.New("consumergroup: no offsets store")
	}
	if o.MinSessionTimeout <= 0 {
		o.MinSessionTimeout = DefaultMinSessionTimeout
	}
	if o.MaxSessionTimeout <= 0 {
		o.MaxSessionTimeout = DefaultMaxSessionTimeout
	}
	if o.ConsumerHeartbeatInterval <= 0 {
		o.ConsumerHeartbeatInterval = DefaultConsumerHeartbeatInterval
	}
	if o.ConsumerSessionTimeout <= 0 {
		o.ConsumerSessionTimeout = DefaultConsumerSessionTimeout
	}
	if o.OffsetsRetention <= 0 {
		o.OffsetsRetention = DefaultOffsetsRetention
	}
	if o.RetentionCheckInterval <= 0 {
		o.RetentionCheckInterval = min(o.OffsetsRetention/4, 10*time.Minute)
	}
	o.RetentionCheckInterval = max(o.RetentionCheckInterval, 100*time.Millisecond)
	if o.MaxMetadataBytes <= 0 {
		o.MaxMetadataBytes = DefaultMaxMetadataBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	loaded, err := o.Store.Load()
	if err != nil {
		return nil, err
	}
	c := &Coordinator{o: o, store: o.Store, log: o.Logger.With("component", "consumergroup"),
		groups: map[string]*group{}, stop: make(chan struct{}), done: make(chan struct{})}
	now := o.Now()
	for _, lg := range loaded {
		c.groups[lg.ID] = c.loaded(lg, now)
	}
	go c.retentionLoop()
	return c, nil
}

// Close ends every waiting join and sync with UNAVAILABLE, stops the
// timers and closes the store.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	groups := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		groups = append(groups, g)
	}
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	gone := apierr.New(apierr.Unavailable, "the consumer-group coordinator is shutting down")
	for _, g := range groups {
		g.mu.Lock()
		g.end(gone)
		g.mu.Unlock()
	}
	return c.store.Close()
}

// end answers g's waiting joins and syncs with err and stops its timers
// (g.mu held).
func (g *group) end(err error) {
	for _, m := range g.members {
		g.replyJoin(m, JoinResponse{}, err)
		g.replySync(m, SyncResponse{}, err)
		m.stopTimer()
	}
	for _, p := range g.pending {
		p.stopTimer()
	}
	g.stopTimers()
}

func errMoved(id string) error {
	return apierr.New(apierr.NotOwner, "group %q is not coordinated by this instance now; find its coordinator again", id)
}

// AdoptGroup takes over lg, read from the store by a new coordinator
// (Options.Coordinates): the group is Empty with its committed offsets,
// as after a restart (members join again). A group of that id already
// here is replaced, its waiting calls answered NOT_OWNER.
func (c *Coordinator) AdoptGroup(lg groupoffsets.Group) {
	g := c.loaded(lg, c.o.Now())
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	old := c.groups[lg.ID]
	c.groups[lg.ID] = g
	c.mu.Unlock()
	if old != nil {
		old.mu.Lock()
		old.state = Dead
		old.end(errMoved(lg.ID))
		old.mu.Unlock()
	}
}

// ReleaseGroup forgets the group, whose coordination moved to another
// instance: its waiting calls answer NOT_OWNER, after the call writing
// it, if any, has returned.
func (c *Coordinator) ReleaseGroup(id string) {
	c.mu.Lock()
	g := c.groups[id]
	delete(c.groups, id)
	c.mu.Unlock()
	if g != nil {
		g.mu.Lock()
		g.state = Dead
		g.end(errMoved(id))
		g.mu.Unlock()
	}
}

// loaded is a group as the store holds it: Empty, with its offsets; one
// that had members when written counts as empty from now.
func (c *Coordinator) loaded(lg groupoffsets.Group, now time.Time) *group {
	g := newGroup(lg.ID)
	g.emptySince, g.protocolType, g.stored = lg.EmptySince, lg.ProtocolType, lg.Meta
	if g.emptySince.IsZero() {
		// It had members when the process ended: its retention
		// starts now, as their sessions end here.
		g.emptySince = now
	}
	for _, off := range lg.Offsets {
		g.offsets[partKey{off.Topic, off.Partition}] = off
	}
	return g
}

var errClosed = apierr.New(apierr.Unavailable, "the consumer-group coordinator is closed")

// lockGroup returns the group id locked (g.mu), creating it when create is
// set; created says it was new. nil without error: no such group.
func (c *Coordinator) lockGroup(ctx context.Context, id string, create bool) (g *group, created bool, err error) {
	if c.o.Coordinates != nil {
		if err := c.o.Coordinates(ctx, id, create); err != nil {
			return nil, false, err
		}
	}
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, false, errClosed
		}
		g = c.groups[id]
		if g == nil {
			if !create {
				c.mu.Unlock()
				return nil, false, nil
			}
			if c.o.Serves != nil && !c.o.Serves(id) {
				c.mu.Unlock()
				return nil, false, errMoved(id)
			}
			g, created = newGroup(id), true
			c.groups[id] = g
		}
		c.mu.Unlock()
		g.mu.Lock()
		if g.state != Dead {
			return g, created, nil
		}
		g.mu.Unlock() // removed meanwhile: look again
	}
}

// reap removes g if it holds nothing: no members, no pending members and
// no offsets (Kafka's cleanup of an empty group).
func (c *Coordinator) reap(g *group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == Empty && len(g.members) == 0 && len(g.pending) == 0 && len(g.offsets) == 0 && c.groups[g.id] == g {
		g.state = Dead
		g.stopTimers()
		delete(c.groups, g.id)
	}
}

// snapshotGroups returns the live groups sorted by id.
func (c *Coordinator) snapshotGroups() []*group {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (c *Coordinator) retentionLoop() {
	defer close(c.done)
	t := time.NewTicker(c.o.RetentionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.ExpireOffsets()
		}
	}
}

// ExpireOffsets removes the offsets whose retention passed (doc.go
// "Offsets retention") and the groups left with nothing; the retention
// loop calls it every RetentionCheckInterval.
func (c *Coordinator) ExpireOffsets() {
	now := c.o.Now()
	for _, g := range c.snapshotGroups() {
		g.mu.Lock()
		if g.state == Dead {
			g.mu.Unlock()
			continue
		}
		var expired []groupoffsets.Partition
		subscribed := g.subscribedTopics()
		for k, off := range g.offsets {
			base := off.CommitTime
			switch {
			case g.state == Empty:
				if g.emptySince.After(base) {
					base = g.emptySince
				}
			case g.protocolType == consumerProtocol && subscribed != nil && !subscribed[k.topic]:
				// A live consumer group's offsets of topics it no longer
				// consumes expire from their commit (KIP-496).
			default:
				continue
			}
			if !base.Add(c.o.OffsetsRetention).After(now) {
				expired = append(expired, groupoffsets.Partition{Topic: k.topic, Partition: k.partition})
			}
		}
		if len(expired) > 0 {
			if err := c.store.Delete(g.id, expired); err != nil {
				c.log.Warn("expire committed offsets", "group", g.id, "error", err)
			} else {
				for _, p := range expired {
					delete(g.offsets, partKey{p.Topic, p.Partition})
				}
				c.log.Info("committed offsets expired", "group", g.id, "partitions", len(expired))
			}
		}
		empty := g.state == Empty && len(g.offsets) == 0
		g.mu.Unlock()
		if empty {
			if err := c.forget(g); err != nil {
				c.log.Warn("remove an empty group", "group", g.id, "error", err)
			}
		}
	}
}

// forget removes an empty group without offsets, and its record in the
// store.
func (c *Coordinator) forget(g *group) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != Empty || len(g.members) > 0 || len(g.pending) > 0 || len(g.offsets) > 0 || c.groups[g.id] != g {
		return nil
	}
	if err := c.store.Delete(g.id, nil); err != nil {
		return err
	}
	g.state = Dead
	g.stopTimers()
	delete(c.groups, g.id)
	return nil
}

// TopicDeleted drops every group's committed offsets of a deleted topic,
// as Kafka does.
func (c *Coordinator) TopicDeleted(topic string) {
	for _, g := range c.snapshotGroups() {
		g.mu.Lock()
		var parts []groupoffsets.Partition
		for k := range g.offsets {
			if k.topic == topic {
				parts = append(parts, groupoffsets.Partition{Topic: k.topic, Partition: k.partition})
			}
		}
		if len(parts) > 0 {
			if err := c.store.Delete(g.id, parts); err != nil {
				c.log.Warn("drop the offsets of a deleted topic", "group", g.id, "topic", topic, "error", err)
			} else {
				for _, p := range parts {
					delete(g.offsets, partKey{p.Topic, p.Partition})
				}
			}
		}
		g.mu.Unlock()
	}
}

// storageErr is a failed store write as a reason (the detail, which may
// name files, goes to the log only).
func (c *Coordinator) storageErr(group string, err error) error {
	if apierr.ReasonOf(err) != "" {
		return err
	}
	if errors.Is(err, groupoffsets.ErrFenced) {
		return errMoved(group)
	}
	c.log.Error("write committed offsets", "group", group, "error", err)
	return apierr.New(apierr.KafkaStorageError, "committed offsets of group %q could not be written", group)
}
