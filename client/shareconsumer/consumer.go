package shareconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sharelog/sharelog/client/router"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// Consumer consumes records of a share group. Poll, Commit and Close run one
// at a time (a call waits for the one in progress); Acknowledge may be called
// from any goroutine at any time. Close must be called to release resources.
type Consumer struct {
	cfg    Config
	groups sharelogv1.ShareGroupServiceClient
	topics sharelogv1.LogServiceClient
	log    *slog.Logger

	op       chan struct{}      // held by Poll, Commit and Close
	bgCtx    context.Context    // cancelled when Close starts
	bgCancel context.CancelFunc //
	bgDone   chan struct{}      // closed when the heartbeat loop has returned

	mu         sync.Mutex
	closed     bool // Close started: Poll and Commit fail
	acksClosed bool // Close took the final acknowledgements: Acknowledge fails
	member     membership
	lastGen    uint64              // last generation given to a session's stint (session.stints)
	stints     map[uint64]*session // the live generations and their session
	seq        uint64              // last delivery sequence number
	held       map[recordKey]heldRecord
	lastPoll   []heldRef // implicit mode: the records returned by the last Poll

	// Only touched while holding op:
	seed     *session            // the session on the given connection
	sessions map[string]*session // partitioned cluster: one per partition owner, by address
	owners   bool                // the owners' sessions are in use, not the seed's
	view     clusterView         // what DescribeCluster said (owners.go)
	dial     func(addr string) (grpc.ClientConnInterface, error)
	ownConns bool                                // conns were opened by Config.Dial: Close closes them
	conns    map[string]grpc.ClientConnInterface // by address
	hot      bool                                // the last Poll returned records
	turn     int                                 // rotates the larger shares of MaxRecords (shareOut)
	metaAt   time.Time                           // fallback: when the subscribed topics were described

	metaStale atomic.Bool // fallback: describe the subscribed topics again
	viewStale atomic.Bool // read the cluster view again (paced by viewMinGap)
}

type recordKey struct {
	tp     TopicPartition
	offset int64
}

// heldRecord is a delivered record this consumer holds the lock of.
type heldRecord struct {
	seq      uint64
	gen      uint64    // the stint that delivered it (Consumer.stints)
	deadline time.Time // local estimate, never earlier than the server's
}

type heldRef struct {
	key recordKey
	seq uint64
}

