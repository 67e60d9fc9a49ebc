package shareconsumer

import (
	"context"
	"math"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// Timings of the fallback without membership, and of partitions the server
// reported unknown.
var (
	metadataMaxAge       = 10 * time.Second // re-describe the subscribed topics this often
	emptyMetadataRetry   = time.Second      // ... or this often while none of them exists
	unknownPartitionWait = 2 * time.Second  // do not fetch an unknown partition again before this
)

// session is the client side of one share session: the consumer's session
// on the seed connection, or in a partitioned cluster its session on one
// partition owner (see owners.go). Its fields are only touched while
// holding Consumer.op, except pending and stints, guarded by Consumer.mu.
type session struct {
	// addr is the owner's gRPC address; "" for the seed connection.
	addr   string
	groups sharelogv1.ShareGroupServiceClient
	// opts are the call options of its requests: the seed waits for its
	// connection (a restarting server), an owner's session fails fast so
	// that one unreachable owner does not hold up the others.
	opts []grpc.CallOption

	// epoch is the next epoch to send: 0 opens a session, then 1..MaxInt32,
	// wrapping to 1; ShareFetch and ShareAcknowledge share the sequence.
	epoch int32
	// needClose: the server may hold a session of ours whose epoch we lost
	// track of (a request failed in transport, or the epoch was refused).
	// The next request closes it (-1, which needs no epoch) to deliver the
	// pending acknowledgements, or replaces it (0).
	needClose bool
	// uncertain are acknowledgements sent in a request whose outcome is
	// unknown. They are sent again with the closing request: if the first
	// attempt applied them, that partition's entry now fails (unless they
	// fell below the start offset, which succeeds again) and they are
	// reported ErrAckOutcomeUnknown.
	uncertain ackSet
	// parts is the session's partition set as the server holds it.
	parts map[TopicPartition]bool
	// inDoubt is the request that just failed in transport, which the
	// call in progress resends unchanged (same epoch): if the first attempt
	// had been admitted the server answers INVALID_SHARE_SESSION_EPOCH, else
	// it processes the request normally. It never outlives the call: one
	// still in doubt at its end turns into needClose (see settleDoubt).
	inDoubt *doubtful

	excluded map[TopicPartition]time.Time // reported unknown or not owned here: not fetched before then

	// pending are the acknowledgements of records this session delivered,
	// not sent yet (guarded by Consumer.mu).
	pending ackSet
	// stints maps each partition this session delivered records of to the
	// generation those records carry (Record.gen; guarded by Consumer.mu).
	// A stint ends with the session, or alone when the partition leaves
	// this owner: its records can no longer be acknowledged here.
	stints map[TopicPartition]uint64
}

// doubtful is a request whose admission is unknown, with the
// acknowledgements it carried.
type doubtful struct {
	fetch *sharelogv1.ShareFetchRequest
	ack   *sharelogv1.ShareAcknowledgeRequest
	acks  ackSet
}

// settleDoubt gives up on resending the request in doubt: its
// acknowledgements become uncertain and the session is to be closed.
func (s *session) settleDoubt() {
	if s.inDoubt != nil {
		s.uncertain.merge(s.inDoubt.acks)
		s.needClose = true
		s.inDoubt = nil
	}
}

func newSession() *session {
	return &session{
		uncertain: ackSet{},
		parts:     map[TopicPartition]bool{},
		excluded:  map[TopicPartition]time.Time{},
		pending:   ackSet{},
		stints:    map[TopicPartition]uint64{},
	}
}

// newSeedSession is the session on the consumer's own connection.
func newSeedSession(cc grpc.ClientConnInterface) *session {
	s := newSession()
	s.groups = sharelogv1.NewShareGroupServiceClient(cc)
	s.opts = []grpc.CallOption{grpc.WaitForReady(true)}
	return s
}

// advance moves to the next epoch after an admitted request.
func (s *session) advance() {
	if s.epoch == math.MaxInt32 {
		s.epoch = 1
	} else {
		s.epoch++
	}
}

// pollSession is one attempt of one session's share of a Poll: resend a
// request in doubt, recover the session if needed, flush renewals, then one
// ShareFetch carrying the session's pending acknowledgements, for desired
// (the partitions this session should hold), waiting up to wait for at most
// maxRecords records.
func (c *Consumer) pollSession(ctx context.Context, s *session, desired []TopicPartition, rep *reporter, wait time.Duration, maxRecords int) ([]Record, error) {
	if d := s.inDoubt; d != nil {
		if d.fetch != nil {
			return c.fetch(ctx, s, d.fetch, d.acks, rep, true, wait)
		}
		if err := c.acknowledge(ctx, s, d.ack, d.acks, rep, true); err != nil {
			return nil, err
		}
	}
	if s.needClose {
		if err := c.recoverSession(ctx, s, rep); err != nil {
			return nil, err
		}
	}
	if s.epoch != 0 && c.pendingHasRenew(s) {
		// A renewing ShareFetch fetches nothing: renew with ShareAcknowledge
		// (with the other pending acknowledgements), then fetch.
		if err := c.sendAcks(ctx, s, rep); err != nil {
			return nil, err
		}
	}
	desired = s.notExcluded(desired)
	if s.epoch == 0 && len(desired) == 0 {
		// Nothing to fetch (no assignment, or no subscribed topic exists):
		// wait for a change rather than open an empty session.
		c.waitForChange(ctx, wait)
		return nil, ctx.Err()
	}
	c.pruneExpired()
	req, acks := c.buildFetch(s, desired, maxRecords)
	return c.fetch(ctx, s, req, acks, rep, false, wait)
}

// fetch sends one ShareFetch (resend: the same request again, after a
// transport failure).
func (c *Consumer) fetch(ctx context.Context, s *session, req *sharelogv1.ShareFetchRequest, acks ackSet, rep *reporter, resend bool, wait time.Duration) ([]Record, error) {
	req.MaxWaitMs = int32(wait / time.Millisecond)
	callCtx, cancel := c.callContext(ctx, wait)
	resp, err := s.groups.ShareFetch(callCtx, req, s.opts...)
	cancel()
	if err != nil {
		return nil, c.requestFailed(ctx, s, err, doubtful{fetch: req, acks: acks}, resend, rep)
	}
	s.inDoubt = nil
	s.advance()
	return c.handleFetch(s, req, resp, acks, rep), nil
}

// recoverSession deals with a session in an unknown state: close it with the
// acknowledgements that need it, or let the next epoch-0 request replace it
// (which releases its records).
func (c *Consumer) recoverSession(ctx context.Context, s *session, rep *reporter) error {
	if s.uncertain.empty() && c.pendingEmpty(s) {
		c.log.Info("reopening the share session", sessionAttr(s))
		c.endSession(s, rep)
		return nil
	}
	return c.closeSession(ctx, s, rep)
}

// sendAcks sends the session's pending acknowledgements with
// ShareAcknowledge at its epoch (renewing if any is a renewal).
func (c *Consumer) sendAcks(ctx context.Context, s *session, rep *reporter) error {
	acks := c.takePending(s, true)
	if acks.empty() {
		return nil
	}
	req := &sharelogv1.ShareAcknowledgeRequest{
		GroupId:           c.cfg.GroupID,
		MemberId:          c.cfg.MemberID,
		ShareSessionEpoch: s.epoch,
		IsRenewAck:        acks.hasRenew(),
		Topics:            ackTopics(acks),
	}
	return c.acknowledge(ctx, s, req, acks, rep, false)
}

// acknowledge sends one ShareAcknowledge (resend: the same request again,
// after a transport failure).
func (c *Consumer) acknowledge(ctx context.Context, s *session, req *sharelogv1.ShareAcknowledgeRequest, acks ackSet, rep *reporter, resend bool) error {
	callCtx, cancel := c.callContext(ctx, 0)
	resp, err := s.groups.ShareAcknowledge(callCtx, req, s.opts...)
	cancel()
	if err != nil {
		return c.requestFailed(ctx, s, err, doubtful{ack: req, acks: acks}, resend, rep)
	}
	s.inDoubt = nil
	s.advance()
	got := map[TopicPartition]bool{}
	for _, tr := range resp.GetResponses() {
		for _, pr := range tr.GetPartitions() {
			tp := TopicPartition{Topic: tr.GetTopic(), Partition: pr.GetPartition()}
			got[tp] = true
			c.ackOutcome(rep, s, tp, acks[tp], pr.GetErrorCode(), pr.GetErrorMessage(), resp.GetAcquisitionLockTimeoutMs())
		}
	}
	c.missingOutcomes(rep, acks, got)
	return nil
}

// closeSession ends the session with epoch -1 (no epoch check), carrying the
// pending and uncertain acknowledgements; renewals are dropped (the end of
// the session releases the records anyway).
func (c *Consumer) closeSession(ctx context.Context, s *session, rep *reporter) error {
	acks := c.takePending(s, true).without(Renew)
	s.uncertain = s.uncertain.without(Renew)
	all := ackSet{}
	all.merge(s.uncertain)
	all.merge(acks)
	req := &sharelogv1.ShareAcknowledgeRequest{
		GroupId:           c.cfg.GroupID,
		MemberId:          c.cfg.MemberID,
		ShareSessionEpoch: -1,
		Topics:            ackTopics(all),
	}
	callCtx, cancel := c.callContext(ctx, 0)
	resp, err := s.groups.ShareAcknowledge(callCtx, req, s.opts...)
	cancel()
	if err != nil {
		c.ownerFailed(s)
		f := classify(ctx, err)
		switch f.outcome {
		case outcomeSessionNotFound:
			// Gone (restart, eviction) before these could apply; the
			// uncertain ones may have applied earlier.
			rep.all(acks, ErrSessionEnded)
			c.endSession(s, rep)
			return nil
		case outcomeUncertain:
			s.uncertain.merge(acks)
			s.needClose = true
			if f.retry {
				return transient{err}
			}
			return err
		default: // refused: nothing applied
			s.needClose = true
			if f.retry { // e.g. the server is shutting down: try again
				c.restorePending(s, acks)
				return transient{err}
			}
			rep.all(all, err)
			s.uncertain = ackSet{}
			return err
		}
	}
	got := map[TopicPartition]bool{}
	for _, tr := range resp.GetResponses() {
		for _, pr := range tr.GetPartitions() {
			tp := TopicPartition{Topic: tr.GetTopic(), Partition: pr.GetPartition()}
			got[tp] = true
			certain, unsure := split(all[tp], s.uncertain[tp])
			if pr.GetErrorCode() == sharelogv1.ErrorCode_ERROR_CODE_NONE {
				rep.add(tp, rangesOf(all[tp]), nil)
				continue
			}
			rep.add(tp, certain, c.ackError(s, tp, pr.GetErrorCode(), pr.GetErrorMessage()))
			rep.add(tp, unsure, ErrAckOutcomeUnknown) // perhaps applied by the first attempt
		}
	}
	for _, tp := range all.partitions() {
		if !got[tp] {
			rep.add(tp, rangesOf(all[tp]), ErrAckOutcomeUnknown)
		}
	}
	s.uncertain = ackSet{}
	c.endSession(s, rep)
	return nil
}

// endSession forgets the share session: the server released (or will
// release, when the next epoch-0 request replaces it) every record it held,
// so the acknowledgements still pending for them can never apply.
func (c *Consumer) endSession(s *session, rep *reporter) {
	c.mu.Lock()
	for _, gen := range s.stints {
		c.endStintLocked(gen)
	}
	clear(s.stints)
	dropped := s.pending.without(Renew)
	s.pending = ackSet{}
	c.mu.Unlock()
	rep.all(dropped, ErrSessionEnded)
	rep.all(s.uncertain.without(Renew), ErrAckOutcomeUnknown)
	s.uncertain = ackSet{}
	s.epoch = 0
	s.needClose = false
	clear(s.parts)
}

// endStint forgets what the session delivered of tp, which it no longer
// serves (the partition moved to another owner, which does not know the
// old owner's locks: they were released and the records will be delivered
// again): its pending acknowledgements can never apply.
func (c *Consumer) endStint(s *session, tp TopicPartition, rep *reporter) {
	c.mu.Lock()
	if gen, ok := s.stints[tp]; ok {
		c.endStintLocked(gen)
		delete(s.stints, tp)
	}
	dropped := s.pending[tp]
	delete(s.pending, tp)
	c.mu.Unlock()
	rep.add(tp, rangesOf(ackSet{tp: dropped}.without(Renew)[tp]), ErrSessionEnded)
}

// endStintLocked makes the records of generation gen unacknowledgeable
// (Acknowledge: ErrSessionEnded). Caller holds mu.
func (c *Consumer) endStintLocked(gen uint64) {
	delete(c.stints, gen)
	for k, h := range c.held {
		if h.gen == gen {
			delete(c.held, k)
		}
	}
}

// stintOf is the generation of the records of tp the session delivers now.
// Caller holds mu.
func (c *Consumer) stintOf(s *session, tp TopicPartition) uint64 {
	gen, ok := s.stints[tp]
	if !ok {
		c.lastGen++
		gen = c.lastGen
		s.stints[tp] = gen
		c.stints[gen] = s
	}
	return gen
}

// requestFailed updates the session after a failed ShareFetch or
// ShareAcknowledge at the session's epoch (0 included), and returns the
// error for the retry loop. resend: d is the second (or later) attempt of a
// request that failed in transport.
func (c *Consumer) requestFailed(ctx context.Context, s *session, err error, d doubtful, resend bool, rep *reporter) error {
	s.inDoubt = nil
	c.ownerFailed(s)
	f := classify(ctx, err)
	switch f.outcome {
	case outcomeSessionNotFound:
		c.log.Info("share session not found (server restart or idle eviction); reopening it", sessionAttr(s))
		if resend {
			// The first attempt may have been applied before the session ended.
			s.uncertain.merge(d.acks)
		} else {
			rep.all(d.acks.without(Renew), ErrSessionEnded)
		}
		c.endSession(s, rep)
		return errRetryNow
	case outcomeEpochMismatch:
		if resend {
			// The first attempt was admitted: its acknowledgements were
			// processed (with an outcome we did not see) and what it
			// acquired is held by the session.
			c.log.Info("a share session request lost in transport had been admitted; closing and reopening the session", sessionAttr(s))
			s.uncertain.merge(d.acks)
		} else {
			c.log.Warn("share session epoch refused; closing and reopening the session", "epoch", s.epoch, "err", err, sessionAttr(s))
			c.restorePending(s, d.acks)
		}
		s.needClose = true
		return errRetryNow
	case outcomeUncertain:
		if f.retry {
			s.inDoubt = &d // resent unchanged by the next attempt
			return transient{err}
		}
		s.uncertain.merge(d.acks)
		s.needClose = true
		return err
	}
	switch {
	case resend:
		// Refused now, so not admitted now; the first attempt is still in
		// doubt.
		s.uncertain.merge(d.acks)
		s.needClose = true
	case f.retry:
		c.restorePending(s, d.acks)
	default:
		rep.all(d.acks, err)
	}
	if f.retry {
		return transient{err}
	}
	return err
}

// ackError is the error reported for acknowledgements of tp refused with
// code. NOT_LEADER_OR_FOLLOWER: the instance of this session does not (or
// no longer) own tp, so it holds no lock of ours there; the owner that did
// released them when the partition moved. The acknowledgements never
// applied and the records will be delivered again: the session that held
// them ended, for that partition.
func (c *Consumer) ackError(s *session, tp TopicPartition, code sharelogv1.ErrorCode, msg string) error {
	if code == sharelogv1.ErrorCode_ERROR_CODE_NOT_LEADER_OR_FOLLOWER {
		c.log.Info("acknowledgements sent to an instance that does not own the partition: its records will be delivered again",
			"partition", tp.String(), "err", msg, sessionAttr(s))
		c.viewStale.Store(true)
		return ErrSessionEnded
	}
	if code == sharelogv1.ErrorCode_ERROR_CODE_REQUEST_TIMED_OUT {
		// The owner's answer was lost in a hop between instances
		// (OUTCOME_UNKNOWN, docs/errors.md): they may have applied.
		c.viewStale.Store(true)
		return ErrAckOutcomeUnknown
	}
	return &PartitionError{TopicPartition: tp, Code: code, Message: msg}
}

// ackOutcome reports the result of one partition's acknowledgements and
// refreshes the deadlines of renewed records.
func (c *Consumer) ackOutcome(rep *reporter, s *session, tp TopicPartition, acks map[int64]AckType, code sharelogv1.ErrorCode, msg string, lockMs int32) {
	if len(acks) == 0 {
		return
	}
	ranges := rangesOf(acks)
	if code != sharelogv1.ErrorCode_ERROR_CODE_NONE {
		err := c.ackError(s, tp, code, msg)
		rep.add(tp, ranges, err)
		if err == ErrSessionEnded {
			c.endStint(s, tp, rep)
		}
		return
	}
	rep.add(tp, ranges, nil)
	deadline := lockDeadline(time.Now(), lockMs)
	c.mu.Lock()
	defer c.mu.Unlock()
	for off, t := range acks {
		if t != Renew {
			continue
		}
		key := recordKey{tp: tp, offset: off}
		if h, ok := c.held[key]; ok {
			h.deadline = deadline
			c.held[key] = h
		}
	}
}

// lockDeadline is the local estimate of a lock's deadline: never earlier
// than the server's, which started before the response was received.
func lockDeadline(received time.Time, lockMs int32) time.Time {
	if lockMs <= 0 {
		return received.Add(365 * 24 * time.Hour) // not reported: let the server decide
	}
	return received.Add(time.Duration(lockMs) * time.Millisecond)
}

// missingOutcomes reports acknowledgements of partitions absent from a
// response (which the server always answers; never expected).
func (c *Consumer) missingOutcomes(rep *reporter, acks ackSet, got map[TopicPartition]bool) {
	for _, tp := range acks.partitions() {
		if !got[tp] {
			rep.add(tp, rangesOf(acks[tp]), ErrAckOutcomeUnknown)
		}
	}
}

// buildFetch builds the session's next ShareFetch: at epoch 0 the full
// partition set; later the changes (add/forget) and the pending
// acknowledgements. A partition acknowledged but no longer wanted is also
// forgotten, so that the acknowledgement does not add it to the session.
func (c *Consumer) buildFetch(s *session, desired []TopicPartition, maxRecords int) (*sharelogv1.ShareFetchRequest, ackSet) {
	req := &sharelogv1.ShareFetchRequest{
		GroupId:           c.cfg.GroupID,
		MemberId:          c.cfg.MemberID,
		ShareSessionEpoch: s.epoch,
		MaxRecords:        proto.Int32(int32(maxRecords)),
	}
	want := make(map[TopicPartition]bool, len(desired))
	for _, tp := range desired {
		want[tp] = true
	}
	entries := map[TopicPartition]*sharelogv1.ShareFetchPartition{}
	var acks ackSet
	var forget []TopicPartition
	if s.epoch == 0 {
		for _, tp := range desired {
			entries[tp] = &sharelogv1.ShareFetchPartition{Partition: tp.Partition}
		}
	} else {
		acks = c.takePending(s, false)
		for _, tp := range desired {
			if !s.parts[tp] {
				entries[tp] = &sharelogv1.ShareFetchPartition{Partition: tp.Partition}
			}
		}
		for tp := range s.parts {
			if !want[tp] {
				forget = append(forget, tp)
			}
		}
		for tp, m := range acks {
			entries[tp] = &sharelogv1.ShareFetchPartition{Partition: tp.Partition, AcknowledgementBatches: batchesOf(rangesOf(m))}
			if !want[tp] && !s.parts[tp] {
				forget = append(forget, tp)
			}
		}
	}
	req.Topics = fetchTopics(entries)
	req.ForgottenTopicsData = groupPartitions(forget)
	return req, acks
}

// handleFetch applies a ShareFetch response: session set, acknowledgement
// outcomes, per-partition errors, and the records.
func (c *Consumer) handleFetch(s *session, req *sharelogv1.ShareFetchRequest, resp *sharelogv1.ShareFetchResponse, acks ackSet, rep *reporter) []Record {
	if req.GetShareSessionEpoch() == 0 {
		clear(s.parts)
	}
	for _, t := range req.GetTopics() {
		for _, p := range t.GetPartitions() {
			s.parts[TopicPartition{Topic: t.GetTopic(), Partition: p.GetPartition()}] = true
		}
	}
	for _, t := range req.GetForgottenTopicsData() {
		for _, p := range t.GetPartitions() {
			delete(s.parts, TopicPartition{Topic: t.GetTopic(), Partition: p})
		}
	}

	now := time.Now()
	deadline := lockDeadline(now, resp.GetAcquisitionLockTimeoutMs())
	var recs []Record
	got := map[TopicPartition]bool{}
	for _, tr := range resp.GetResponses() {
		for _, pr := range tr.GetPartitions() {
			tp := TopicPartition{Topic: tr.GetTopic(), Partition: pr.GetPartition()}
			got[tp] = true
			c.ackOutcome(rep, s, tp, acks[tp], pr.GetAcknowledgeErrorCode(), pr.GetAcknowledgeErrorMessage(), resp.GetAcquisitionLockTimeoutMs())
			switch code := pr.GetErrorCode(); code {
			case sharelogv1.ErrorCode_ERROR_CODE_NONE:
			case sharelogv1.ErrorCode_ERROR_CODE_NOT_LEADER_OR_FOLLOWER:
				// Not (or no longer) in the session: served by another
				// instance. Follow it (owners.go), or without a way to
				// reach the others, try again later.
				c.notOwnedHere(s, tp, pr.GetErrorMessage(), now, rep)
			default:
				c.log.Warn("fetch error on a partition", "partition", tp.String(), "code", code.String(), "err", pr.GetErrorMessage())
				if code == sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION {
					// Not (or no longer) in the session; do not name it
					// again for a while.
					delete(s.parts, tp)
					s.excluded[tp] = now.Add(unknownPartitionWait)
					c.metaStale.Store(true)
				}
			}
			recs = appendRecords(recs, tp, pr)
		}
	}
	c.missingOutcomes(rep, acks, got)

	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		c.seq++
		r.gen, r.seq = c.stintOf(s, r.TopicPartition()), c.seq
		key := recordKey{tp: r.TopicPartition(), offset: r.Offset}
		c.held[key] = heldRecord{seq: r.seq, gen: r.gen, deadline: deadline}
		if c.cfg.AckMode == AckImplicit {
			c.lastPoll = append(c.lastPoll, heldRef{key: key, seq: r.seq})
		}
	}
	return recs
}

