package txn

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
	"github.com/sharelog/sharelog/internal/storage/txnstate"
)

// DefaultMaxTimeout is --transaction-max-timeout's default, Kafka's
// transaction.max.timeout.ms.
const DefaultMaxTimeout = 15 * time.Minute

// DefaultIDExpiration is --transactional-id-expiration's default, Kafka's
// transactional.id.expiration.ms (7 days).
const DefaultIDExpiration = 7 * 24 * time.Hour

// Partition is a topic partition of a transaction.
type Partition = txnstate.Partition

// Offset is an offset a transaction commits.
type Offset = txnstate.Offset

// Log is what the coordinator needs of the log (broker.Log).
type Log interface {
	InitProducer(ctx context.Context) (int64, int16, error)
	WriteTxnMarker(ctx context.Context, topic string, part int32, pid int64, epoch int16, commit bool, coordinatorEpoch int32) error
}

// Groups is what it needs of the consumer groups (consumergroup.Coordinator).
type Groups interface {
	CommitTransaction(ctx context.Context, group string, offsets []groupoffsets.Offset) error
}

// Options configure a Coordinator.
type Options struct {
	Store  txnstate.Store
	Log    Log
	Groups Groups
	// MaxTimeout caps a producer's transaction.timeout.ms
	// (--transaction-max-timeout); 0 means DefaultMaxTimeout.
	MaxTimeout time.Duration
	// IDExpiration is how long a transactional id with no transaction
	// open keeps its state after its last change
	// (--transactional-id-expiration, Kafka's
	// transactional.id.expiration.ms); 0 means DefaultIDExpiration.
	IDExpiration time.Duration
	// CheckInterval is how often open transactions are checked for their
	// timeout and unfinished ends retried; 0 means one second.
	CheckInterval time.Duration
	Now           func() time.Time
	Logger        *slog.Logger
}

// Coordinator is the transaction coordinator of this server.
type Coordinator struct {
	o Options

	mu  sync.Mutex
	ids map[string]*entry
	// used is set once any transactional id's state was written (or
	// loaded): from then on the log may hold transactional records.
	used atomic.Bool

	stop chan struct{}
	done chan struct{}
}

type entry struct {
	op sync.Mutex // serialises the id's calls, held across their I/O
	t  txnstate.Txn
	ok bool // t was written (the id exists)
	// gone: the id expired and this entry left the map; a call that
	// waited on op finds an unknown id (InitProducer looks it up again).
	gone bool
}

// New loads the state, completes the transactions a crash left being
// ended, and starts the timeout check. Close stops it.
func New(o Options) (*Coordinator, error) {
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = DefaultMaxTimeout
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = time.Second
	}
	if o.IDExpiration <= 0 {
		o.IDExpiration = DefaultIDExpiration
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	all, err := o.Store.Load()
	if err != nil {
		return nil, err
	}
	c := &Coordinator{o: o, ids: map[string]*entry{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, t := range all {
		c.ids[t.ID] = &entry{t: t, ok: true}
	}
	c.used.Store(len(all) > 0)
	c.check(context.Background())
	go c.loop()
	return c, nil
}

// Used reports whether any transactional id has state here: until one
// has, no transactional producer can have written a record.
func (c *Coordinator) Used() bool { return c.used.Load() }

// Close stops the timeout check.
func (c *Coordinator) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

func (c *Coordinator) loop() {
	defer close(c.done)
	tk := time.NewTicker(c.o.CheckInterval)
	defer tk.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tk.C:
			c.check(context.Background())
		}
	}
}

// idle reports whether t has no transaction open or being ended.
func idle(t txnstate.Txn) bool {
	switch t.Status {
	case txnstate.Empty, txnstate.CompleteCommit, txnstate.CompleteAbort:
		return true
	}
	return false
}

