package consumergroup

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/sharelog/sharelog/apierr"
)

// The "consumer" group protocol (KIP-848): ConsumerGroupHeartbeat and
// ConsumerGroupDescribe. The coordinator assigns (assign.go) and every
// member reconciles towards its target one heartbeat at a time: it first
// gives up what it must revoke (its epoch stays), then takes the target's
// partitions that no other member still owns (its epoch becomes the
// target's). A partition is owned by at most one member at a time.
// docs/consumer-groups.md "KIP-848" describes what clients see.

// Member states of the reconciliation.
const (
	cmStable     = iota // owns its target at the target's epoch
	cmRevoking          // must give up partitions first (UNREVOKED_PARTITIONS)
	cmUnreleased        // waits for partitions other members still own
)

// cmember is a member of a "consumer" protocol group.
type cmember struct {
	id                   string
	instanceID, rackID   *string
	clientID, clientHost string
	epoch, prevEpoch     int32
	state                int
	subscribed           []string // sorted
	regex                *regexp.Regexp
	regexSrc             *string
	assignor             string
	rebalanceTimeout     time.Duration
	assigned             map[string][]int32 // what it owns (and was told)
	revoking             map[string][]int32 // what it must still give up
	timer, revokeTimer   *time.Timer
	token                uint64 // tells this member's timers from a replaced one's
}

func (m *cmember) stopTimers() {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	if m.revokeTimer != nil {
		m.revokeTimer.Stop()
		m.revokeTimer = nil
	}
}

// consumerState is the KIP-848 part of a group (group.cs); guarded by
// group.mu.
type consumerState struct {
	members     map[string]*cmember
	static      map[string]string // instance id -> member id
	epoch       int32             // the group epoch
	targetEpoch int32             // the epoch target was computed at
	target      assignment
	owner       map[partKey]string // partition -> the member owning it (assigned or revoking)
	counts      map[string]int32   // partition counts the target was computed from
	token       uint64
}

func newConsumerState() *consumerState {
	return &consumerState{members: map[string]*cmember{}, static: map[string]string{},
		target: assignment{}, owner: map[partKey]string{}, counts: map[string]int32{}}
}

// consumerMode reports whether g is (now) a "consumer" protocol group
// with members.
func (g *group) consumerMode() bool { return g.cs != nil && len(g.cs.members) > 0 }

// errConsumerGroup refuses a classic call to a group of the consumer
// protocol (Kafka's answer when the group cannot be converted).
func errConsumerGroup(g *group) error {
	return apierr.New(apierr.GroupIDNotFound, "group %q is a consumer-protocol (KIP-848) group: join it with ConsumerGroupHeartbeat", g.id)
}

// validateHeartbeat checks what needs no group.
func validateHeartbeat(req *ConsumerHeartbeatRequest) error {
	if req.Group == "" {
		return apierr.New(apierr.InvalidGroupID, "the group id is empty")
	}
	switch {
	case req.MemberEpoch < -2:
		return apierr.Invalid("member epoch %d is below -2", req.MemberEpoch)
	case req.MemberEpoch == -2 && req.InstanceID == nil:
		return apierr.Invalid("member epoch -2 (static leave) needs an instance id")
	case req.MemberEpoch != 0 && req.MemberID == "":
		return apierr.New(apierr.UnknownMemberID, "member epoch %d needs a member id", req.MemberEpoch)
	case req.MemberEpoch == 0:
		if req.RebalanceTimeout < 0 {
			return apierr.Invalid("a join (member epoch 0) needs the rebalance timeout")
		}
		if req.SubscribedTopics == nil && req.SubscribedRegex == nil {
			return apierr.Invalid("a join (member epoch 0) needs the subscribed topic names or regex")
		}
		if req.Owned == nil || len(req.Owned) > 0 {
			return apierr.Invalid("a join (member epoch 0) owns no partitions: topics must be set and empty")
		}
	}
	if req.ServerAssignor != nil && *req.ServerAssignor != "" && !knownAssignor(*req.ServerAssignor) {
		return apierr.New(apierr.UnsupportedAssignor, "assignor %q is not one of %v", *req.ServerAssignor, assignorNames)
	}
	return nil
}

