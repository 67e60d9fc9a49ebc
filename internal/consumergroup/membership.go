package consumergroup

import (
	"context"
	"strconv"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

// Join is JoinGroup. It returns once the member is in the next generation
// (its rebalance completed), at once for the answers that need no
// rebalance, or with ctx's error if the caller goes away (the member then
// stays joined until the rebalance or its session timeout drops it, as in
// Kafka).
func (c *Coordinator) Join(ctx context.Context, req JoinRequest) (JoinResponse, error) {
	if req.Group == "" {
		return JoinResponse{}, apierr.New(apierr.InvalidGroupID, "the group id is empty")
	}
	if req.SessionTimeout < c.o.MinSessionTimeout || req.SessionTimeout > c.o.MaxSessionTimeout {
		return JoinResponse{}, apierr.New(apierr.InvalidSessionTimeout, "session timeout %v is outside [%v, %v]",
			req.SessionTimeout, c.o.MinSessionTimeout, c.o.MaxSessionTimeout)
	}
	if req.RebalanceTimeout <= 0 {
		req.RebalanceTimeout = req.SessionTimeout // JoinGroup v0 has none
	}
	if c.o.Taken != nil && c.o.Taken(req.Group) {
		return JoinResponse{}, apierr.New(apierr.GroupIDNotFound, "group %q is a group of another type", req.Group)
	}
	g, created, err := c.lockGroup(ctx, req.Group, true)
	if err != nil {
		return JoinResponse{}, err
	}
	ch, resp, err := c.join(g, req)
	g.mu.Unlock()
	if created && ch == nil && err != nil && apierr.ReasonOf(err) != apierr.MemberIDRequired {
		c.reap(g)
	}
	if ch == nil {
		return resp, err
	}
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-ctx.Done():
		return JoinResponse{}, ctx.Err()
	}
}

// join is Join under g.mu: a channel to wait on, or the answer.
func (c *Coordinator) join(g *group, req JoinRequest) (<-chan joinResult, JoinResponse, error) {
	if g.consumerMode() {
		return nil, JoinResponse{}, errConsumerGroup(g)
	}
	g.cs = nil // an empty consumer-protocol group becomes a classic one
	var known *member
	if req.MemberID != "" {
		known = g.members[req.MemberID]
	}
	if !g.protocolsMatch(known, req.ProtocolType, req.Protocols) {
		return nil, JoinResponse{}, apierr.New(apierr.InconsistentGroupProtocol,
			"protocol type %q and protocols do not match group %q's", req.ProtocolType, g.id)
	}
	if req.MemberID == "" {
		if req.InstanceID != nil {
			if old, ok := g.static[*req.InstanceID]; ok {
				if m := g.members[old]; m != nil {
					return c.replaceStatic(g, m, req)
				}
				if p := g.pending[old]; p != nil {
					p.stopTimer()
					delete(g.pending, old)
				}
				delete(g.static, *req.InstanceID)
			}
		}
		if c.o.MaxGroupSize > 0 && len(g.members)+len(g.pending) >= c.o.MaxGroupSize {
			return nil, JoinResponse{}, &apierr.Error{Reason: apierr.GroupMaxSizeReached,
				Message: "group " + g.id + " is full", Metadata: map[string]string{"max_size": strconv.Itoa(c.o.MaxGroupSize)}}
		}
		m := c.newMember(req)
		if req.InstanceID != nil {
			g.static[*req.InstanceID] = m.id
		} else if req.RequireKnownMemberID {
			// KIP-394: the member joins again with its id, so that a
			// client that never hears this answer leaves no member.
			g.pending[m.id] = m
			c.sessionTimer(g, m)
			return nil, JoinResponse{MemberID: m.id, Generation: -1}, apierr.New(apierr.MemberIDRequired,
				"join group %q again with member id %s", g.id, m.id)
		}
		return c.addMember(g, m), JoinResponse{}, nil
	}
	if err := g.validateInstance(req.InstanceID, req.MemberID); err != nil {
		return nil, JoinResponse{}, err
	}
	if p := g.pending[req.MemberID]; p != nil {
		p.stopTimer()
		delete(g.pending, p.id)
		c.update(p, req)
		return c.addMember(g, p), JoinResponse{}, nil
	}
	m := known
	if m == nil {
		return nil, JoinResponse{}, apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", req.MemberID, g.id)
	}
	switch g.state {
	case PreparingRebalance:
		return c.rejoin(g, m, req), JoinResponse{}, nil
	case CompletingRebalance:
		if m.sameProtocols(req.Protocols) {
			return nil, g.joinResponse(m), nil
		}
		return c.rejoin(g, m, req), JoinResponse{}, nil
	case Stable:
		if m.id != g.leader && m.sameProtocols(req.Protocols) {
			c.sessionTimer(g, m)
			return nil, g.joinResponse(m), nil
		}
		return c.rejoin(g, m, req), JoinResponse{}, nil
	}
	return nil, JoinResponse{}, apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", req.MemberID, g.id)
}