// appendRecords converts a partition's records, with their delivery counts
// from acquired_records.
func appendRecords(out []Record, tp TopicPartition, pr *sharelogv1.ShareFetchPartitionResponse) []Record {
	acq := pr.GetAcquiredRecords()
	j := 0
	for _, rec := range pr.GetRecords() {
		for j < len(acq) && acq[j].GetLastOffset() < rec.GetOffset() {
			j++
		}
		var count int32
		if j < len(acq) && acq[j].GetFirstOffset() <= rec.GetOffset() {
			count = acq[j].GetDeliveryCount()
		}
		r := Record{
			Topic:         tp.Topic,
			Partition:     tp.Partition,
			Offset:        rec.GetOffset(),
			Key:           rec.Key,
			Value:         rec.Value,
			Timestamp:     time.UnixMilli(rec.GetTimestamp()),
			DeliveryCount: count,
		}
		if hs := rec.GetHeaders(); len(hs) > 0 {
			r.Headers = make([]Header, len(hs))
			for i, h := range hs {
				r.Headers[i] = Header{Key: h.GetKey(), Value: h.GetValue()}
			}
		}
		out = append(out, r)
	}
	return out
}

// pruneExpired forgets held records whose lock has expired (explicit mode
// keeps records until acknowledged; these can no longer be).
func (c *Consumer) pruneExpired() {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, h := range c.held {
		if now.After(h.deadline) {
			delete(c.held, k)
		}
	}
}

