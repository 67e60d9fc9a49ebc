package sharegroup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/sessioncache"
)

// namedPart is a topics[] entry after resolution (the resolution step).
type namedPart struct {
	topicID string
	ok      bool   // the topic and partition exist
	away    string // ok, but served by this owner, not here (owners.go)
}

func (m *Manager) resolveAll(ctx context.Context, es []PartitionEntry) ([]namedPart, error) {
	out := make([]namedPart, len(es))
	for i := range es {
		id, ok, err := m.resolve(ctx, es[i].TopicPartition)
		if err != nil {
			return nil, err
		}
		if want := es[i].TopicID; want != "" && ok && id != want {
			// Named by the ID of a topic deleted since: the topic now
			// bearing its name is another one.
			id, ok = "", false
		}
		out[i] = namedPart{topicID: id, ok: ok}
		if ok {
			out[i].away = m.away(id, es[i].Topic, es[i].Partition)
		}
	}
	return out, nil
}

// resultTopicID is the topic ID a result for es[i] is reported under: the
// ID the caller named it by, else the one it resolved to.
func resultTopicID(e *PartitionEntry, n namedPart) string {
	if e.TopicID != "" {
		return e.TopicID
	}
	return n.topicID
}

// sessionError maps the session step's errors to request-level errors.
func (m *Manager) sessionError(err error) error {
	var ee *sessioncache.EpochError
	switch {
	case errors.Is(err, sessioncache.ErrNotFound):
		return &apierr.Error{Reason: apierr.ShareSessionNotFound, Message: "no share session for this group and member"}
	case errors.As(err, &ee):
		return &apierr.Error{
			Reason:   apierr.InvalidShareSessionEpoch,
			Message:  fmt.Sprintf("share session epoch mismatch: expected %d", ee.Expected),
			Metadata: map[string]string{"expected_epoch": strconv.Itoa(int(ee.Expected))},
		}
	case errors.Is(err, sessioncache.ErrLimit):
		return &apierr.Error{
			Reason:   apierr.ShareSessionLimitReached,
			Message:  fmt.Sprintf("the share session cache is full (%d sessions)", m.opts.MaxShareSessions),
			Metadata: map[string]string{"max_sessions": strconv.Itoa(m.opts.MaxShareSessions)},
		}
	case errors.Is(err, sessioncache.ErrClosed):
		return ErrClosed
	}
	return err
}

// ShareFetch serves ShareFetch in this order: static validation,
// session step, resolution, acknowledgements, close/renew, acquisition with
// long-poll, response shaping.
func (m *Manager) ShareFetch(ctx context.Context, req FetchRequest) (FetchResponse, error) {
	if !m.enter() {
		return FetchResponse{}, ErrClosed
	}
	defer m.leave()
	if req.MaxWaitMs > 0 && m.opts.LongPolls != nil {
		if m.opts.LongPolls.TryAcquire(ctx) {
			defer m.opts.LongPolls.Release(ctx)
		} else {
			req.MaxWaitMs = 0 // every long-poll slot is taken: answer now
		}
	}
	if err := validateFetch(&req); err != nil {
		return FetchResponse{}, err
	}
	named, err := m.resolveAll(ctx, req.Partitions)
	if err != nil {
		return FetchResponse{}, err
	}

	// Session step.
	added := make([]bool, len(req.Partitions)) // added to the session by this request
	s, err := m.sessionStep(ctx, &req, named, added)
	if err != nil {
		return FetchResponse{}, m.sessionError(err)
	}
	defer m.sessions.Done(s)
	admitted := time.Now()
	k := s.NextFetchIndex()
	seq := m.arrivals.Add(1)
	s.Mu.Lock()
	g := s.State.g
	s.Mu.Unlock()

	// Step 3: session partitions whose topic was deleted, or which another
	// instance serves now, leave the session and are reported once.
	var gone []PartitionFetchResult
	if req.Epoch >= 0 {
		gone, err = m.dropDeleted(ctx, s)
		if err != nil {
			return FetchResponse{}, err
		}
	}

	// Step 4: acknowledgements, all complete (and durable) before acquiring.
	acks := m.processAcks(s, g, req.Partitions, named)

	// Step 5.
	if req.Epoch == -1 || req.IsRenewAck {
		if req.Epoch == -1 {
			m.sessions.End(s, sessioncache.EndClosed)
		}
		resp := FetchResponse{AcquisitionLockTimeoutMs: g.config().lockMs}
		for i := range req.Partitions {
			if a := acks[i]; a.has {
				r := PartitionFetchResult{TopicPartition: req.Partitions[i].TopicPartition, TopicID: resultTopicID(&req.Partitions[i], named[i]),
					AckErrorCode: a.code, AckErrorMessage: a.msg}
				if !named[i].ok {
					r.ErrorCode, r.ErrorMessage = apierr.UnknownTopicOrPartition, a.msg
				}
				resp.Partitions = append(resp.Partitions, r)
			}
		}
		return resp, nil
	}

	// Step 6.
	s.Mu.Lock()
	parts := slices.Clone(s.State.parts)
	s.Mu.Unlock()
	var unreadable []TopicPartition
	if req.Readable != nil {
		parts = slices.DeleteFunc(parts, func(p *sessPart) bool {
			if req.Readable(p.tp.Topic) {
				return false
			}
			unreadable = append(unreadable, p.tp)
			return true
		})
	}
	res, err := m.fetchRecords(ctx, s, parts, k, seq, admitted, &req)
	if err != nil {
		return FetchResponse{}, err
	}
	if s.Ended() {
		// Ended while acquiring: what was taken has been released.
		for i := range res {
			res[i].records, res[i].acquired = nil, nil
		}
	}

	// Step 7.
	resp := m.shape(s, g, &req, named, added, acks, gone, parts, res)
	resp.Unreadable = unreadable
	return resp, nil
}