func compileRegex(src string) (*regexp.Regexp, error) {
	re, err := regexp.Compile("^(?:" + src + ")$")
	if err != nil {
		return nil, apierr.New(apierr.InvalidRegularExpression, "subscribed topic regex %q: %v", src, err)
	}
	return re, nil
}

// ConsumerHeartbeat is ConsumerGroupHeartbeat: join, leave, or heartbeat
// with what the member owns; the answer carries the member's epoch and,
// when it changed, its assignment.
func (c *Coordinator) ConsumerHeartbeat(ctx context.Context, req ConsumerHeartbeatRequest) (ConsumerHeartbeatResponse, error) {
	if err := validateHeartbeat(&req); err != nil {
		return ConsumerHeartbeatResponse{}, err
	}
	var re *regexp.Regexp
	if req.SubscribedRegex != nil && *req.SubscribedRegex != "" {
		var err error
		if re, err = compileRegex(*req.SubscribedRegex); err != nil {
			return ConsumerHeartbeatResponse{}, err
		}
	}
	if c.o.Taken != nil && c.o.Taken(req.Group) {
		return ConsumerHeartbeatResponse{}, apierr.New(apierr.GroupIDNotFound, "group %q is a group of another type", req.Group)
	}
	counts, err := c.consumerCounts(ctx, req, re != nil)
	if err != nil {
		return ConsumerHeartbeatResponse{}, err
	}
	g, created, err := c.lockGroup(ctx, req.Group, req.MemberEpoch == 0)
	if err != nil {
		return ConsumerHeartbeatResponse{}, err
	}
	if g == nil {
		return ConsumerHeartbeatResponse{}, apierr.New(apierr.UnknownMemberID, "member %s is not in group %q (it does not exist)", req.MemberID, req.Group)
	}
	resp, err := c.consumerHeartbeat(g, req, re, counts)
	g.mu.Unlock()
	if created && err != nil {
		c.reap(g)
	}
	return resp, err
}

// consumerCounts resolves, with no lock held, the partition counts of the
// topics the group and this request subscribe to: every topic when a
// regex is in play (Options.Topics).
func (c *Coordinator) consumerCounts(ctx context.Context, req ConsumerHeartbeatRequest, regex bool) (map[string]int32, error) {
	names := append([]string(nil), req.SubscribedTopics...)
	if g, _, err := c.lockGroup(ctx, req.Group, false); err != nil {
		return nil, err
	} else if g != nil {
		if g.cs != nil {
			for _, m := range g.cs.members {
				names = append(names, m.subscribed...)
				regex = regex || m.regex != nil
			}
		}
		g.mu.Unlock()
	}
	counts, err := c.partitionCounts(ctx, names)
	if err != nil {
		return nil, err
	}
	if regex && c.o.Topics != nil {
		all, err := c.o.Topics(ctx)
		if err != nil {
			return nil, err
		}
		for t, n := range all {
			counts[t] = n
		}
	}
	return counts, nil
}