// errRemoved answers a call of a member the coordinator removed.
func errRemoved(g *group) error {
	return apierr.New(apierr.UnknownMemberID, "the member was removed from group %q", g.id)
}

func (c *Coordinator) newMember(req JoinRequest) *member {
	m := &member{id: newMemberID(req.ClientID, req.InstanceID), instanceID: req.InstanceID, seq: c.seq.Add(1)}
	c.update(m, req)
	return m
}

// update takes a join's fields into m (not its protocol counts).
func (c *Coordinator) update(m *member, req JoinRequest) {
	m.clientID, m.clientHost, m.protoType = req.ClientID, req.ClientHost, req.ProtocolType
	m.protocols, m.topics = req.Protocols, req.Topics
	m.sessionTimeout, m.rebalanceTimeout = req.SessionTimeout, req.RebalanceTimeout
}

// addMember puts a new member in g and rebalances; it waits for the join.
func (c *Coordinator) addMember(g *group, m *member) <-chan joinResult {
	if len(g.members) == 0 {
		g.protocolType = m.protoType // an empty group takes the first member's
	}
	g.members[m.id] = m
	g.addProtocols(m)
	ch := make(chan joinResult, 1)
	m.joinCh = ch
	if g.initialDelay {
		g.newMember = true
	}
	c.rebalance(g) // may answer at once (the channel is buffered)
	return ch
}

// rejoin updates a known member from its join and rebalances.
func (c *Coordinator) rejoin(g *group, m *member, req JoinRequest) <-chan joinResult {
	g.dropProtocols(m)
	c.update(m, req)
	g.addProtocols(m)
	if m.joinCh != nil {
		// An earlier join of the same member is superseded.
		g.replyJoin(m, JoinResponse{}, apierr.New(apierr.UnknownMemberID, "member %s joined again", m.id))
	}
	ch := make(chan joinResult, 1)
	m.joinCh = ch
	c.rebalance(g)
	return ch
}

// replaceStatic is a static member's join under a known instance id with
// no member id (KIP-345): a new member id replaces the old member, which
// is fenced, and takes its assignment and its join's protocols; a stable
// group whose protocol vote stays the same does not rebalance (as Kafka,
// changed metadata alone does not: a restarted client's metadata carries
// its new generation -1).
func (c *Coordinator) replaceStatic(g *group, old *member, req JoinRequest) (<-chan joinResult, JoinResponse, error) {
	m := c.newMember(req)
	m.seq, m.assignment = old.seq, old.assignment
	wasLeader := g.leader == old.id
	_, pendingSync := g.pendingSync[old.id]
	g.removeMember(old, apierr.New(apierr.FencedInstanceID, "group.instance.id %q joined again as another member", *req.InstanceID))
	g.members[m.id] = m
	g.addProtocols(m)
	g.static[*req.InstanceID] = m.id
	if wasLeader {
		g.leader = m.id
	}
	if pendingSync {
		g.pendingSync[m.id] = true
	}
	if g.state == Stable && g.selectProtocol() == g.protocol {
		c.sessionTimer(g, m)
		r := g.joinResponse(m)
		r.SkipAssignment = m.id == g.leader
		return nil, r, nil
	}
	ch := make(chan joinResult, 1)
	m.joinCh = ch
	c.rebalance(g)
	return ch, JoinResponse{}, nil
}