// check aborts the open transactions past their timeout, retries the
// ends that failed (a marker or offset write that errored) and expires
// the idle transactional ids unchanged for IDExpiration.
func (c *Coordinator) check(ctx context.Context) {
	now := c.o.Now().UnixMilli()
	c.mu.Lock()
	var due, expired []*entry
	for _, e := range c.ids {
		switch e.t.Status {
		case txnstate.Ongoing:
			if now >= e.t.StartMs+int64(e.t.TimeoutMs) {
				due = append(due, e)
			}
		case txnstate.PrepareCommit, txnstate.PrepareAbort:
			due = append(due, e)
		}
		if e.ok && idle(e.t) && now-e.t.UpdateMs >= c.o.IDExpiration.Milliseconds() {
			expired = append(expired, e)
		}
	}
	c.mu.Unlock()
	for _, e := range expired {
		c.expire(e, now)
	}
	for _, e := range due {
		e.op.Lock()
		t := c.get(e)
		var err error
		switch t.Status {
		case txnstate.Ongoing:
			if now >= t.StartMs+int64(t.TimeoutMs) {
				c.o.Logger.Info("kafka transaction timed out: aborting", "transactional_id", t.ID,
					"producer_id", t.ProducerID, "timeout_ms", t.TimeoutMs)
				t, err = c.bump(ctx, t) // fence the producer, as Kafka's coordinator
				if err == nil {
					_, err = c.end(ctx, e, t, false)
				}
			}
		case txnstate.PrepareCommit, txnstate.PrepareAbort:
			_, err = c.finish(ctx, e, t)
		}
		e.op.Unlock()
		if err != nil {
			c.o.Logger.Warn("kafka transaction: completing failed, will retry", "transactional_id", t.ID, "error", err)
		}
	}
}

// expire forgets e's transactional id (Kafka's transactional.id
// expiration) if it is still idle and unchanged for IDExpiration: its
// record is deleted, and a producer that comes back with it is a new one
// (InitProducerID gives it a new producer id); one that did not call
// InitProducerID again is answered INVALID_PRODUCER_ID_MAPPING.
func (c *Coordinator) expire(e *entry, now int64) {
	e.op.Lock()
	defer e.op.Unlock()
	t := c.get(e)
	if !e.ok || e.gone || !idle(t) || now-t.UpdateMs < c.o.IDExpiration.Milliseconds() {
		return
	}
	if err := c.o.Store.Delete(t.ID); err != nil {
		c.o.Logger.Warn("kafka transactional id: expiring failed, will retry", "transactional_id", t.ID, "error", err)
		return
	}
	c.mu.Lock()
	if c.ids[t.ID] == e {
		delete(c.ids, t.ID)
	}
	e.t, e.ok, e.gone = txnstate.Txn{ID: t.ID}, false, true
	c.mu.Unlock()
	c.o.Logger.Info("kafka transactional id expired", "transactional_id", t.ID, "producer_id", t.ProducerID,
		"idle_for", time.Duration(now-t.UpdateMs)*time.Millisecond)
}

// lookup returns the entry of id, made (unwritten) when create.
func (c *Coordinator) lookup(id string, create bool) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.ids[id]
	if e == nil && create {
		e = &entry{t: txnstate.Txn{ID: id}}
		c.ids[id] = e
	}
	return e
}

func (c *Coordinator) get(e *entry) txnstate.Txn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return e.t.Clone()
}

// put writes t durably, then makes it e's state.
func (c *Coordinator) put(e *entry, t txnstate.Txn) error {
	t.UpdateMs = c.o.Now().UnixMilli()
	c.used.Store(true) // before the write: a producer may write records once it is
	if err := c.o.Store.Put(t); err != nil {
		if errors.Is(err, txnstate.ErrFenced) {
			// Another instance coordinates the id now: NOT_COORDINATOR,
			// on which the client finds it (docs/kafka.md "Transactions").
			return apierr.New(apierr.NotOwner, "transactional id %q: %v", t.ID, err)
		}
		return apierr.New(apierr.KafkaStorageError, "write the transaction state of %q: %v", t.ID, err)
	}
	c.mu.Lock()
	e.t, e.ok = t.Clone(), true
	c.mu.Unlock()
	return nil
}