func (c *Coordinator) consumerHeartbeat(g *group, req ConsumerHeartbeatRequest, re *regexp.Regexp, counts map[string]int32) (ConsumerHeartbeatResponse, error) {
	if len(g.members) > 0 || len(g.pending) > 0 || (g.cs == nil && g.state != Empty) {
		return ConsumerHeartbeatResponse{}, apierr.New(apierr.GroupIDNotFound, "group %q is a classic group with members", g.id)
	}
	if g.cs == nil {
		g.cs = newConsumerState()
	}
	g.protocolType = consumerProtocol
	cs := g.cs
	var m *cmember
	joined := false
	switch req.MemberEpoch {
	case -1, -2:
		m = cs.members[req.MemberID]
		if m == nil {
			return ConsumerHeartbeatResponse{}, apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", req.MemberID, g.id)
		}
		if req.MemberEpoch == -2 {
			if m.instanceID == nil || *m.instanceID != *req.InstanceID {
				return ConsumerHeartbeatResponse{}, apierr.New(apierr.FencedInstanceID, "member %s does not have instance id %s", m.id, *req.InstanceID)
			}
			// A static member leaves for its session: it keeps its
			// assignment for the instance's return (KIP-345 with 848).
			m.prevEpoch, m.epoch = m.epoch, -2
			c.consumerSession(g, m)
			return ConsumerHeartbeatResponse{MemberID: m.id, MemberEpoch: -2, HeartbeatInterval: c.o.ConsumerHeartbeatInterval}, nil
		}
		c.removeConsumer(g, m, "left")
		return ConsumerHeartbeatResponse{MemberID: m.id, MemberEpoch: -1, HeartbeatInterval: c.o.ConsumerHeartbeatInterval}, nil
	case 0:
		if req.MemberID == "" {
			req.MemberID = uuid.NewString()
		}
		if old := cs.members[req.MemberID]; old != nil {
			// It joins again (it owns nothing now): it starts over.
			c.removeConsumer(g, old, "joined again")
		}
		var inherit map[string][]int32
		if req.InstanceID != nil {
			if oldID, ok := cs.static[*req.InstanceID]; ok {
				old := cs.members[oldID]
				if old != nil && old.epoch != -2 {
					return ConsumerHeartbeatResponse{}, apierr.New(apierr.UnreleasedInstanceID,
						"instance id %s is in use by member %s of group %q", *req.InstanceID, oldID, g.id)
				}
				if old != nil {
					inherit = cs.target[old.id]
					c.removeConsumer(g, old, "replaced by its instance's new member")
				}
			}
		}
		if c.o.MaxGroupSize > 0 && len(cs.members) >= c.o.MaxGroupSize {
			return ConsumerHeartbeatResponse{}, apierr.New(apierr.GroupMaxSizeReached, "group %s is full (%d members)", g.id, c.o.MaxGroupSize)
		}
		cs.token++
		m = &cmember{id: req.MemberID, instanceID: req.InstanceID, token: cs.token,
			assigned: map[string][]int32{}, revoking: map[string][]int32{}, assignor: assignorUniform}
		if len(cs.members) == 0 {
			g.state = Stable
			c.setEmptySince(g, time.Time{})
		}
		cs.members[m.id] = m
		if m.instanceID != nil {
			cs.static[*m.instanceID] = m.id
			if inherit != nil {
				cs.target[m.id] = inherit // the sticky assignor keeps it
			}
		}
		joined = true
	default:
		m = cs.members[req.MemberID]
		if m == nil {
			return ConsumerHeartbeatResponse{}, apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", req.MemberID, g.id)
		}
		if req.MemberEpoch != m.epoch {
			if req.MemberEpoch != m.prevEpoch || m.epoch < 0 || !ownedWithin(req.Owned, m.assigned) {
				return ConsumerHeartbeatResponse{}, apierr.New(apierr.FencedMemberEpoch,
					"member %s has epoch %d, not %d: join again", m.id, m.epoch, req.MemberEpoch)
			}
			// Its last answer was lost: it goes on from its previous
			// epoch, as Kafka allows.
		}
	}
	changedSub := c.updateConsumer(m, req, re)
	c.consumerSession(g, m)
	if changedCounts := c.refreshCounts(g, counts); joined || changedSub || changedCounts {
		cs.epoch++ // one new group epoch for all of it
	}
	if cs.epoch != cs.targetEpoch {
		c.computeTarget(g)
	}
	full := req.RebalanceTimeout >= 0 && (req.SubscribedTopics != nil || req.SubscribedRegex != nil) && req.Owned != nil
	if req.Owned != nil {
		c.released(g, m, req.Owned)
	}
	changed := c.reconcile(g, m)
	resp := ConsumerHeartbeatResponse{MemberID: m.id, MemberEpoch: m.epoch, HeartbeatInterval: c.o.ConsumerHeartbeatInterval}
	if changed || full || req.MemberEpoch == 0 {
		resp.Assignment = toTopicPartitions(m.assigned)
	}
	return resp, nil
}