// rebalance starts a rebalance unless one is preparing, in which case it
// completes it if everyone has joined.
func (c *Coordinator) rebalance(g *group) {
	if g.state == PreparingRebalance {
		c.maybeCompleteJoin(g)
		return
	}
	if g.state == CompletingRebalance {
		for _, m := range g.members {
			m.assignment = nil
			g.replySync(m, SyncResponse{}, apierr.New(apierr.RebalanceInProgress, "group %q is rebalancing", g.id))
		}
	}
	g.clearPendingSync()
	wasEmpty := g.state == Empty
	g.state = PreparingRebalance
	if wasEmpty && !g.emptySince.IsZero() {
		c.setEmptySince(g, time.Time{})
	}
	g.token++
	tok := g.token
	if g.rebalanceTimer != nil {
		g.rebalanceTimer.Stop()
	}
	timeout := g.maxRebalanceTimeout()
	if wasEmpty && c.o.InitialRebalanceDelay > 0 {
		// Kafka's InitialDelayedJoin: wait for more members, by the
		// delay again while they keep coming, within the rebalance
		// timeout.
		g.initialDelay, g.newMember = true, false
		d := min(c.o.InitialRebalanceDelay, timeout)
		c.initialDelayTimer(g, tok, d, timeout-d)
		return
	}
	g.initialDelay = false
	g.rebalanceTimer = time.AfterFunc(timeout, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.token == tok && g.state == PreparingRebalance {
			c.completeJoin(g)
		}
	})
	c.maybeCompleteJoin(g)
}

func (c *Coordinator) initialDelayTimer(g *group, tok uint64, d, remaining time.Duration) {
	g.rebalanceTimer = time.AfterFunc(d, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.token != tok || g.state != PreparingRebalance {
			return
		}
		if g.newMember && remaining > 0 {
			g.newMember = false
			next := min(c.o.InitialRebalanceDelay, remaining)
			c.initialDelayTimer(g, tok, next, remaining-next)
			return
		}
		g.initialDelay = false
		c.completeJoin(g)
	})
}

// maybeCompleteJoin completes the join phase once every member has joined
// again and no member given its id by MEMBER_ID_REQUIRED is still to come.
func (c *Coordinator) maybeCompleteJoin(g *group) {
	if g.state != PreparingRebalance || g.initialDelay || len(g.pending) > 0 {
		return
	}
	for _, m := range g.members {
		if m.joinCh == nil {
			return
		}
	}
	c.completeJoin(g)
}

// completeJoin ends the join phase: members that did not join again are
// removed, the generation moves on, the protocol and leader are chosen
// and every joined member hears of it.
func (c *Coordinator) completeJoin(g *group) {
	if g.rebalanceTimer != nil {
		g.rebalanceTimer.Stop()
		g.rebalanceTimer = nil
	}
	g.initialDelay = false
	for _, m := range g.members {
		if m.joinCh == nil {
			g.removeMember(m, errRemoved(g))
		}
	}
	g.generation++
	g.token++
	if len(g.members) == 0 {
		g.state, g.protocol, g.leader = Empty, "", ""
		c.setEmptySince(g, c.o.Now())
		return
	}
	g.state = CompletingRebalance
	g.protocol = g.selectProtocol()
	ms := g.sortedMembers()
	if g.leader == "" || g.members[g.leader] == nil {
		g.leader = ms[0].id
	}
	g.pendingSync = map[string]bool{}
	for _, m := range ms {
		g.pendingSync[m.id] = true
		g.replyJoin(m, g.joinResponse(m), nil)
		c.sessionTimer(g, m)
	}
	tok, timeout := g.token, g.maxRebalanceTimeout()
	g.syncTimer = time.AfterFunc(timeout, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.token != tok || len(g.pendingSync) == 0 {
			return
		}
		// Members that did not send SyncGroup within the rebalance
		// timeout are removed, and the group rebalances without them.
		for id := range g.pendingSync {
			if m := g.members[id]; m != nil {
				g.removeMember(m, errRemoved(g))
			}
		}
		g.pendingSync = nil
		c.afterRemoval(g)
	})
}

func (g *group) clearPendingSync() {
	g.pendingSync = nil
	if g.syncTimer != nil {
		g.syncTimer.Stop()
		g.syncTimer = nil
	}
}

