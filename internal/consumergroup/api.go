package consumergroup

import "time"

// State is a classic group's state (doc.go "State machine").
type State uint8

const (
	Empty State = iota
	PreparingRebalance
	CompletingRebalance
	Stable
	Dead
)

// String is Kafka's name of the state (DescribeGroups, ListGroups).
func (s State) String() string {
	switch s {
	case Empty:
		return "Empty"
	case PreparingRebalance:
		return "PreparingRebalance"
	case CompletingRebalance:
		return "CompletingRebalance"
	case Stable:
		return "Stable"
	case Dead:
		return "Dead"
	}
	return "Unknown"
}

// Protocol is one of a joining member's protocols (an assignor, for the
// "consumer" protocol type) with its opaque metadata.
type Protocol struct {
	Name     string
	Metadata []byte
}

// JoinRequest is a JoinGroup.
type JoinRequest struct {
	Group    string
	MemberID string // "" for a new member
	// InstanceID is the static member's group.instance.id (nil: dynamic).
	InstanceID           *string
	ClientID, ClientHost string
	ProtocolType         string
	Protocols            []Protocol
	// Topics are the topics the member subscribes to, when the transport
	// understands its protocol's metadata (OffsetDelete refuses them).
	Topics           []string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	// RequireKnownMemberID answers a new dynamic member MEMBER_ID_REQUIRED
	// with its id (Kafka's JoinGroup v4+, KIP-394).
	RequireKnownMemberID bool
	Reason               string
}

// MemberMetadata is a member's metadata of the chosen protocol, given to
// the leader.
type MemberMetadata struct {
	MemberID   string
	InstanceID *string
	Metadata   []byte
}

// JoinResponse is a JoinGroup's answer. With MEMBER_ID_REQUIRED the error
// comes with MemberID set; every other error leaves it empty.
type JoinResponse struct {
	Generation   int32
	ProtocolType string
	Protocol     string
	LeaderID     string
	MemberID     string
	// Members are set for the leader only.
	Members []MemberMetadata
	// SkipAssignment tells a static leader that replaced itself in a
	// stable group to keep the current assignment (KIP-814).
	SkipAssignment bool
}

// Assignment is the leader's assignment of one member (opaque).
type Assignment struct {
	MemberID   string
	Assignment []byte
}

// SyncRequest is a SyncGroup.
type SyncRequest struct {
	Group        string
	Generation   int32
	MemberID     string
	InstanceID   *string
	ProtocolType *string
	Protocol     *string
	Assignments  []Assignment // the leader's
}

// SyncResponse is a SyncGroup's answer.
type SyncResponse struct {
	ProtocolType string
	Protocol     string
	Assignment   []byte
}

// HeartbeatRequest is a Heartbeat.
type HeartbeatRequest struct {
	Group      string
	Generation int32
	MemberID   string
	InstanceID *string
}

// LeavingMember is one member of a LeaveGroup: by member id, or by
// instance id (then MemberID, if set, must be that instance's).
type LeavingMember struct {
	MemberID   string
	InstanceID *string
	Reason     string
}

// LeaveResult is one member's outcome; MemberID is resolved from the
// instance id.
type LeaveResult struct {
	MemberID   string
	InstanceID *string
	Err        error
}

// TopicPartitions names partitions of a topic.
type TopicPartitions struct {
	Topic      string
	Partitions []int32
}

// CommitPartition is one offset to commit.
type CommitPartition struct {
	Partition   int32
	Offset      int64
	LeaderEpoch int32 // -1: none
	Metadata    string
}

// CommitTopic is the offsets of one topic to commit.
type CommitTopic struct {
	Topic      string
	Partitions []CommitPartition
}

// CommitRequest is an OffsetCommit. Generation -1 with no member id is a
// simple commit (no group management), allowed while the group is empty.
type CommitRequest struct {
	Group      string
	Generation int32
	MemberID   string
	InstanceID *string
	Topics     []CommitTopic
	// UnknownGroupNotFound answers a commit with a generation to a group
	// that does not exist GROUP_ID_NOT_FOUND (Kafka's OffsetCommit v9+)
	// rather than ILLEGAL_GENERATION.
	UnknownGroupNotFound bool
}

// PartitionError is one partition's outcome (Err nil: done).
type PartitionError struct {
	Partition int32
	Err       error
}

// TopicErrors is the outcomes of one topic's partitions.
type TopicErrors struct {
	Topic      string
	Partitions []PartitionError
}

// CommittedOffset is one fetched offset: Offset -1 when none is committed.
type CommittedOffset struct {
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	Err         error
}

// TopicOffsets is the committed offsets of one topic.
type TopicOffsets struct {
	Topic      string
	Partitions []CommittedOffset
}

// MemberDescription is one member in DescribeGroup.
type MemberDescription struct {
	MemberID             string
	InstanceID           *string
	ClientID, ClientHost string
	Metadata             []byte // of the chosen protocol; Stable groups only
	Assignment           []byte // Stable groups only
}

// GroupDescription is DescribeGroup's answer.
type GroupDescription struct {
	Group        string
	State        State
	ProtocolType string
	Protocol     string // Stable groups only
	Generation   int32
	LeaderID     string
	Members      []MemberDescription
}

// GroupListing is one group of ListGroups.
type GroupListing struct {
	Group        string
	ProtocolType string
	State        State  // of the classic state machine
	Type         string // "classic" or "consumer" (KIP-848)
	StateName    string // Kafka's name of the state of its type
	Members      int    // of either protocol
}

// ConsumerHeartbeatRequest is a ConsumerGroupHeartbeat (KIP-848). A nil
// field is "unchanged since the last heartbeat", as in Kafka.
type ConsumerHeartbeatRequest struct {
	Group    string
	MemberID string // empty on a join: the coordinator picks one
	// MemberEpoch is 0 to join, -1 to leave, -2 for a static member to
	// leave keeping its assignment for its session, else the member's.
	MemberEpoch          int32
	InstanceID, RackID   *string
	ClientID, ClientHost string
	RebalanceTimeout     time.Duration // < 0: unchanged
	SubscribedTopics     []string      // nil: unchanged
	SubscribedRegex      *string       // nil: unchanged; RE2, matching whole names
	ServerAssignor       *string       // nil: unchanged; "" or unset: uniform
	// Owned is what the member owns now, by name (a transport drops the
	// topic ids it cannot resolve); nil: unchanged.
	Owned []TopicPartitions
}

// ConsumerHeartbeatResponse is ConsumerGroupHeartbeat's answer.
type ConsumerHeartbeatResponse struct {
	MemberID          string
	MemberEpoch       int32
	HeartbeatInterval time.Duration
	// Assignment is the member's assignment when it changed or the request
	// was a full one; nil otherwise (unchanged).
	Assignment []TopicPartitions
}

// ConsumerMemberDescription is one member of ConsumerDescribe.
type ConsumerMemberDescription struct {
	MemberID             string
	InstanceID, RackID   *string
	MemberEpoch          int32
	ClientID, ClientHost string
	SubscribedTopics     []string
	SubscribedRegex      *string
	Assignment           []TopicPartitions // what it owns now
	TargetAssignment     []TopicPartitions
}

// ConsumerGroupDescription is ConsumerGroupDescribe's answer.
type ConsumerGroupDescription struct {
	Group           string
	State           string // Empty, Assigning, Reconciling, Stable, Dead
	Epoch           int32
	AssignmentEpoch int32
	Assignor        string
	Members         []ConsumerMemberDescription
}