// InitProducer is InitProducerID with a transactional id: the id's
// producer id with a new epoch (a new producer id the first time, or
// when the epoch is exhausted), after aborting its open transaction, so
// that an older instance of the producer is fenced. With pid >= 0 (KIP-360,
// a producer recovering its own id) it must be the id's producer id and
// epoch no newer than the id's.
func (c *Coordinator) InitProducer(ctx context.Context, id string, timeoutMs int32, pid int64, epoch int16) (int64, int16, error) {
	if id == "" {
		return -1, -1, apierr.Invalid("the transactional id is empty")
	}
	if timeoutMs <= 0 || time.Duration(timeoutMs)*time.Millisecond > c.o.MaxTimeout {
		return -1, -1, apierr.New(apierr.InvalidTransactionTimeout,
			"transaction timeout %d ms is outside (0, %d] (--transaction-max-timeout)", timeoutMs, c.o.MaxTimeout.Milliseconds())
	}
	ctx = context.WithoutCancel(ctx) // what is started here is finished
	e := c.lookup(id, true)
	e.op.Lock()
	for e.gone { // expired while this call waited: the id starts anew
		e.op.Unlock()
		e = c.lookup(id, true)
		e.op.Lock()
	}
	defer e.op.Unlock()
	t := c.get(e)
	if !e.ok {
		if pid >= 0 {
			return -1, -1, apierr.New(apierr.InvalidProducerIDMapping, "transactional id %q has no producer id %d", id, pid)
		}
		npid, nepoch, err := c.o.Log.InitProducer(ctx)
		if err != nil {
			return -1, -1, err
		}
		t = txnstate.Txn{ID: id, ProducerID: npid, Epoch: nepoch, TimeoutMs: timeoutMs, Status: txnstate.Empty}
		if err := c.put(e, t); err != nil {
			return -1, -1, err
		}
		return t.ProducerID, t.Epoch, nil
	}
	if pid >= 0 {
		if pid != t.ProducerID {
			return -1, -1, apierr.New(apierr.InvalidProducerIDMapping, "producer id %d is not transactional id %q's", pid, id)
		}
		if epoch > t.Epoch {
			return -1, -1, apierr.New(apierr.ProducerFenced, "epoch %d is newer than transactional id %q's %d", epoch, id, t.Epoch)
		}
	}
	var err error
	switch t.Status {
	case txnstate.PrepareCommit, txnstate.PrepareAbort:
		if t, err = c.finish(ctx, e, t); err != nil {
			return -1, -1, err
		}
	case txnstate.Ongoing:
		// Abort with the bumped epoch: its markers fence the old producer
		// on every partition of the transaction.
		if t, err = c.bump(ctx, t); err != nil {
			return -1, -1, err
		}
		if t, err = c.end(ctx, e, t, false); err != nil {
			return -1, -1, err
		}
		t.TimeoutMs = timeoutMs
		if err := c.put(e, t); err != nil {
			return -1, -1, err
		}
		return t.ProducerID, t.Epoch, nil
	}
	if t, err = c.bump(ctx, t); err != nil {
		return -1, -1, err
	}
	t.TimeoutMs = timeoutMs
	if err := c.put(e, t); err != nil {
		return -1, -1, err
	}
	return t.ProducerID, t.Epoch, nil
}

// bump gives t the next epoch, or a new producer id at epoch 0 when the
// epoch is exhausted (as Kafka). It writes nothing.
func (c *Coordinator) bump(ctx context.Context, t txnstate.Txn) (txnstate.Txn, error) {
	if t.Epoch < math.MaxInt16-1 {
		t.Epoch++
		return t, nil
	}
	if t.Status == txnstate.Ongoing {
		// The open transaction's markers need its own producer id: it is
		// ended at the last epoch, and finish moves to a new id.
		t.Epoch = math.MaxInt16
		return t, nil
	}
	pid, epoch, err := c.o.Log.InitProducer(ctx)
	if err != nil {
		return t, err
	}
	t.ProducerID, t.Epoch = pid, epoch
	return t, nil
}