// afterRemoval is what a member's removal does to the group: a stable or
// completing group rebalances, a preparing one may now be complete, one
// left with no members at all is empty.
func (c *Coordinator) afterRemoval(g *group) {
	switch g.state {
	case Stable, CompletingRebalance:
		if len(g.members) == 0 {
			g.clearPendingSync()
			g.state, g.protocol, g.leader = Empty, "", ""
			g.generation++
			g.token++
			c.setEmptySince(g, c.o.Now())
			return
		}
		c.rebalance(g)
	case PreparingRebalance:
		c.maybeCompleteJoin(g)
	}
}

// sessionTimer (re)starts m's session timeout. A member waiting in a
// JoinGroup or SyncGroup is kept alive; any other that does not heartbeat
// in time is removed.
func (c *Coordinator) sessionTimer(g *group, m *member) {
	m.stopTimer()
	var t *time.Timer
	t = time.AfterFunc(m.sessionTimeout, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if m.timer != t {
			return
		}
		if g.pending[m.id] == m {
			delete(g.pending, m.id)
			m.timer = nil
			c.maybeCompleteJoin(g)
			return
		}
		if g.members[m.id] != m {
			return
		}
		if m.joinCh != nil || m.syncCh != nil {
			c.sessionTimer(g, m)
			return
		}
		c.log.Info("consumer-group member session expired", "group", g.id, "member", m.id)
		g.removeMember(m, errRemoved(g))
		c.afterRemoval(g)
	})
	m.timer = t
}

// setEmptySince records when g became empty (zero: not empty), the start
// of its offsets' retention. A failure is logged: the offsets stay.
func (c *Coordinator) setEmptySince(g *group, t time.Time) {
	g.emptySince = t
	c.persistEmptySince(g)
}

// persistEmptySince writes the group's Meta (its protocol type and
// emptySince) unless the store has it, or the group has no offsets (a
// group without offsets is not stored).
func (c *Coordinator) persistEmptySince(g *group) {
	m := groupoffsets.Meta{ProtocolType: g.protocolType, EmptySince: g.emptySince}
	if len(g.offsets) == 0 || m.ProtocolType == g.stored.ProtocolType && m.EmptySince.Equal(g.stored.EmptySince) {
		return
	}
	if err := c.store.SetMeta(g.id, m); err != nil {
		c.log.Warn("record when a consumer group became empty", "group", g.id, "error", err)
		return
	}
	g.stored = m
}

// Sync is SyncGroup: the leader's assignment is handed to every member.
func (c *Coordinator) Sync(ctx context.Context, req SyncRequest) (SyncResponse, error) {
	if req.Group == "" {
		return SyncResponse{}, apierr.New(apierr.InvalidGroupID, "the group id is empty")
	}
	g, _, err := c.lockGroup(ctx, req.Group, false)
	if err != nil {
		return SyncResponse{}, err
	}
	if g == nil {
		return SyncResponse{}, apierr.New(apierr.UnknownMemberID, "group %q has no members", req.Group)
	}
	ch, resp, err := c.sync(g, req)
	g.mu.Unlock()
	if ch == nil {
		return resp, err
	}
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-ctx.Done():
		return SyncResponse{}, ctx.Err()
	}
}