// New returns a consumer of cfg.GroupID on cc (typically a *grpc.ClientConn,
// or a *router.Conn). It starts heartbeating in the background at once
// (joining the group with cfg.Topics); the share session is opened by the
// first Poll. In a partitioned cluster, see "Clusters" in the package
// documentation for Config.Dial.
func New(cc grpc.ClientConnInterface, cfg Config) (*Consumer, error) {
	if cc == nil {
		return nil, errors.New("shareconsumer: nil connection")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Consumer{
		cfg:      cfg,
		groups:   sharelogv1.NewShareGroupServiceClient(cc),
		topics:   sharelogv1.NewLogServiceClient(cc),
		log:      cfg.Logger.With("group", cfg.GroupID, "member", cfg.MemberID),
		op:       make(chan struct{}, 1),
		bgDone:   make(chan struct{}),
		stints:   make(map[uint64]*session),
		held:     make(map[recordKey]heldRecord),
		member:   newMembership(),
		seed:     newSeedSession(cc),
		sessions: make(map[string]*session),
		dial:     cfg.Dial,
		ownConns: cfg.Dial != nil,
		conns:    make(map[string]grpc.ClientConnInterface),
	}
	if rc, ok := cc.(*router.Conn); ok && c.dial == nil {
		c.dial = rc.Dial // its connections, closed by its Close
	}
	c.bgCtx, c.bgCancel = context.WithCancel(context.Background())
	go c.heartbeatLoop()
	return c, nil
}

// MemberID is the consumer's member ID (and share-session key).
func (c *Consumer) MemberID() string { return c.cfg.MemberID }

// GroupID is the consumer's share group.
func (c *Consumer) GroupID() string { return c.cfg.GroupID }

// Assignment returns the partitions the consumer fetches: its assignment
// in the group, or, against a server without ShareGroupHeartbeat, every
// partition of the subscribed topics seen so far. It is sorted.
func (c *Consumer) Assignment() []TopicPartition {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.member.mode == modeMember {
		return append([]TopicPartition(nil), c.member.assignment...)
	}
	return append([]TopicPartition(nil), c.member.fallbackParts...)
}

// Poll fetches records: it returns as soon as records are available, or an
// empty slice after about Config.MaxWait. It first sends the pending
// acknowledgements (in implicit mode, accepting the records of the previous
// Poll that were not acknowledged otherwise) with the fetch. With sessions
// on several partition owners it fetches from all of them in parallel
// (see "Clusters" in the package documentation).
//
// Transport failures are retried with backoff until ctx ends; a share
// session the server no longer knows is reopened. Poll returns ctx's error
// when ctx ends, ErrClosed once Close has started, and the other errors
// (request refused by the server, membership refused) as they are.
func (c *Consumer) Poll(ctx context.Context) ([]Record, error) {
	ctx, done, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var rep reporter
	defer c.deliver(&rep)
	defer c.settleDoubts()
	c.implicitAccept()
	if err := c.awaitMembership(ctx); err != nil {
		return nil, c.ctxErr(ctx, err)
	}
	for attempt := 0; ; attempt++ {
		recs, err := c.pollOnce(ctx, &rep)
		if err == nil {
			c.hot = len(recs) > 0
			return recs, nil
		}
		if err := c.retryWait(ctx, err, attempt); err != nil {
			return nil, err
		}
	}
}

// pollOnce is one attempt of Poll. On the seed's session: one fetch, as
// pollSession says. On the owners' sessions: one fetch per owner, in
// parallel; after a Poll that returned records, first without waiting
// (records are likely ready somewhere, and an owner with nothing must not
// hold them back for MaxWait), then, if none came, with the long poll.
func (c *Consumer) pollOnce(ctx context.Context, rep *reporter) ([]Record, error) {
	desired, err := c.desired(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.refreshView(ctx, rep); err != nil {
		return nil, err
	}
	if !c.owners {
		return c.pollSession(ctx, c.seed, desired, rep, c.maxWait(ctx), c.cfg.MaxRecords)
	}
	plan := c.route(ctx, desired, rep)
	switch len(plan) {
	case 0:
		// Nothing assigned, or no owner known yet: wait for a change.
		c.waitForChange(ctx, c.maxWait(ctx))
		return nil, ctx.Err()
	case 1:
		for s, parts := range plan {
			return c.pollSession(ctx, s, parts, rep, c.maxWait(ctx), c.cfg.MaxRecords)
		}
	}
	if c.hot {
		if recs, err := c.fetchAll(ctx, plan, 0, rep); len(recs) > 0 || err != nil {
			return recs, err
		}
	}
	return c.fetchAll(ctx, plan, c.maxWait(ctx), rep)
}

// Acknowledge settles a record returned by Poll: Accept, Release or Reject
// (final: later calls for the record return ErrNotHeld), or Renew (extends
// its lock; the record must still be settled). Acknowledgements are sent
// with the next Poll, Commit or Close; the outcome goes to
// Config.OnAcknowledgement and Commit's result. A record whose session ended
// returns ErrSessionEnded, one whose lock expired ErrLockExpired.
func (c *Consumer) Acknowledge(r Record, t AckType) error {
	if !t.valid() {
		return fmt.Errorf("shareconsumer: invalid acknowledgement type %v", t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.acksClosed {
		return ErrClosed
	}
	if r.seq == 0 {
		return ErrNotHeld
	}
	s := c.stints[r.gen]
	if s == nil {
		return ErrSessionEnded
	}
	key := recordKey{tp: r.TopicPartition(), offset: r.Offset}
	h, ok := c.held[key]
	if !ok || h.seq != r.seq {
		return ErrNotHeld
	}
	if time.Now().After(h.deadline) {
		delete(c.held, key)
		return ErrLockExpired
	}
	s.pending.add(key.tp, key.offset, t)
	if t.final() {
		delete(c.held, key)
	}
	return nil
}

// Commit sends the pending acknowledgements now (in implicit mode, with the
// records of the last Poll not acknowledged otherwise accepted) and returns
// their outcome per partition. It returns a nil slice when nothing was
// pending. Transport failures are retried with backoff until ctx ends.
func (c *Consumer) Commit(ctx context.Context) ([]AckResult, error) {
	ctx, done, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var rep reporter
	defer c.deliver(&rep)
	defer c.settleDoubts()
	c.implicitAccept()
	for attempt := 0; ; attempt++ {
		err := c.commitOnce(ctx, &rep)
		if err == nil {
			return rep.results, nil
		}
		if err := c.retryWait(ctx, err, attempt); err != nil {
			return rep.results, err
		}
	}
}

// commitOnce is one attempt of Commit: every session sends its pending
// acknowledgements (the first error is returned, after the others tried).
func (c *Consumer) commitOnce(ctx context.Context, rep *reporter) error {
	var first error
	for _, s := range c.allSessions() {
		if err := c.commitSession(ctx, s, rep); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *Consumer) commitSession(ctx context.Context, s *session, rep *reporter) error {
	if d := s.inDoubt; d != nil && d.ack != nil {
		if err := c.acknowledge(ctx, s, d.ack, d.acks, rep, true); err != nil {
			return err
		}
	}
	s.settleDoubt() // (a fetch: only Poll resends those)
	if s.needClose {
		if s.uncertain.empty() && c.pendingEmpty(s) {
			return nil // nothing to send; the next Poll reopens the session
		}
		// The session's epoch is unknown: only the closing epoch (-1) can
		// still deliver its acknowledgements.
		return c.closeSession(ctx, s, rep)
	}
	if s.epoch == 0 {
		return nil // no session: nothing can be pending
	}
	return c.sendAcks(ctx, s, rep)
}

// Close ends the consumer: it sends the pending acknowledgements (in
// implicit mode accepting the last Poll's records) with the final share
// session epoch (-1) of every session (in parallel), which releases every
// record still held, then leaves the group. A Poll in progress returns ErrClosed. Without a deadline on
// ctx, Close gives up after DefaultCloseTimeout. Calling Close again is a
// no-op.
func (c *Consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.bgCancel() // stops heartbeating and interrupts a Poll in progress

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultCloseTimeout)
		defer cancel()
	}
	var errs []error
	select {
	case c.op <- struct{}{}:
		defer func() { <-c.op }()
		errs = append(errs, c.closeFinal(ctx), c.closeConns())
	case <-ctx.Done():
		c.mu.Lock()
		c.acksClosed = true
		c.mu.Unlock()
		errs = append(errs, fmt.Errorf("shareconsumer: close: %w", ctx.Err()))
	}
	<-c.bgDone
	errs = append(errs, c.leave(ctx))
	return errors.Join(errs...)
}

func (c *Consumer) closeFinal(ctx context.Context) error {
	var rep reporter
	defer c.deliver(&rep)
	c.settleDoubts()
	c.implicitAccept()
	c.mu.Lock()
	c.acksClosed = true
	c.mu.Unlock()
	var open []*session
	for _, s := range c.allSessions() {
		if s.epoch != 0 || s.needClose {
			open = append(open, s)
		}
	}
	if len(open) == 1 {
		return c.closeFinalSession(ctx, open[0], &rep)
	}
	errs := make([]error, len(open))
	reps := make([]reporter, len(open))
	var wg sync.WaitGroup
	for i, s := range open {
		wg.Go(func() { errs[i] = c.closeFinalSession(ctx, s, &reps[i]) })
	}
	wg.Wait()
	for i := range reps {
		rep.results = append(rep.results, reps[i].results...)
	}
	return errors.Join(errs...)
}

// closeFinalSession closes one session for good, retrying until ctx ends;
// an owner's session (a partitioned cluster) only a few times: an owner
// that cannot be reached is likely gone, which released its records, and
// must not hold up Close for the others.
func (c *Consumer) closeFinalSession(ctx context.Context, s *session, rep *reporter) error {
	for attempt := 0; ; attempt++ {
		err := c.closeSession(ctx, s, rep)
		if err == nil {
			return nil
		}
		var t transient
		if !errors.As(err, &t) || ctx.Err() != nil || (s.addr != "" && attempt+1 >= ownerCloseAttempts) {
			c.endSession(s, rep)
			return fmt.Errorf("shareconsumer: closing the share session: %w", err)
		}
		if !sleep(ctx, c.cfg.Backoff.Delay(attempt)) {
			c.endSession(s, rep)
			return fmt.Errorf("shareconsumer: closing the share session: %w (last error: %v)", ctx.Err(), t.err)
		}
	}
}

// begin takes the op lock and returns ctx cancelled also when Close starts.
func (c *Consumer) begin(ctx context.Context) (context.Context, func(), error) {
	select {
	case c.op <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-c.bgCtx.Done():
		return nil, nil, ErrClosed
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		<-c.op
		return nil, nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.bgCtx, cancel)
	return ctx, func() {
		stop()
		cancel()
		<-c.op
	}, nil
}

// ctxErr is the error to return once ctx has ended (err otherwise).
func (c *Consumer) ctxErr(ctx context.Context, err error) error {
	if !ended(ctx) {
		return err
	}
	if c.bgCtx.Err() != nil {
		return ErrClosed
	}
	<-ctx.Done() // past the deadline: its timer fires at once
	return ctx.Err()
}

// transient marks an error worth retrying after a backoff.
type transient struct{ err error }

func (t transient) Error() string { return t.err.Error() }
func (t transient) Unwrap() error { return t.err }

// retryWait returns nil after sleeping the backoff if err is worth
// retrying, else the error to return.
func (c *Consumer) retryWait(ctx context.Context, err error, attempt int) error {
	if ended(ctx) {
		return c.ctxErr(ctx, err)
	}
	var t transient
	switch {
	case errors.Is(err, errRetryNow):
		if attempt == 0 {
			return nil
		}
	case errors.As(err, &t):
		c.log.Warn("share group request failed; retrying", "attempt", attempt+1, "err", t.err)
	default:
		return err
	}
	if !sleep(ctx, c.cfg.Backoff.Delay(attempt)) {
		return c.ctxErr(ctx, err)
	}
	return nil
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// callContext bounds one request by its long poll plus RequestTimeout and
// adds the client ID.
func (c *Consumer) callContext(ctx context.Context, longPoll time.Duration) (context.Context, context.CancelFunc) {
	if c.cfg.ClientID != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-client-id", c.cfg.ClientID)
	}
	if c.cfg.RequestTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, longPoll+c.cfg.RequestTimeout)
}

// implicitAccept accepts the records of the last Poll not acknowledged
// otherwise (implicit mode). Records whose lock has expired are skipped: an
// acknowledgement of one of them would fail its whole partition entry.
func (c *Consumer) implicitAccept() {
	if c.cfg.AckMode != AckImplicit {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ref := range c.lastPoll {
		h, ok := c.held[ref.key]
		if !ok || h.seq != ref.seq {
			continue
		}
		delete(c.held, ref.key)
		s := c.stints[h.gen]
		if s == nil || now.After(h.deadline) {
			continue
		}
		s.pending.add(ref.key.tp, ref.key.offset, Accept)
	}
	c.lastPoll = nil
}

func (c *Consumer) pendingEmpty(s *session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.pending.empty()
}

// takePending removes and returns the session's pending acknowledgements,
// renewals included or not.
func (c *Consumer) takePending(s *session, withRenew bool) ackSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	if withRenew || !s.pending.hasRenew() {
		out := s.pending
		s.pending = ackSet{}
		return out
	}
	out := s.pending.without(Renew)
	renews := ackSet{}
	for tp, m := range s.pending {
		for off, t := range m {
			if t == Renew {
				renews.add(tp, off, t)
			}
		}
	}
	s.pending = renews
	return out
}

// restorePending puts back acknowledgements that were not applied.
func (c *Consumer) restorePending(s *session, acks ackSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for tp, m := range acks {
		for off, t := range m {
			if _, newer := s.pending[tp][off]; !newer {
				s.pending.add(tp, off, t)
			}
		}
	}
}

// reporter collects acknowledgement outcomes for delivery at the end of a
// call.
type reporter struct{ results []AckResult }

func (r *reporter) add(tp TopicPartition, ranges []AckRange, err error) {
	if len(ranges) > 0 {
		r.results = append(r.results, AckResult{TopicPartition: tp, Ranges: ranges, Err: err})
	}
}

// all reports every acknowledgement of s with err.
func (r *reporter) all(s ackSet, err error) {
	for _, tp := range s.partitions() {
		r.add(tp, rangesOf(s[tp]), err)
	}
}

// deliver logs failures and calls OnAcknowledgement.
func (c *Consumer) deliver(rep *reporter) {
	for _, res := range rep.results {
		if res.Err != nil {
			level := slog.LevelWarn
			if errors.Is(res.Err, ErrSessionEnded) {
				level = slog.LevelInfo
			}
			c.log.Log(context.Background(), level, "acknowledgements not applied",
				"partition", res.TopicPartition.String(), "ranges", len(res.Ranges), "err", res.Err)
		}
		if c.cfg.OnAcknowledgement != nil {
			c.cfg.OnAcknowledgement(res)
		}
	}
}