// ownedWithin reports whether owned (nil: unchanged) is within assigned.
func ownedWithin(owned []TopicPartitions, assigned map[string][]int32) bool {
	for _, t := range owned {
		for _, p := range t.Partitions {
			if !contains(assigned[t.Topic], p) {
				return false
			}
		}
	}
	return true
}

func contains(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// updateConsumer applies the request's member fields; it reports whether
// the subscription or assignor changed (a new group epoch).
func (c *Coordinator) updateConsumer(m *cmember, req ConsumerHeartbeatRequest, re *regexp.Regexp) bool {
	changed := false
	m.clientID, m.clientHost = req.ClientID, req.ClientHost
	if req.RackID != nil {
		m.rackID = req.RackID
	}
	if req.RebalanceTimeout >= 0 {
		m.rebalanceTimeout = req.RebalanceTimeout
	}
	if req.SubscribedTopics != nil {
		subs := append([]string(nil), req.SubscribedTopics...)
		sort.Strings(subs)
		subs = dedupe(subs)
		if fmt.Sprint(subs) != fmt.Sprint(m.subscribed) {
			changed = true
		}
		m.subscribed = subs
	}
	if req.SubscribedRegex != nil {
		src := *req.SubscribedRegex
		if (m.regexSrc == nil) != (src == "") || (m.regexSrc != nil && *m.regexSrc != src) {
			changed = true
		}
		if src == "" {
			m.regex, m.regexSrc = nil, nil
		} else {
			m.regex, m.regexSrc = re, &src
		}
	}
	if req.ServerAssignor != nil {
		a := *req.ServerAssignor
		if a == "" {
			a = assignorUniform
		}
		if a != m.assignor {
			changed = true
		}
		m.assignor = a
	}
	return changed
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// memberTopics is what m subscribes to, resolved against counts.
func (m *cmember) memberTopics(counts map[string]int32) map[string]bool {
	out := map[string]bool{}
	for _, t := range m.subscribed {
		out[t] = true
	}
	if m.regex != nil {
		for t := range counts {
			if m.regex.MatchString(t) {
				out[t] = true
			}
		}
	}
	return out
}

// refreshCounts records the partition counts of the group's subscribed
// topics; it reports whether they differ from those of the target (a
// topic created, grown or deleted: a new group epoch). A topic counts
// does not know keeps its previous count.
func (c *Coordinator) refreshCounts(g *group, counts map[string]int32) bool {
	cs := g.cs
	next := map[string]int32{}
	for _, m := range cs.members {
		for t := range m.memberTopics(counts) {
			n, ok := counts[t]
			if !ok {
				n, ok = cs.counts[t]
			}
			if ok && n > 0 {
				next[t] = n
			}
		}
	}
	changed := len(next) != len(cs.counts)
	for t, n := range next {
		if cs.counts[t] != n {
			changed = true
		}
	}
	cs.counts = next
	return changed
}

// computeTarget runs the group's assignor: the one most members ask for
// (ties: the first of assignorNames).
func (c *Coordinator) computeTarget(g *group) {
	cs := g.cs
	var ms []assignMember
	for _, m := range cs.members {
		sortBy := m.id
		if m.instanceID != nil {
			sortBy = *m.instanceID
		}
		ms = append(ms, assignMember{id: m.id, sortBy: sortBy, topics: m.memberTopics(cs.counts)})
	}
	if g.groupAssignor() == assignorRange {
		cs.target = assignRange(ms, cs.counts)
	} else {
		cs.target = assignUniform(ms, cs.counts, cs.target)
	}
	cs.targetEpoch = cs.epoch
}

// groupAssignor is the assignor computeTarget uses now.
func (g *group) groupAssignor() string {
	votes := map[string]int{}
	for _, m := range g.cs.members {
		votes[m.assignor]++
	}
	name := assignorNames[0]
	for _, n := range assignorNames {
		if votes[n] > votes[name] {
			name = n
		}
	}
	return name
}

// released drops from m's pending revocations what it no longer owns.
func (c *Coordinator) released(g *group, m *cmember, owned []TopicPartitions) {
	has := map[partKey]bool{}
	for _, t := range owned {
		for _, p := range t.Partitions {
			has[partKey{t.Topic, p}] = true
		}
	}
	for t, ps := range m.revoking {
		var keep []int32
		for _, p := range ps {
			k := partKey{t, p}
			if has[k] {
				keep = append(keep, p)
				continue
			}
			if g.cs.owner[k] == m.id {
				delete(g.cs.owner, k)
			}
		}
		if len(keep) == 0 {
			delete(m.revoking, t)
		} else {
			m.revoking[t] = keep
		}
	}
}

// reconcile moves m one step towards its target (Kafka's
// CurrentAssignmentBuilder); it reports whether m's assignment changed.
func (c *Coordinator) reconcile(g *group, m *cmember) bool {
	cs := g.cs
	if m.epoch < 0 {
		return false
	}
	if m.state == cmRevoking {
		if len(m.revoking) > 0 {
			return false // it still owns what it must give up
		}
		m.state = cmStable
		if m.revokeTimer != nil {
			m.revokeTimer.Stop()
			m.revokeTimer = nil
		}
	}
	if m.epoch == cs.targetEpoch && m.state == cmStable {
		return false
	}
	target := cs.target[m.id]
	keep := map[string][]int32{}
	revoke := map[string][]int32{}
	for t, ps := range m.assigned {
		for _, p := range ps {
			if contains(target[t], p) {
				keep[t] = append(keep[t], p)
			} else {
				revoke[t] = append(revoke[t], p)
			}
		}
	}
	if len(revoke) > 0 {
		// First give up what goes elsewhere; the epoch stays.
		m.assigned = keep
		for t, ps := range revoke {
			m.revoking[t] = append(m.revoking[t], ps...)
		}
		m.state = cmRevoking
		c.revokeDeadline(g, m)
		return true
	}
	unreleased := false
	changed := false
	for t, ps := range target {
		for _, p := range ps {
			if contains(keep[t], p) {
				continue
			}
			k := partKey{t, p}
			if o, ok := cs.owner[k]; ok && o != m.id {
				unreleased = true
				continue
			}
			cs.owner[k] = m.id
			keep[t] = append(keep[t], p)
			changed = true
		}
	}
	for t := range keep {
		sort.Slice(keep[t], func(i, j int) bool { return keep[t][i] < keep[t][j] })
	}
	m.assigned = keep
	if m.epoch != cs.targetEpoch {
		m.prevEpoch, m.epoch = m.epoch, cs.targetEpoch
		changed = true
	}
	if unreleased {
		m.state = cmUnreleased
	} else {
		m.state = cmStable
	}
	return changed
}

// revokeDeadline fences m if it has not revoked within its rebalance
// timeout.
func (c *Coordinator) revokeDeadline(g *group, m *cmember) {
	if m.revokeTimer != nil {
		m.revokeTimer.Stop()
	}
	d := m.rebalanceTimeout
	if d <= 0 {
		d = c.o.ConsumerSessionTimeout
	}
	token := m.token
	m.revokeTimer = time.AfterFunc(d, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.cs == nil || g.cs.members[m.id] != m || m.token != token || m.state != cmRevoking {
			return
		}
		c.log.Info("consumer-group member did not revoke within its rebalance timeout", "group", g.id, "member", m.id)
		c.removeConsumer(g, m, "rebalance timeout")
	})
}

// consumerSession (re)starts m's session timer.
func (c *Coordinator) consumerSession(g *group, m *cmember) {
	if m.timer != nil {
		m.timer.Stop()
	}
	token := m.token
	m.timer = time.AfterFunc(c.o.ConsumerSessionTimeout, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.cs == nil || g.cs.members[m.id] != m || m.token != token {
			return
		}
		c.log.Info("consumer-group member session expired", "group", g.id, "member", m.id)
		c.removeConsumer(g, m, "session expired")
	})
}