// current is id's entry, INVALID_PRODUCER_ID_MAPPING when it has none.
func (c *Coordinator) current(id string) (*entry, error) {
	e := c.lookup(id, false)
	if e == nil {
		return nil, apierr.New(apierr.InvalidProducerIDMapping, "transactional id %q is unknown: InitProducerID first", id)
	}
	return e, nil
}

func checkProducer(t txnstate.Txn, pid int64, epoch int16) error {
	switch {
	case !validID(t):
		return apierr.New(apierr.InvalidProducerIDMapping, "transactional id %q is unknown: InitProducerID first", t.ID)
	case pid != t.ProducerID:
		return apierr.New(apierr.InvalidProducerIDMapping, "producer id %d is not transactional id %q's (%d)", pid, t.ID, t.ProducerID)
	case epoch != t.Epoch:
		return apierr.New(apierr.ProducerFenced, "producer %d epoch %d is fenced: transactional id %q is at epoch %d", pid, epoch, t.ID, t.Epoch)
	}
	return nil
}

func validID(t txnstate.Txn) bool { return t.ProducerID > 0 }

// begin makes t's transaction open if it is not.
func (c *Coordinator) begin(t *txnstate.Txn) error {
	switch t.Status {
	case txnstate.Ongoing:
		return nil
	case txnstate.PrepareCommit, txnstate.PrepareAbort:
		return apierr.New(apierr.ConcurrentTransactions, "transactional id %q is ending its transaction", t.ID)
	}
	t.Status, t.StartMs = txnstate.Ongoing, c.o.Now().UnixMilli()
	t.Partitions, t.Groups, t.Offsets = nil, nil, nil
	return nil
}

// AddPartitions is AddPartitionsToTxn: parts join id's transaction,
// which opens if it is not. The transport has checked that they exist.
func (c *Coordinator) AddPartitions(ctx context.Context, id string, pid int64, epoch int16, parts []Partition) error {
	return c.join(id, pid, epoch, func(t *txnstate.Txn) bool {
		added := false
		for _, p := range parts {
			if !slices.Contains(t.Partitions, p) {
				t.Partitions = append(t.Partitions, p)
				added = true
			}
		}
		return added
	})
}

// join opens id's transaction for pid at epoch if it is not open, lets add
// put what joins it into the state, and writes the state unless nothing
// changed (add reports false for what had joined already).
func (c *Coordinator) join(id string, pid int64, epoch int16, add func(t *txnstate.Txn) bool) error {
	e, err := c.current(id)
	if err != nil {
		return err
	}
	e.op.Lock()
	defer e.op.Unlock()
	t := c.get(e)
	if err := checkProducer(t, pid, epoch); err != nil {
		return err
	}
	if err := c.begin(&t); err != nil {
		return err
	}
	if !add(&t) && c.get(e).Status == txnstate.Ongoing {
		return nil
	}
	return c.put(e, t)
}

// InTransaction reports, for a transactional produce, whether pid at
// epoch is id's producer with (topic, part) in its open transaction:
// INVALID_TXN_STATE when the partition was not added (Kafka's produce
// verification, KIP-890), INVALID_PRODUCER_EPOCH for an older epoch.
func (c *Coordinator) InTransaction(id string, pid int64, epoch int16, topic string, part int32) error {
	e := c.lookup(id, false)
	if e == nil {
		return apierr.New(apierr.InvalidProducerIDMapping, "transactional id %q is unknown", id)
	}
	t := c.get(e)
	switch {
	case pid != t.ProducerID:
		return apierr.New(apierr.InvalidProducerIDMapping, "producer id %d is not transactional id %q's", pid, id)
	case epoch < t.Epoch:
		return apierr.New(apierr.InvalidProducerEpoch, "producer %d epoch %d is fenced (epoch %d)", pid, epoch, t.Epoch)
	case epoch > t.Epoch:
		return apierr.New(apierr.InvalidProducerEpoch, "producer %d epoch %d is unknown (epoch %d)", pid, epoch, t.Epoch)
	case t.Status != txnstate.Ongoing || !slices.Contains(t.Partitions, Partition{Topic: topic, Partition: part}):
		return apierr.New(apierr.InvalidTxnState, "%s-%d is not part of transactional id %q's open transaction: AddPartitionsToTxn first", topic, part, id)
	}
	return nil
}