func (c *Coordinator) sync(g *group, req SyncRequest) (<-chan syncResult, SyncResponse, error) {
	if err := g.validateInstance(req.InstanceID, req.MemberID); err != nil {
		return nil, SyncResponse{}, err
	}
	m := g.members[req.MemberID]
	if m == nil {
		return nil, SyncResponse{}, apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", req.MemberID, g.id)
	}
	if req.Generation != g.generation {
		return nil, SyncResponse{}, apierr.New(apierr.IllegalGeneration, "generation %d is not group %q's %d", req.Generation, g.id, g.generation)
	}
	if req.ProtocolType != nil && *req.ProtocolType != g.protocolType || req.Protocol != nil && *req.Protocol != g.protocol {
		return nil, SyncResponse{}, apierr.New(apierr.InconsistentGroupProtocol, "protocol does not match group %q's", g.id)
	}
	switch g.state {
	case PreparingRebalance:
		return nil, SyncResponse{}, apierr.New(apierr.RebalanceInProgress, "group %q is rebalancing", g.id)
	case CompletingRebalance:
		delete(g.pendingSync, m.id)
		m.syncCh = make(chan syncResult, 1)
		ch := m.syncCh
		if m.id == g.leader {
			for _, o := range g.members {
				o.assignment = nil
			}
			for _, a := range req.Assignments {
				if o := g.members[a.MemberID]; o != nil {
					o.assignment = a.Assignment
				}
			}
			g.state = Stable
			for _, o := range g.members {
				if o.syncCh != nil {
					g.replySync(o, SyncResponse{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: o.assignment}, nil)
					c.sessionTimer(g, o)
				}
			}
		}
		return ch, SyncResponse{}, nil
	case Stable:
		delete(g.pendingSync, m.id)
		c.sessionTimer(g, m)
		return nil, SyncResponse{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: m.assignment}, nil
	}
	return nil, SyncResponse{}, apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", req.MemberID, g.id)
}

// Heartbeat is Heartbeat: it keeps the member's session and tells it of a
// rebalance (REBALANCE_IN_PROGRESS: join again).
func (c *Coordinator) Heartbeat(ctx context.Context, req HeartbeatRequest) error {
	if req.Group == "" {
		return apierr.New(apierr.InvalidGroupID, "the group id is empty")
	}
	g, _, err := c.lockGroup(ctx, req.Group, false)
	if err != nil {
		return err
	}
	if g == nil {
		return apierr.New(apierr.UnknownMemberID, "group %q has no members", req.Group)
	}
	defer g.mu.Unlock()
	if err := g.validateInstance(req.InstanceID, req.MemberID); err != nil {
		return err
	}
	m := g.members[req.MemberID]
	if m == nil {
		return apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", req.MemberID, g.id)
	}
	if req.Generation != g.generation {
		return apierr.New(apierr.IllegalGeneration, "generation %d is not group %q's %d", req.Generation, g.id, g.generation)
	}
	switch g.state {
	case PreparingRebalance:
		c.sessionTimer(g, m)
		return apierr.New(apierr.RebalanceInProgress, "group %q is rebalancing", g.id)
	case CompletingRebalance, Stable:
		c.sessionTimer(g, m)
		return nil
	}
	return apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", req.MemberID, g.id)
}

// Leave is LeaveGroup: each member (by id, or by instance id) leaves, and
// the group rebalances without it.
func (c *Coordinator) Leave(ctx context.Context, group string, members []LeavingMember) ([]LeaveResult, error) {
	if group == "" {
		return nil, apierr.New(apierr.InvalidGroupID, "the group id is empty")
	}
	out := make([]LeaveResult, len(members))
	g, _, err := c.lockGroup(ctx, group, false)
	if err != nil {
		return nil, err
	}
	for i, lm := range members {
		out[i] = LeaveResult{MemberID: lm.MemberID, InstanceID: lm.InstanceID}
		if g == nil {
			out[i].Err = apierr.New(apierr.UnknownMemberID, "group %q has no members", group)
			continue
		}
		id := lm.MemberID
		if lm.InstanceID != nil {
			known, ok := g.static[*lm.InstanceID]
			switch {
			case !ok:
				out[i].Err = apierr.New(apierr.UnknownMemberID, "unknown group.instance.id %q in group %q", *lm.InstanceID, group)
				continue
			case id != "" && id != known:
				out[i].Err = apierr.New(apierr.FencedInstanceID, "group.instance.id %q of group %q is held by another member", *lm.InstanceID, group)
				continue
			}
			id = known
			out[i].MemberID = id
		}
		if p := g.pending[id]; p != nil {
			p.stopTimer()
			delete(g.pending, id)
			c.maybeCompleteJoin(g)
			continue
		}
		m := g.members[id]
		if m == nil {
			out[i].Err = apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", id, group)
			continue
		}
		c.log.Debug("consumer-group member left", "group", group, "member", id, "reason", lm.Reason)
		g.removeMember(m, apierr.New(apierr.UnknownMemberID, "member %s left group %q", id, group))
		c.afterRemoval(g)
	}
	if g != nil {
		g.mu.Unlock()
	}
	return out, nil
}
