package consumergroup

import (
	"bytes"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

// consumerProtocol is the protocol type of Kafka consumers.
const consumerProtocol = "consumer"

type partKey struct {
	topic     string
	partition int32
}

type joinResult struct {
	resp JoinResponse
	err  error
}

type syncResult struct {
	resp SyncResponse
	err  error
}

// member is a member of a group, or a pending one (given its id by
// MEMBER_ID_REQUIRED, not yet joined again).
type member struct {
	id                   string
	instanceID           *string
	clientID, clientHost string
	protoType            string
	protocols            []Protocol
	topics               []string
	sessionTimeout       time.Duration
	rebalanceTimeout     time.Duration
	assignment           []byte
	seq                  uint64 // join order: the first is leader when none is left

	// joinCh and syncCh are set while a JoinGroup or SyncGroup waits for
	// the rebalance (buffered: a reply never blocks, even if the caller
	// is gone).
	joinCh chan joinResult
	syncCh chan syncResult

	timer *time.Timer // the session timeout
}

func (m *member) stopTimer() {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
}

func (m *member) sameProtocols(ps []Protocol) bool {
	if len(m.protocols) != len(ps) {
		return false
	}
	for i := range ps {
		if m.protocols[i].Name != ps[i].Name || !bytes.Equal(m.protocols[i].Metadata, ps[i].Metadata) {
			return false
		}
	}
	return true
}

func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// group is one classic group. Every field is guarded by mu.
type group struct {
	id string
	mu sync.Mutex

	state        State
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	pending      map[string]*member
	static       map[string]string // instance id -> member id
	protocols    map[string]int    // protocol name -> members supporting it

	// The rebalance: token tells a timer of an earlier one apart;
	// initialDelay is set while the first rebalance of an empty group
	// waits (Options.InitialRebalanceDelay), newMember when a member
	// joined meanwhile.
	token          uint64
	rebalanceTimer *time.Timer
	initialDelay   bool
	newMember      bool
	pendingSync    map[string]bool
	syncTimer      *time.Timer

	offsets    map[partKey]groupoffsets.Offset
	emptySince time.Time // when it last became empty (zero: it has members)
	// stored is the store's Meta of the group.
	stored groupoffsets.Meta
	// cs is the consumer-protocol (KIP-848) state, nil for a group that
	// never had such a member (consumer.go).
	cs *consumerState
}

func newGroup(id string) *group {
	return &group{id: id, members: map[string]*member{}, pending: map[string]*member{},
		static: map[string]string{}, protocols: map[string]int{}, offsets: map[partKey]groupoffsets.Offset{}}
}

func (g *group) stopTimers() {
	if g.rebalanceTimer != nil {
		g.rebalanceTimer.Stop()
		g.rebalanceTimer = nil
	}
	if g.syncTimer != nil {
		g.syncTimer.Stop()
		g.syncTimer = nil
	}
	for _, m := range g.members {
		m.stopTimer()
	}
	for _, m := range g.pending {
		m.stopTimer()
	}
	if g.cs != nil {
		for _, m := range g.cs.members {
			m.stopTimers()
		}
	}
}

func (g *group) replyJoin(m *member, resp JoinResponse, err error) {
	if m.joinCh != nil {
		m.joinCh <- joinResult{resp, err}
		m.joinCh = nil
	}
}

func (g *group) replySync(m *member, resp SyncResponse, err error) {
	if m.syncCh != nil {
		m.syncCh <- syncResult{resp, err}
		m.syncCh = nil
	}
}

func newMemberID(clientID string, instanceID *string) string {
	prefix := clientID
	if instanceID != nil {
		prefix = *instanceID
	}
	return prefix + "-" + uuid.NewString()
}

// subscribedTopics is the union of the members' topics; nil if some
// member's subscription is unknown (its protocol metadata was not
// understood).
func (g *group) subscribedTopics() map[string]bool {
	out := map[string]bool{}
	if g.cs != nil {
		g.consumerTopics(out)
	}
	for _, m := range g.members {
		if m.topics == nil {
			return nil
		}
		for _, t := range m.topics {
			out[t] = true
		}
	}
	return out
}

// protocolsMatch reports whether a member with these protocols may join:
// an empty group takes any non-empty protocol type and protocols; a group
// with members needs the same type and a protocol every member supports.
func (g *group) protocolsMatch(m *member, protocolType string, ps []Protocol) bool {
	if protocolType == "" || len(ps) == 0 {
		return false
	}
	if len(g.members) == 0 {
		return true
	}
	if protocolType != g.protocolType {
		return false
	}
	others := len(g.members)
	if m != nil {
		others-- // the member's own earlier protocols do not count
	}
	if others == 0 {
		return true
	}
	for _, p := range ps {
		n := g.protocols[p.Name]
		if m != nil && hasProtocol(m.protocols, p.Name) {
			n--
		}
		if n >= others {
			return true
		}
	}
	return false
}

func hasProtocol(ps []Protocol, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

// addProtocols and dropProtocols keep the support counts.
func (g *group) addProtocols(m *member) {
	for _, p := range m.protocols {
		g.protocols[p.Name]++
	}
}

func (g *group) dropProtocols(m *member) {
	for _, p := range m.protocols {
		if g.protocols[p.Name]--; g.protocols[p.Name] <= 0 {
			delete(g.protocols, p.Name)
		}
	}
}

// removeMember drops m (no rebalance): its waiting calls are answered err.
func (g *group) removeMember(m *member, err error) {
	if g.members[m.id] != m {
		return
	}
	g.dropProtocols(m)
	delete(g.members, m.id)
	delete(g.pendingSync, m.id)
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
	m.stopTimer()
	g.replyJoin(m, JoinResponse{}, err)
	g.replySync(m, SyncResponse{}, err)
	if g.leader == m.id {
		g.leader = ""
	}
}

// selectProtocol is Kafka's vote: among the protocols every member
// supports, each member votes for the first of its own list; most votes
// win (ties: the name first in order).
func (g *group) selectProtocol() string {
	n := len(g.members)
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.protocols[p.Name] == n {
				votes[p.Name]++
				break
			}
		}
	}
	best, bestVotes := "", 0
	for name, v := range votes {
		if v > bestVotes || v == bestVotes && name < best {
			best, bestVotes = name, v
		}
	}
	return best
}

// sortedMembers is the members in join order.
func (g *group) sortedMembers() []*member {
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].seq < ms[j].seq })
	return ms
}

// joinResponse is m's answer for the current generation.
func (g *group) joinResponse(m *member) JoinResponse {
	r := JoinResponse{Generation: g.generation, ProtocolType: g.protocolType, Protocol: g.protocol,
		LeaderID: g.leader, MemberID: m.id}
	if m.id == g.leader {
		for _, o := range g.sortedMembers() {
			r.Members = append(r.Members, MemberMetadata{MemberID: o.id, InstanceID: o.instanceID, Metadata: o.metadata(g.protocol)})
		}
	}
	return r
}

func (g *group) maxRebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// validateInstance checks a static member's ids: UNKNOWN_MEMBER_ID if the
// instance is unknown, FENCED_INSTANCE_ID if another member holds it.
func (g *group) validateInstance(instanceID *string, memberID string) error {
	if instanceID == nil {
		return nil
	}
	known, ok := g.static[*instanceID]
	if !ok {
		return apierr.New(apierr.UnknownMemberID, "unknown group.instance.id %q in group %q", *instanceID, g.id)
	}
	if known != memberID {
		return apierr.New(apierr.FencedInstanceID, "group.instance.id %q of group %q is held by another member", *instanceID, g.id)
	}
	return nil
}