// AddOffsets is AddOffsetsToTxn: group joins id's transaction, which
// opens if it is not.
func (c *Coordinator) AddOffsets(ctx context.Context, id string, pid int64, epoch int16, group string) error {
	if group == "" {
		return apierr.New(apierr.InvalidGroupID, "the group id is empty")
	}
	return c.join(id, pid, epoch, func(t *txnstate.Txn) bool {
		if slices.Contains(t.Groups, group) {
			return false
		}
		t.Groups = append(t.Groups, group)
		return true
	})
}

// TxnOffsetCommit holds offsets for group in id's transaction: they are
// committed to the group when the transaction commits, and dropped when
// it aborts. The group must have been added (AddOffsets); the member
// check is the consumer groups' (the transport asks it first).
func (c *Coordinator) TxnOffsetCommit(ctx context.Context, id string, pid int64, epoch int16, group string, offsets []Offset) error {
	e, err := c.current(id)
	if err != nil {
		return err
	}
	e.op.Lock()
	defer e.op.Unlock()
	t := c.get(e)
	if err := checkProducer(t, pid, epoch); err != nil {
		return err
	}
	if t.Status != txnstate.Ongoing || !slices.Contains(t.Groups, group) {
		return apierr.New(apierr.InvalidTxnState, "group %q is not part of transactional id %q's open transaction: AddOffsetsToTxn first", group, id)
	}
	if t.Offsets == nil {
		t.Offsets = map[string][]Offset{}
	}
	cur := t.Offsets[group]
	for _, o := range offsets {
		i := slices.IndexFunc(cur, func(x Offset) bool { return x.Topic == o.Topic && x.Partition == o.Partition })
		if i >= 0 {
			cur[i] = o
		} else {
			cur = append(cur, o)
		}
	}
	t.Offsets[group] = cur
	return c.put(e, t)
}

// EndTxn commits or aborts id's transaction: durable as decided, then the
// markers, then (commit) the offsets, then complete. A retry of an end
// that completed answers the same; one that failed half-way finishes it.
func (c *Coordinator) EndTxn(ctx context.Context, id string, pid int64, epoch int16, commit bool) error {
	e, err := c.current(id)
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	e.op.Lock()
	defer e.op.Unlock()
	t := c.get(e)
	if err := checkProducer(t, pid, epoch); err != nil {
		return err
	}
	switch {
	case t.Status == txnstate.Ongoing:
		_, err = c.end(ctx, e, t, commit)
		return err
	case (t.Status == txnstate.PrepareCommit && commit) || (t.Status == txnstate.PrepareAbort && !commit):
		_, err = c.finish(ctx, e, t)
		return err
	case (t.Status == txnstate.CompleteCommit && commit) || (t.Status == txnstate.CompleteAbort && !commit):
		return nil // a retry of the end that completed
	case t.Status == txnstate.Empty:
		return apierr.New(apierr.InvalidTxnState, "transactional id %q has no open transaction", id)
	}
	return apierr.New(apierr.InvalidTxnState, "transactional id %q's transaction is %s: it cannot %s", id, t.Status, map[bool]string{true: "commit", false: "abort"}[commit])
}

// end decides t's open transaction durably and finishes it.
func (c *Coordinator) end(ctx context.Context, e *entry, t txnstate.Txn, commit bool) (txnstate.Txn, error) {
	t.Status = txnstate.PrepareAbort
	if commit {
		t.Status = txnstate.PrepareCommit
	}
	if err := c.put(e, t); err != nil {
		return t, err
	}
	return c.finish(ctx, e, t)
}