// sessionParts builds the fetch set of an opening session: the existing

// sessionStep is the session step of ShareFetch: epoch 0 opens a
// session (creating the group with it, never for a refused request), a
// positive epoch is admitted and applies the request's additions to the
// fetch set and its forgotten partitions, -1 admits the close. added[i]
// reports whether req.Partitions[i] joined the session's fetch set by this
// request. The caller releases the session with sessions.Done.
func (m *Manager) sessionStep(ctx context.Context, req *FetchRequest, named []namedPart, added []bool) (*session, error) {
	key := sessioncache.Key{Group: req.GroupID, Member: req.MemberID}
	var s *session
	var err error
	switch {
	case req.Epoch == 0:
		// The group is created only if the session is: a refused request
		// changes nothing.
		g := m.groupFor(req.GroupID, false)
		created := g == nil
		if created {
			g = m.newGroup(req.GroupID)
		}
		parts := m.sessionParts(g, req.Partitions, named, added)
		s, err = m.sessions.Open(ctx, key, time.Duration(req.MaxWaitMs)*time.Millisecond, func(st *sessState) {
			st.g, st.held = g, make(map[*sharePartition]struct{})
			st.index = make(map[TopicPartition]*sessPart, len(parts))
			for _, p := range parts {
				st.add(p)
			}
		})
		if err == nil {
			// Created concurrently by another request, or deleted by a
			// DeleteShareGroup meanwhile: bind the session to the group
			// that is registered now.
			if cur := m.liveGroup(g, created); cur != g {
				clear(added)
				parts := m.sessionParts(cur, req.Partitions, named, added)
				s.Mu.Lock()
				s.State.g, s.State.parts = cur, nil
				clear(s.State.index)
				for _, p := range parts {
					s.State.add(p)
				}
				s.Mu.Unlock()
			}
		}
	case req.Epoch > 0:
		var sps []*sharePartition
		if g := m.groupFor(req.GroupID, false); g != nil {
			sps = make([]*sharePartition, len(named))
			for i, n := range named {
				if n.ok && n.away == "" {
					e := &req.Partitions[i]
					sps[i] = g.partition(n.topicID, e.Topic, e.Partition, true)
				}
			}
		}
		s, err = m.sessions.Admit(ctx, key, req.Epoch, func(s *session) {
			st := &s.State
			for i, n := range named {
				tp := req.Partitions[i].TopicPartition
				if n.away != "" {
					st.remove(tp) // served elsewhere (now): not in this session
					continue
				}
				if !n.ok || sps == nil || sps[i] == nil {
					continue
				}
				switch cur := st.index[tp]; {
				case cur == nil:
					st.add(&sessPart{tp: tp, topicID: n.topicID, sp: sps[i]})
					added[i] = true
				case cur.topicID != n.topicID:
					// Named again after its topic was re-created: the new
					// topic takes the old one's place (a new object: other
					// requests of the session may be reading the old one).
					st.replace(cur, &sessPart{tp: tp, topicID: n.topicID, sp: sps[i]})
					added[i] = true
				}
			}
			for _, tp := range req.Forgotten {
				st.remove(tp)
			}
		})
	default:
		s, err = m.sessions.AdmitClose(ctx, key)
	}
	return s, err
}