// removeConsumer drops m: what it owns is free, the group epoch moves.
func (c *Coordinator) removeConsumer(g *group, m *cmember, why string) {
	cs := g.cs
	if cs.members[m.id] != m {
		return
	}
	m.stopTimers()
	delete(cs.members, m.id)
	delete(cs.target, m.id)
	if m.instanceID != nil && cs.static[*m.instanceID] == m.id {
		delete(cs.static, *m.instanceID)
	}
	for k, o := range cs.owner {
		if o == m.id {
			delete(cs.owner, k)
		}
	}
	cs.epoch++
	c.log.Debug("consumer-group member removed", "group", g.id, "member", m.id, "why", why)
	if len(cs.members) == 0 {
		g.state = Empty
		c.setEmptySince(g, c.o.Now())
	}
}

// consumerTopics is the union of the consumer members' topics (resolved).
func (g *group) consumerTopics(out map[string]bool) {
	for _, m := range g.cs.members {
		for t := range m.memberTopics(g.cs.counts) {
			out[t] = true
		}
	}
}

// checkConsumerCommit validates an OffsetCommit of a consumer-protocol
// group: the member and its current epoch (Kafka's STALE_MEMBER_EPOCH).
func (g *group) checkConsumerCommit(memberID string, epoch int32) error {
	m := g.cs.members[memberID]
	if m == nil {
		return apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", memberID, g.id)
	}
	if epoch != m.epoch {
		return apierr.New(apierr.StaleMemberEpoch, "member %s has epoch %d, not %d", memberID, m.epoch, epoch)
	}
	return nil
}