// finish writes the markers of t's decided transaction and, for a
// commit, its offsets, then records it complete. Each step may be done
// again after a failure or a crash.
func (c *Coordinator) finish(ctx context.Context, e *entry, t txnstate.Txn) (txnstate.Txn, error) {
	commit := t.Status == txnstate.PrepareCommit
	for _, p := range t.Partitions {
		if err := c.o.Log.WriteTxnMarker(ctx, p.Topic, p.Partition, t.ProducerID, t.Epoch, commit, 0); err != nil {
			return t, err
		}
	}
	if commit && c.o.Groups != nil {
		for _, g := range t.Groups {
			offs := t.Offsets[g]
			w := make([]groupoffsets.Offset, len(offs))
			for i, o := range offs {
				w[i] = groupoffsets.Offset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata}
			}
			if err := c.o.Groups.CommitTransaction(ctx, g, w); err != nil {
				return t, err
			}
		}
	}
	t.Status = txnstate.CompleteAbort
	if commit {
		t.Status = txnstate.CompleteCommit
	}
	t.Partitions, t.Groups, t.Offsets = nil, nil, nil
	if t.Epoch == math.MaxInt16 {
		// The epoch is exhausted (bump): move to a new producer id now.
		pid, epoch, err := c.o.Log.InitProducer(ctx)
		if err != nil {
			return t, err
		}
		t.ProducerID, t.Epoch = pid, epoch
	}
	return t, c.put(e, t)
}

// PendingOffsets is the partitions of group with offsets of a
// transaction not yet committed or aborted (OffsetFetch's require-stable
// answers UNSTABLE_OFFSET_COMMIT for them).
func (c *Coordinator) PendingOffsets(group string) map[Partition]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out map[Partition]bool
	for _, e := range c.ids {
		if e.t.Status != txnstate.Ongoing && e.t.Status != txnstate.PrepareCommit {
			continue
		}
		for _, o := range e.t.Offsets[group] {
			if out == nil {
				out = map[Partition]bool{}
			}
			out[Partition{Topic: o.Topic, Partition: o.Partition}] = true
		}
	}
	return out
}

// Description is DescribeTransactions' view of one transactional id.
type Description struct {
	ID         string
	State      string // Kafka's names: Empty, Ongoing, PrepareCommit, ...
	ProducerID int64
	Epoch      int16
	TimeoutMs  int32
	StartMs    int64 // -1 without an open transaction
	Partitions []Partition
}

func describe(t txnstate.Txn) Description {
	d := Description{ID: t.ID, State: string(t.Status), ProducerID: t.ProducerID, Epoch: t.Epoch,
		TimeoutMs: t.TimeoutMs, StartMs: -1, Partitions: slices.Clone(t.Partitions)}
	if t.Status == txnstate.Ongoing || t.Status == txnstate.PrepareCommit || t.Status == txnstate.PrepareAbort {
		d.StartMs = t.StartMs
	}
	return d
}

// Describe is DescribeTransactions of one id: TRANSACTIONAL_ID_NOT_FOUND
// when it is unknown.
func (c *Coordinator) Describe(id string) (Description, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.ids[id]
	if e == nil || !e.ok {
		return Description{}, apierr.New(apierr.TransactionalIDNotFound, "transactional id %q is unknown", id)
	}
	return describe(e.t), nil
}

// List is ListTransactions: every id, or those in states (Kafka's state
// names) and of producer ids pids when given, in id order.
func (c *Coordinator) List(states []string, pids []int64) []Description {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Description
	for _, e := range c.ids {
		if !e.ok {
			continue
		}
		if len(states) > 0 && !slices.Contains(states, string(e.t.Status)) {
			continue
		}
		if len(pids) > 0 && !slices.Contains(pids, e.t.ProducerID) {
			continue
		}
		out = append(out, describe(e.t))
	}
	slices.SortFunc(out, func(a, b Description) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}