// partitions named, in order.
func (m *Manager) sessionParts(g *group, es []PartitionEntry, named []namedPart, added []bool) []*sessPart {
	parts := make([]*sessPart, 0, len(named))
	for i, n := range named {
		if n.ok && n.away == "" {
			e := &es[i]
			sp := g.partition(n.topicID, e.Topic, e.Partition, true)
			if sp == nil {
				continue // the group is being deleted: the session ends with it
			}
			parts = append(parts, &sessPart{tp: e.TopicPartition, topicID: n.topicID, sp: sp})
			added[i] = true
		}
	}
	return parts
}

// liveGroup returns the group a new session of g's ID belongs to: g once
// registered (if created), or the group that replaced g if g was deleted.
func (m *Manager) liveGroup(g *group, created bool) *group {
	if created {
		g = m.register(g)
	}
	for g.isDeleted() {
		g = m.groupFor(g.id, true)
	}
	return g
}

// dropDeleted removes from the session the partitions whose topic no
// longer exists or now has another ID, and those another instance serves
// now (owners.go), and returns their results to report.
func (m *Manager) dropDeleted(ctx context.Context, s *session) ([]PartitionFetchResult, error) {
	s.Mu.Lock()
	parts := slices.Clone(s.State.parts)
	s.Mu.Unlock()
	var gone []PartitionFetchResult
	for _, sp := range parts {
		id, ok, err := m.resolve(ctx, sp.tp)
		if err != nil {
			return nil, err
		}
		switch {
		case !ok || id != sp.topicID:
			gone = append(gone, PartitionFetchResult{TopicPartition: sp.tp, TopicID: sp.topicID,
				ErrorCode: apierr.UnknownTopicOrPartition, ErrorMessage: "topic was deleted"})
		default:
			if owner := m.away(sp.topicID, sp.tp.Topic, sp.tp.Partition); owner != "" {
				gone = append(gone, PartitionFetchResult{TopicPartition: sp.tp, TopicID: sp.topicID, ErrorCode: apierr.NotOwner, ErrorMessage: notHere(owner)})
			} else if code, msg, moved := sp.sp.movedAway(); moved {
				// Served here again (its lease lost and taken back) since
				// the session took it: the share-partition the session
				// holds is the dropped one. Reported once and forgotten,
				// as a move is; naming the partition again adds the live
				// one.
				gone = append(gone, PartitionFetchResult{TopicPartition: sp.tp, TopicID: sp.topicID, ErrorCode: code, ErrorMessage: msg})
			}
		}
	}
	if len(gone) > 0 {
		s.Mu.Lock()
		for _, r := range gone {
			s.State.removeOf(r.TopicPartition, r.TopicID)
		}
		s.Mu.Unlock()
	}
	return gone, nil
}

