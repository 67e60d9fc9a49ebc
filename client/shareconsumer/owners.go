package shareconsumer

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// A cluster in "partitioned" mode (docs/cluster.md) serves ShareFetch and
// ShareAcknowledge on the instance that receives them, for the partitions
// that instance owns; a share session lives on one instance, and a
// partition owned elsewhere is answered NOT_LEADER_OR_FOLLOWER and left out
// of it. So, with a way to reach the other instances (Config.Dial, or the
// dialer of a *router.Conn), the consumer reads the cluster view with
// LogService.DescribeCluster and keeps one session per partition owner, as
// Kafka's share consumer keeps one per leader node. Without one, or in the
// other modes (one instance owns everything), it keeps its one session on
// the connection it was given.

// Timings of following partition owners.
var (
	viewMaxAge    = 30 * time.Second       // read the cluster view again this often
	viewMinGap    = 250 * time.Millisecond // when it is stale, no more often than this
	notOwnedWait  = time.Second            // a session does not name again a partition its instance said it does not own before this
	notOwnedRetry = 5 * time.Second        // without a dialer, the one session asks again for such a partition after this
)

// ownerCloseAttempts bounds Close's attempts to close an owner's session.
const ownerCloseAttempts = 3

// clusterView is what the consumer knows of the cluster (only touched
// while holding Consumer.op).
type clusterView struct {
	read   bool      // a view was read, or the seed chosen for good reason
	readAt time.Time // last attempt
	// owners maps each partition to its owner's gRPC address ("" while no
	// instance owns it); partitioned mode only.
	owners map[TopicPartition]string
}

// newOwnerSession is a session on the partition owner at addr.
func newOwnerSession(addr string, cc grpc.ClientConnInterface) *session {
	s := newSession()
	s.addr = addr
	s.groups = sharelogv1.NewShareGroupServiceClient(cc)
	return s
}

// sessionAttr names an owner's session in logs (nothing for the seed's).
func sessionAttr(s *session) slog.Attr {
	if s.addr == "" {
		return slog.Attr{}
	}
	return slog.String("owner", s.addr)
}

// allSessions is the seed's session and the owners' (sorted by address).
func (c *Consumer) allSessions() []*session {
	out := []*session{c.seed}
	for _, addr := range slices.Sorted(maps.Keys(c.sessions)) {
		out = append(out, c.sessions[addr])
	}
	return out
}

// settleDoubts gives up, at the end of a call, on the requests still in
// doubt (see session.inDoubt).
func (c *Consumer) settleDoubts() {
	for _, s := range c.allSessions() {
		s.settleDoubt()
	}
}

// ownerFailed marks the view stale after a failed request to an owner:
// ownership may have moved, or the owner may be gone.
func (c *Consumer) ownerFailed(s *session) {
	if s.addr != "" {
		c.viewStale.Store(true)
	}
}

// notOwnedHere handles a partition that the session's instance answered
// NOT_LEADER_OR_FOLLOWER: it is not in the session (the server left it
// out), and what the session delivered of it can no longer be
// acknowledged there.
func (c *Consumer) notOwnedHere(s *session, tp TopicPartition, msg string, now time.Time, rep *reporter) {
	delete(s.parts, tp)
	c.endStint(s, tp, rep)
	c.viewStale.Store(true)
	if c.dial == nil {
		s.excluded[tp] = now.Add(notOwnedRetry)
		c.log.Warn("a partition of the assignment is served by another instance, which this consumer cannot reach (no Config.Dial): not fetched; asking again later",
			"partition", tp.String(), "retry_in", notOwnedRetry, "err", msg)
		return
	}
	s.excluded[tp] = now.Add(notOwnedWait)
	c.log.Info("partition not owned by this instance; following its owner", "partition", tp.String(), "err", msg, sessionAttr(s))
}

// refreshView reads the cluster view when it is due (never without a
// dialer: then the seed's session is the only one) and switches between
// the seed's session and the owners' when the mode changed.
func (c *Consumer) refreshView(ctx context.Context, rep *reporter) error {
	if c.dial == nil {
		return nil
	}
	age := time.Since(c.view.readAt)
	if c.view.read && age < viewMaxAge && (!c.viewStale.Load() || age < viewMinGap) {
		return nil
	}
	callCtx, cancel := c.callContext(ctx, 0)
	resp, err := c.topics.DescribeCluster(callCtx, &sharelogv1.DescribeClusterRequest{})
	cancel()
	c.view.readAt = time.Now()
	c.viewStale.Store(false)
	switch {
	case status.Code(err) == codes.Unimplemented:
		c.useOwners(ctx, false, nil, rep) // a server without DescribeCluster owns everything
	case err != nil:
		if ended(ctx) {
			return err
		}
		if c.view.read {
			c.log.Warn("reading the cluster view failed; using the last one", "err", err)
			return nil
		}
		if f := classify(ctx, err); f.retry {
			return transient{err}
		}
		c.log.Warn("reading the cluster view failed; using one share session on the given connection", "err", err)
		c.useOwners(ctx, false, nil, rep)
	case resp.GetMode() != "partitioned":
		c.useOwners(ctx, false, nil, rep)
	default:
		addrs := make(map[string]string, len(resp.GetInstances()))
		for _, in := range resp.GetInstances() {
			addrs[in.GetInstanceId()] = in.GetGrpcAddress()
		}
		owners := make(map[TopicPartition]string, len(resp.GetPartitions()))
		for _, p := range resp.GetPartitions() {
			owners[TopicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}] = addrs[p.GetOwnerId()]
		}
		c.useOwners(ctx, true, owners, rep)
	}
	return nil
}