func (c *Consumer) pendingHasRenew(s *session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.pending.hasRenew()
}

// maxWait is the long poll of the next fetch: Config.MaxWait, shortened to
// answer before ctx's deadline.
func (c *Consumer) maxWait(ctx context.Context) time.Duration {
	w := c.cfg.MaxWait
	if dl, ok := ctx.Deadline(); ok {
		rem := time.Until(dl)
		rem -= min(rem/4, 250*time.Millisecond) // time to answer
		w = max(min(w, rem), 0)
	}
	return w.Truncate(time.Millisecond)
}

// desired is the partition set to fetch: the assignment, or in the fallback
// every partition of the subscribed topics.
func (c *Consumer) desired(ctx context.Context) ([]TopicPartition, error) {
	c.mu.Lock()
	mode, parts := c.member.mode, c.member.assignment
	c.mu.Unlock()
	if mode != modeMember {
		return c.fallbackPartitions(ctx)
	}
	return parts, nil
}

// notExcluded is parts minus the partitions the session does not fetch for
// now (recently reported unknown, or not owned by its instance).
func (s *session) notExcluded(parts []TopicPartition) []TopicPartition {
	if len(s.excluded) == 0 {
		return parts
	}
	now := time.Now()
	out := make([]TopicPartition, 0, len(parts))
	for _, tp := range parts {
		if until, ok := s.excluded[tp]; ok {
			if now.Before(until) {
				continue
			}
			delete(s.excluded, tp)
		}
		out = append(out, tp)
	}
	return out
}