// fetchRecords is ShareFetch's acquisition step, with long-poll,
// over the session's partitions.
func (m *Manager) fetchRecords(ctx context.Context, s *session, parts []*sessPart, k, seq uint64, admitted time.Time, req *FetchRequest) ([]partFetch, error) {
	n := len(parts)
	res := make([]partFetch, n)
	for i := range parts {
		res[i].sp = parts[i].sp
	}
	maxRecords, maxBytes := defaultMaxRecords, int64(defaultMaxBytes)
	if req.MaxRecords != nil {
		maxRecords = int(*req.MaxRecords)
	}
	if req.MaxBytes != nil {
		maxBytes = int64(*req.MaxBytes)
	}
	if maxRecords == 0 || maxBytes == 0 {
		// Explicitly nothing (as Kafka): no acquisition, no wait.
		return res, nil
	}
	maxBytes = int64(m.opts.Budget.CapFetch(int(min(maxBytes, math.MaxInt32))))
	minBytes := min(max(int64(req.MinBytes), 1), maxBytes)
	deadline := admitted.Add(time.Duration(req.MaxWaitMs) * time.Millisecond)
	startAt := 0
	if n > 0 {
		startAt = int(k % uint64(n))
	}
	// Each attempt reads records, so it first reserves its bytes of the
	// response budget (internal/budget); a dry one gives them back, a real
	// one keeps what it took until the response is written. A client at
	// its share waits for its other responses (up to what is left of
	// max_wait_ms, at least broker.BudgetWait) and then gets nothing.
	starved := false
	attempt := func(dry bool) (budget, bool, error) {
		grant, err := m.opts.Budget.Reserve(ctx, int(maxBytes), max(time.Until(deadline), broker.BudgetWait))
		if err != nil {
			return budget{}, false, err
		}
		bud := budget{records: maxRecords, bytes: int64(grant.Data), first: true, stopped: grant.Data == 0}
		starved = grant.Data == 0
		hasErr := false
		for j := range n {
			pf := &res[(startAt+j)%n]
			pf.resetResult()
			if bud.exhausted() {
				continue
			}
			if err := pf.sp.acquire(ctx, s, &bud, dry, pf); err != nil {
				grant.Release()
				return bud, false, err
			}
			hasErr = hasErr || pf.code != apierr.None
		}
		if dry {
			grant.Release()
		} else {
			grant.Settle(int(bud.mbytes), maxRecords-bud.records)
		}
		return bud, hasErr, nil
	}
	empty := func() []partFetch {
		for i := range res {
			res[i].resetResult()
		}
		return res
	}

	var w *waiter
	var timer *time.Timer
	defer func() {
		if w != nil {
			for _, p := range parts {
				p.sp.removeWaiter(w)
			}
		}
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		final := !time.Now().Before(deadline)
		if minBytes <= 1 || final {
			// Anything at all satisfies min_bytes: acquire directly, and
			// wait only if nothing came.
			bud, hasErr, err := attempt(false)
			if err != nil {
				return nil, err
			}
			if final || hasErr || starved || bud.records < maxRecords {
				return res, nil
			}
		} else {
			bud, hasErr, err := attempt(true)
			if err != nil {
				return nil, err
			}
			if starved {
				return empty(), nil
			}
			if hasErr || bud.mbytes >= minBytes || bud.exhausted() {
				if _, _, err := attempt(false); err != nil {
					return nil, err
				}
				return res, nil
			}
		}
		if w == nil {
			w = &waiter{seq: seq, wake: make(chan struct{}, 1)}
			for _, p := range parts {
				p.sp.addWaiter(w)
			}
			timer = time.NewTimer(time.Until(deadline))
			continue // evaluate again: changes from now on wake us
		}
		for _, p := range parts {
			p.sp.attempted(w)
		}
		select {
		case <-w.wake:
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.Done():
			return empty(), nil
		case <-m.closing:
			return empty(), nil
		}
	}
}