func toTopicPartitions(a map[string][]int32) []TopicPartitions {
	out := make([]TopicPartitions, 0, len(a))
	for t, ps := range a {
		if len(ps) == 0 {
			continue
		}
		out = append(out, TopicPartitions{Topic: t, Partitions: append([]int32(nil), ps...)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}

// consumerStateName is Kafka's ConsumerGroupState of g.
func (g *group) consumerStateName() string {
	cs := g.cs
	switch {
	case g.state == Dead:
		return "Dead"
	case len(cs.members) == 0:
		return "Empty"
	case cs.epoch != cs.targetEpoch:
		return "Assigning"
	}
	for _, m := range cs.members {
		if m.epoch >= 0 && (m.epoch != cs.targetEpoch || m.state != cmStable) {
			return "Reconciling"
		}
	}
	return "Stable"
}

// ConsumerDescribe is ConsumerGroupDescribe of one group: GROUP_ID_NOT_FOUND
// for a group that does not exist or is a classic one.
func (c *Coordinator) ConsumerDescribe(ctx context.Context, group string) (ConsumerGroupDescription, error) {
	g, _, err := c.lockGroup(ctx, group, false)
	if err != nil {
		return ConsumerGroupDescription{}, err
	}
	if g == nil {
		return ConsumerGroupDescription{}, apierr.New(apierr.GroupIDNotFound, "group %q does not exist", group)
	}
	defer g.mu.Unlock()
	if g.cs == nil {
		if len(g.members) > 0 || g.state != Empty {
			return ConsumerGroupDescription{}, apierr.New(apierr.GroupIDNotFound, "group %q is a classic group", group)
		}
		return ConsumerGroupDescription{Group: group, State: "Empty", Assignor: assignorNames[0]}, nil
	}
	cs := g.cs
	d := ConsumerGroupDescription{Group: group, State: g.consumerStateName(), Epoch: cs.epoch,
		AssignmentEpoch: cs.targetEpoch, Assignor: g.groupAssignor()}
	ids := make([]string, 0, len(cs.members))
	for id := range cs.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := cs.members[id]
		d.Members = append(d.Members, ConsumerMemberDescription{MemberID: m.id, InstanceID: m.instanceID, RackID: m.rackID,
			MemberEpoch: m.epoch, ClientID: m.clientID, ClientHost: m.clientHost,
			SubscribedTopics: append([]string{}, m.subscribed...), SubscribedRegex: m.regexSrc,
			Assignment: toTopicPartitions(m.assigned), TargetAssignment: toTopicPartitions(cs.target[m.id])})
	}
	return d, nil
}