// fallbackPartitions lists every partition of the subscribed topics, for a
// server without ShareGroupHeartbeat, re-describing them now and then.
func (c *Consumer) fallbackPartitions(ctx context.Context) ([]TopicPartition, error) {
	c.mu.Lock()
	cached := c.member.fallbackParts
	c.mu.Unlock()
	age := time.Since(c.metaAt)
	if !c.metaAt.IsZero() && !c.metaStale.Load() && age < metadataMaxAge && (len(cached) > 0 || age < emptyMetadataRetry) {
		return cached, nil
	}
	var parts []TopicPartition
	for _, topic := range c.cfg.Topics {
		callCtx, cancel := c.callContext(ctx, 0)
		t, err := c.topics.DescribeTopic(callCtx, &sharelogv1.DescribeTopicRequest{Name: topic})
		cancel()
		if status.Code(err) == codes.NotFound {
			continue // not created yet
		}
		if err != nil {
			if !c.metaAt.IsZero() && ctx.Err() == nil {
				c.log.Warn("describing the subscribed topics failed; using the last result", "err", err)
				return cached, nil
			}
			if f := classify(ctx, err); f.retry {
				return nil, transient{err}
			}
			return nil, err
		}
		n := int32(len(t.GetPartitions()))
		if n == 0 {
			n = t.GetPartitionCount()
		}
		for p := range n {
			parts = append(parts, TopicPartition{Topic: topic, Partition: p})
		}
	}
	slices.SortFunc(parts, compareTP)
	c.metaAt = time.Now()
	c.metaStale.Store(false)
	c.mu.Lock()
	c.member.fallbackParts = parts
	c.mu.Unlock()
	return parts, nil
}