// shape builds the response and remembers which partitions reported
// an error, for the "cleared, reported once with NONE" rule.
func (m *Manager) shape(s *session, g *group, req *FetchRequest, named []namedPart, added []bool, acks []ackOutcome,
	gone []PartitionFetchResult, parts []*sessPart, res []partFetch) FetchResponse {
	resp := FetchResponse{AcquisitionLockTimeoutMs: g.config().lockMs}
	find := namedIndex(req.Partitions)
	// entryOf is the index of the request's entry for tp of the topic
	// with topicID, -1 if none: an entry naming another topic of the same
	// name (by the ID of a deleted one) is not this partition's.
	entryOf := func(tp TopicPartition, topicID string) int {
		i := find(tp)
		if i >= 0 && resultTopicID(&req.Partitions[i], named[i]) != topicID {
			return -1
		}
		return i
	}
	result := func(tp TopicPartition, topicID string, pf *partFetch) PartitionFetchResult {
		r := PartitionFetchResult{TopicPartition: tp, TopicID: topicID}
		if pf != nil {
			r.ErrorCode, r.ErrorMessage, r.Records = pf.code, pf.msg, pf.records
			r.Acquired = splitBatches(pf.acquired, req.BatchSize)
		}
		if i := entryOf(tp, topicID); i >= 0 && acks[i].has {
			r.AckErrorCode, r.AckErrorMessage = acks[i].code, acks[i].msg
		}
		return r
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if req.Epoch == 0 {
		// The session's parts are the existing named partitions, in order.
		j := 0
		for i := range req.Partitions {
			tp, id := req.Partitions[i].TopicPartition, resultTopicID(&req.Partitions[i], named[i])
			if named[i].away != "" {
				r := result(tp, id, nil)
				r.ErrorCode, r.ErrorMessage = apierr.NotOwner, notHere(named[i].away)
				resp.Partitions = append(resp.Partitions, r)
				continue
			}
			if !named[i].ok || j >= len(parts) || parts[j].tp != tp {
				resp.Partitions = append(resp.Partitions, PartitionFetchResult{TopicPartition: tp, TopicID: id,
					ErrorCode: apierr.UnknownTopicOrPartition, ErrorMessage: "topic or partition does not exist"})
				continue
			}
			resp.Partitions = append(resp.Partitions, result(tp, id, &res[j]))
			parts[j].lastErr = res[j].code != apierr.None
			j++
		}
		return resp
	}
	inFetch := make(map[TopicPartition]bool, len(parts))
	for j, p := range parts {
		inFetch[p.tp] = true
		pf := &res[j]
		i := entryOf(p.tp, p.topicID)
		include := len(pf.acquired) > 0 || pf.code != apierr.None || (i >= 0 && (added[i] || acks[i].has)) ||
			(p.lastErr && pf.code == apierr.None)
		p.lastErr = pf.code != apierr.None
		if include {
			resp.Partitions = append(resp.Partitions, result(p.tp, p.topicID, pf))
		}
	}
	for i := range req.Partitions {
		tp, id := req.Partitions[i].TopicPartition, resultTopicID(&req.Partitions[i], named[i])
		switch {
		case !named[i].ok:
			r := result(tp, id, nil)
			r.ErrorCode, r.ErrorMessage = apierr.UnknownTopicOrPartition, "topic or partition does not exist"
			resp.Partitions = append(resp.Partitions, r)
		case named[i].away != "":
			r := result(tp, id, nil)
			r.ErrorCode, r.ErrorMessage = apierr.NotOwner, notHere(named[i].away)
			resp.Partitions = append(resp.Partitions, r)
		case acks[i].has && !inFetch[tp]:
			// Acknowledged but forgotten by the same request.
			resp.Partitions = append(resp.Partitions, result(tp, id, nil))
		}
	}
	for _, r := range gone {
		if i := find(r.TopicPartition); i >= 0 && (req.Partitions[i].TopicID == "" || req.Partitions[i].TopicID == r.TopicID) {
			// Named again by this request (by name, or by this very ID):
			// reported above. A caller naming topics by ID hears of the
			// deleted topic's partition under its own ID as well.
			continue
		}
		resp.Partitions = append(resp.Partitions, r)
	}
	return resp
}

// namedIndex returns a lookup of a request's topics[] entries by name.
func namedIndex(es []PartitionEntry) func(TopicPartition) int {
	if len(es) <= 16 {
		return func(tp TopicPartition) int {
			for i := range es {
				if es[i].TopicPartition == tp {
					return i
				}
			}
			return -1
		}
	}
	idx := make(map[TopicPartition]int, len(es))
	for i := range es {
		idx[es[i].TopicPartition] = i
	}
	return func(tp TopicPartition) int {
		if i, ok := idx[tp]; ok {
			return i
		}
		return -1
	}
}

// splitBatches cuts acquired runs longer than batchSize into pieces of
// batchSize records from their first offset.
func splitBatches(rs []AcquiredRange, batchSize int32) []AcquiredRange {
	if batchSize <= 0 {
		return rs
	}
	b := int64(batchSize)
	long := false
	for _, r := range rs {
		if r.LastOffset-r.FirstOffset+1 > b {
			long = true
			break
		}
	}
	if !long {
		return rs
	}
	var out []AcquiredRange
	for _, r := range rs {
		for f := r.FirstOffset; f <= r.LastOffset; f += b {
			out = append(out, AcquiredRange{FirstOffset: f, LastOffset: min(f+b-1, r.LastOffset), DeliveryCount: r.DeliveryCount})
		}
	}
	return out
}