// useOwners records the view and, when the mode changed, ends the
// sessions of the other mode: the seed's instance may also own partitions,
// and an instance keeps one session per member.
func (c *Consumer) useOwners(ctx context.Context, on bool, owners map[TopicPartition]string, rep *reporter) {
	c.view.read, c.view.owners = true, owners
	if on == c.owners {
		return
	}
	c.owners = on
	if on {
		c.log.Info("partitioned cluster: one share session per partition owner")
		c.retire(ctx, c.seed, rep)
		return
	}
	c.log.Info("one share session on the given connection")
	for _, addr := range slices.Sorted(maps.Keys(c.sessions)) {
		c.retire(ctx, c.sessions[addr], rep)
		delete(c.sessions, addr)
	}
}

// retire ends a session the consumer no longer uses: it closes it (-1)
// with its acknowledgements, once, and forgets it whatever the outcome (an
// owner that is gone released its records anyway).
func (c *Consumer) retire(ctx context.Context, s *session, rep *reporter) {
	s.settleDoubt()
	if s.epoch == 0 && !s.needClose {
		c.endSession(s, rep)
		return
	}
	if err := c.closeSession(ctx, s, rep); err != nil {
		c.log.Info("closing a share session no longer used failed; its records are released when its instance drops it", "err", err, sessionAttr(s))
		c.endSession(s, rep)
	}
}

// route splits the partitions to fetch over the owners' sessions, opening
// sessions for new owners and retiring those left without partitions. A
// partition whose owner changed leaves its old session at once: its
// records there can no longer be acknowledged. A partition without a known
// owner is not fetched until the view names one.
func (c *Consumer) route(ctx context.Context, desired []TopicPartition, rep *reporter) map[*session][]TopicPartition {
	byAddr := map[string][]TopicPartition{}
	for _, tp := range desired {
		if addr := c.view.owners[tp]; addr != "" {
			byAddr[addr] = append(byAddr[addr], tp)
		} else {
			c.viewStale.Store(true)
		}
	}
	for _, s := range c.sessions {
		c.mu.Lock()
		held := slices.Collect(maps.Keys(s.stints))
		c.mu.Unlock()
		for _, tp := range held {
			if addr := c.view.owners[tp]; addr != "" && addr != s.addr {
				c.log.Info("partition moved to another owner", "partition", tp.String(), "to", addr, sessionAttr(s))
				c.endStint(s, tp, rep)
			}
		}
	}
	plan := map[*session][]TopicPartition{}
	for addr, parts := range byAddr {
		s := c.sessions[addr]
		if s == nil {
			cc, err := c.connTo(addr)
			if err != nil {
				c.log.Warn("dialling a partition owner failed", "owner", addr, "err", err)
				c.viewStale.Store(true)
				continue
			}
			s = newOwnerSession(addr, cc)
			c.sessions[addr] = s
		}
		plan[s] = parts
	}
	for _, addr := range slices.Sorted(maps.Keys(c.sessions)) {
		if s := c.sessions[addr]; plan[s] == nil {
			c.retire(ctx, s, rep)
			delete(c.sessions, addr)
		}
	}
	return plan
}

// connTo is the connection to the instance at addr, dialled once.
func (c *Consumer) connTo(addr string) (grpc.ClientConnInterface, error) {
	if cc := c.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := c.dial(addr)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// closeConns closes the connections Config.Dial opened (those of a
// *router.Conn belong to it).
func (c *Consumer) closeConns() error {
	var errs []error
	if c.ownConns {
		for _, addr := range slices.Sorted(maps.Keys(c.conns)) {
			if cl, ok := c.conns[addr].(io.Closer); ok {
				errs = append(errs, cl.Close())
			}
		}
	}
	clear(c.conns)
	return errors.Join(errs...)
}

// fetchAll is one round of fetches, one per owner's session, in parallel,
// each waiting up to wait and asking for its share of MaxRecords. It
// returns the records of all; an owner's failure is returned only when no
// owner returned records (the caller retries it).
func (c *Consumer) fetchAll(ctx context.Context, plan map[*session][]TopicPartition, wait time.Duration, rep *reporter) ([]Record, error) {
	ss := slices.SortedFunc(maps.Keys(plan), func(a, b *session) int { return cmp.Compare(a.addr, b.addr) })
	shares := shareOut(c.cfg.MaxRecords, len(ss), c.turn)
	c.turn++
	type result struct {
		recs []Record
		err  error
		rep  reporter
	}
	res := make([]result, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() {
			r := &res[i]
			r.recs, r.err = c.pollSession(ctx, s, plan[s], &r.rep, wait, shares[i])
		})
	}
	wg.Wait()
	var recs []Record
	var errs []error
	for i := range res {
		rep.results = append(rep.results, res[i].rep.results...)
		recs = append(recs, res[i].recs...)
		if err := res[i].err; err != nil {
			if len(res[i].recs) == 0 && !errors.Is(err, errRetryNow) {
				c.log.Warn("fetching from a partition owner failed", "err", err, sessionAttr(ss[i]))
			}
			errs = append(errs, err)
		}
	}
	if len(recs) > 0 || len(errs) == 0 {
		return recs, nil
	}
	for _, err := range errs {
		var t transient
		if !errors.Is(err, errRetryNow) && !errors.As(err, &t) {
			return nil, err // refused: as a single session would report it
		}
	}
	return nil, errs[0]
}

// shareOut splits total into n shares differing by at most one, the larger
// ones starting at turn (so that no owner is always short).
func shareOut(total, n, turn int) []int {
	out := make([]int, n)
	if n == 0 {
		return out
	}
	for i := range out {
		out[i] = total / n
	}
	for i := range total % n {
		out[(turn+i)%n]++
	}
	return out
}