// waitForChange waits up to wait (at least 1 ms) for the assignment to
// change.
func (c *Consumer) waitForChange(ctx context.Context, wait time.Duration) {
	c.mu.Lock()
	changed := c.member.changed
	c.mu.Unlock()
	t := time.NewTimer(max(wait, time.Millisecond))
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
	}
}

// fetchTopics groups partition entries by topic, sorted.
func fetchTopics(entries map[TopicPartition]*sharelogv1.ShareFetchPartition) []*sharelogv1.ShareFetchTopic {
	tps := make([]TopicPartition, 0, len(entries))
	for tp := range entries {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, compareTP)
	var out []*sharelogv1.ShareFetchTopic
	for _, tp := range tps {
		if n := len(out); n == 0 || out[n-1].Topic != tp.Topic {
			out = append(out, &sharelogv1.ShareFetchTopic{Topic: tp.Topic})
		}
		last := out[len(out)-1]
		last.Partitions = append(last.Partitions, entries[tp])
	}
	return out
}

// ackTopics turns an ack set into ShareAcknowledge/ShareFetch topics.
func ackTopics(acks ackSet) []*sharelogv1.ShareFetchTopic {
	entries := make(map[TopicPartition]*sharelogv1.ShareFetchPartition, len(acks))
	for tp, m := range acks {
		entries[tp] = &sharelogv1.ShareFetchPartition{Partition: tp.Partition, AcknowledgementBatches: batchesOf(rangesOf(m))}
	}
	return fetchTopics(entries)
}

// groupPartitions groups partitions by topic, sorted.
func groupPartitions(tps []TopicPartition) []*sharelogv1.TopicPartitions {
	tps = slices.Clone(tps)
	slices.SortFunc(tps, compareTP)
	tps = slices.Compact(tps)
	var out []*sharelogv1.TopicPartitions
	for _, tp := range tps {
		if n := len(out); n == 0 || out[n-1].Topic != tp.Topic {
			out = append(out, &sharelogv1.TopicPartitions{Topic: tp.Topic})
		}
		last := out[len(out)-1]
		last.Partitions = append(last.Partitions, tp.Partition)
	}
	return out
}
