// Package consumergroup is the consumer-group coordinator (classic, and the
// KIP-848 consumer protocol in consumer.go) of
// sharelog (Kafka's JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
// committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, with
// DescribeGroups, ListGroups and DeleteGroups), beside internal/sharegroup.
// It follows Kafka's GroupCoordinator for classic groups; the client-side
// assignors (range, roundrobin, sticky, cooperative-sticky) are opaque
// protocol metadata and assignments to it. docs/consumer-groups.md
// describes what clients see; api.go holds the request and response
// types a transport translates to. Request-level errors and per-partition
// outcomes are *apierr.Error values (their reasons carry Kafka's codes).
//
// # Files
//
//	coordinator.go  Coordinator, Options, Open/Close, group lookup, retention, topic deletion
//	group.go        a group and its members; protocol support and selection
//	membership.go   Join, Sync, Heartbeat, Leave; the rebalance and its timers
//	offsets.go      Commit, Fetch, DeleteOffsets
//	admin.go        Describe, List, Delete
//	overview.go     Overview (either protocol, assignments decoded), OffsetsWithLag, AllOffsetsWithLag:
//	                the view of ConsumerGroupService, the CLI, the console and the metrics
//	reset.go        AlterOffsets: kafka-consumer-groups.sh --reset-offsets on an inactive group
//	consumer.go     the KIP-848 consumer protocol: ConsumerHeartbeat, ConsumerDescribe
//	assign.go       its server-side assignors, uniform and range
//
// # State machine
//
//	Empty               -> PreparingRebalance   a member joins (after the initial delay, below)
//	PreparingRebalance  -> CompletingRebalance  every member joined again (and no member given
//	                                            its id by MEMBER_ID_REQUIRED is still to come),
//	                                            or the rebalance timeout passed: members that
//	                                            did not join are removed; generation+1; the
//	                                            protocol is voted, the leader kept or chosen
//	                                            (the earliest member); every joined member is
//	                                            answered, the leader with the members' metadata
//	PreparingRebalance  -> Empty                the same, with no member left (generation+1)
//	CompletingRebalance -> Stable               the leader's SyncGroup: its assignments go to
//	                                            every member waiting in SyncGroup, and to the
//	                                            others when they send theirs
//	CompletingRebalance -> PreparingRebalance   a member joins, leaves or expires; members that
//	                                            do not send SyncGroup within the rebalance
//	                                            timeout are removed (waiting syncs answer
//	                                            REBALANCE_IN_PROGRESS)
//	Stable              -> PreparingRebalance   a new member, the leader's or a changed join,
//	                                            a leave, a session expiry
//	Empty               -> Dead                 DeleteGroups, or no offsets left (retention)
//
// A member's Heartbeat during PreparingRebalance answers
// REBALANCE_IN_PROGRESS, on which the client joins again. A member's
// session timer runs from every answer it gets and every heartbeat or
// commit; a member waiting in JoinGroup or SyncGroup is kept alive. The
// first rebalance of an empty group waits Options.InitialRebalanceDelay,
// and again by that delay while new members keep joining, within the
// rebalance timeout (Kafka's group.initial.rebalance.delay.ms).
//
// Static members (group.instance.id, KIP-345) join without
// MEMBER_ID_REQUIRED. A join with a known instance id and no member id
// gets a new member id and replaces the old member, whose waiting calls
// answer FENCED_INSTANCE_ID; in a Stable group whose protocol vote stays
// the same this needs no rebalance, even if the metadata changed, as in
// Kafka (a leader so replaced is told SkipAssignment).
// A call that names an instance id with another member id answers
// FENCED_INSTANCE_ID.
//
// Members and generations are not persisted: after a restart every group
// is Empty and its clients join again (their heartbeats answer
// UNKNOWN_MEMBER_ID). Committed offsets are (groupoffsets.Store).
//
// # Cluster mode
//
// Where several instances each coordinate some groups (partitioned mode,
// docs/consumer-groups.md "Cluster mode"), Options.Coordinates is asked
// before every call about a group (it may take the group over, loading it
// with AdoptGroup: Empty, with its committed offsets, as after a restart)
// and Options.Serves before a call creates one; ReleaseGroup forgets a
// group that moved, answering its waiting calls NOT_OWNER. A store write
// refused with groupoffsets.ErrFenced (a newer coordinator wrote the
// group) answers NOT_OWNER too: the client finds the coordinator again.
//
// # Offsets retention
//
// An empty group's offset expires Options.OffsetsRetention after the later
// of its commit and the moment the group became empty (persisted with the
// offsets; a group that had members when the process ended counts from the
// start). A group with members keeps its offsets, except, for the
// "consumer" protocol, those of topics no member subscribes to, which
// expire from their commit (KIP-496). An empty group left without offsets
// is removed. Offsets of a deleted topic go with it.
//
// # Concurrency and lock order
//
// Coordinator.mu (the group table) -> group.mu -> the store's locks
// (leaves). Coordinator.mu is never taken while a group.mu is held; a
// group is looked up under Coordinator.mu and locked after it is
// released (a group found Dead is looked up again). Timers (session,
// rebalance, initial delay, pending sync) take group.mu and check a
// token, so that a timer of an earlier rebalance or member does nothing.
// JoinGroup and SyncGroup wait for their answer with no lock held, on a
// buffered channel the rebalance fills. Store writes happen under the
// group's lock, so a group's entries are written in the order applied.
// The topic lookups of OffsetCommit, OffsetDelete and AlterOffsets
// (Options.Partitions) and the log look-ups of AlterOffsets and
// OffsetsWithLag (Options.ListOffsets) run with no lock of the package
// held: AlterOffsets checks the group is inactive before and again after
// them.
package consumergroup
