// Package jslog is a logstore.Store and logstore.KeyIndexer on a NATS
// JetStream cluster: sharelog's partitioned log in cluster mode. It passes
// the same conformance suites (logstoretest.Run and RunKeyIndex) as the
// file and memory stores, run on a real 3-node cluster.
//
// # Mapping
//
// A topic is a metadata entry in the KV bucket <prefix>_META (key
// "topic.<hex(name)>", value: name, ID, partition count, config) and one
// stream per partition, <prefix>_<topicID>_<p> with the single subject
// <prefix>.<topicID>.<p>: file storage, Options.Replicas replicas, limits
// retention, DenyDelete, no rollups, no message TTLs, direct get and
// atomic batch publish allowed. With nothing deleting single messages the
// sequences are dense, so
//
//	offset = sequence - 1,  log start = FirstSeq - 1,  high watermark = LastSeq.
//
// Each message is one record in sharelog's own record frame (the layout of
// logstore's doc.go, offset field included): timestamp, key, value or
// tombstone and headers never go into NATS headers. A read checks that a
// frame's offset is its sequence - 1 (else ErrCorrupt).
//
// CreateTopic creates the streams first, under a new topic ID, then the
// metadata entry with a create-if-absent; a lost race deletes the streams
// it made and answers ErrTopicExists. DeleteTopic deletes the entry
// (conditional on the revision this instance knows) and then the streams.
// Every instance follows the bucket, so topics created or deleted
// elsewhere appear and disappear here too.
//
// AlterTopic (partitions added, configs changed) reads the entry, creates
// the streams of the new partitions, then updates the entry conditionally
// on the revision it read (read again after a concurrent change). Every
// instance applies the new entry: the topic keeps its partitions, gains
// the new ones, and their watchers are woken. A stream created for an
// update that then failed stays, empty, and is taken as it is by the next
// alteration that adds its partition.
//
// # Per-instance state
//
// An instance loads a partition on first use: its bounds from the stream
// info, then an ordered consumer from the log start on. That consumer
// rebuilds the in-memory key index (ScanKeys and CountKeys answer
// ErrIndexNotReady until it covers [log start, end)) and moves the high
// watermark past records other writers append, waking Watch. The
// instance's own appends move the high watermark, feed the index and wake
// Watch as soon as JetStream acknowledges them. Bounds, Read and the key
// index answer from this instance's view; reads are clamped to
// [log start, high watermark) as it knows them, because a direct get may
// be answered by a follower that lags (then the record is read from the
// stream leader) or has applied a purge this instance has not seen (then
// the log start is raised and the read is out of range).
//
// Costs of this design: the consumer also delivers the instance's own
// appends back to it (skipped, but transferred), and the key index keeps
// the entries of purged records until the instance reloads the partition,
// as the memory store does.
//
// # Appends and fencing
//
// One Append is one atomic JetStream batch (all or nothing, contiguous
// sequences; at most Options.MaxBatchRecords records, 1000 by default as
// the server's jetstream.limits.batch.max_size, and no record frame above
// the servers' max_payload — both refused with ErrInvalidArgument before
// anything is sent). Appends to a partition are serialised in the instance
// and the first message of each batch expects the stream's last sequence
// to be the high watermark this instance knows. If another writer has
// appended since, JetStream refuses the whole batch and Append returns
// jetstream.ErrFenced: the caller treats it as "no longer the owner". The
// store then re-reads the stream's end, so a later append (by a caller
// that still owns the partition) goes after the other writer's records.
// Ownership itself (leases) is not this package's business.
//
// # Purge
//
// DeleteRecordsBefore refuses an offset above the high watermark before
// anything is sent (JetStream would move the stream's end instead, leaving
// a gap of offsets); an offset at or below the log start is a no-op;
// otherwise the stream is purged below sequence offset+1 and the log
// start becomes max(old, offset). JetStream answers once the purge is
// committed by a quorum and applied on the stream leader.
//
// # Durability and failures
//
// An append or purge returns once a quorum of the stream's replicas has
// it in its RAFT log. That is on disk only when the servers run with
// "jetstream { sync_interval: always }": JetStream's default is to fsync
// every 2 minutes, and then a coordinated power loss of a quorum can lose
// acknowledged records. With fsync always, losing one of three servers
// loses nothing acknowledged; writes to the streams it led pause until a
// new leader is elected (seconds).
//
// An append whose outcome is unknown (timeout, connection lost) returns an
// error wrapping logstore.ErrStorage, and its records may or may not be in
// the log; the next append re-reads the stream's end first. Every failure
// to reach the cluster or to get an answer within the context's deadline
// (Options.Timeout when the context has none) wraps logstore.ErrStorage;
// a stream that no longer exists is ErrUnknownTopic. A crash of the
// sharelog process loses nothing acknowledged; its replacement rebuilds
// the key index from the streams. A crash between creating a topic's
// streams and its metadata entry (or between deleting the entry and the
// streams) leaves orphan streams, recognisable by a topic ID no entry
// has.
//
// # Not applied yet
//
// Time and size retention (RetentionMs, RetentionBytes), segment_ms and
// compaction (cleanup.policy compact) are recorded but not applied to
// streams, as in the memory store; a compacted topic refuses keyless
// records all the same. Each
// partition stream is one segment for SegmentEnd; RangeStats estimates
// bytes from the average frame size this instance has seen;
// OffsetForTimestamp scans the partition (JetStream's own timestamps are
// receive times, not the records').
package jslog
