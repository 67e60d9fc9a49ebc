// Package changestream produces the change stream of one partition
// (docs/change-streams.md): request validation and rollback checks, an optional
// out-of-sequence-order (OSO) snapshot read from the log store's key index,
// then ordered snapshots and the live tail. It knows nothing of gRPC:
// internal/transport/grpcapi translates Request and Event to and from the protos.
//
// # One call
//
//	validate (one read of LSO and HW, which also fixes E = HW)
//	  └─ OSO eligible (chooseOSO; auto: the estimate from RangeStats and a
//	     counting key cursor)?
//	       oso(START) · per key its latest record in [L0, E) · [adv(E-1)] · oso(END)
//	  └─ ordered snapshots from max(start, LSO) or E:
//	       DISK while catching up, cut at segment ends (KeyIndexer.SegmentEnd);
//	       MEMORY once the stream reached the HW, one per HW advance
//	       (Store.Watch, no polling), a range without a match held back up
//	       to HoldBack and merged with the next
//	  └─ stream_end: OK at end_offset; ROLLBACK when a purge overtakes the
//	     reader, or compaction removes a tombstone at or after the client's
//	     next offset (P rises past it, docs/compaction.md); TOPIC_DELETED
//	     when the topic goes (or is re-created); SHUTDOWN after
//	     Manager.Shutdown.
//
// Before every event the stream checks, without blocking, the partition's
// watch channel (closed by appends, purges and topic deletion), the
// shutdown signal and the context, so a deleted topic or a shutdown is
// noticed after at most the event already handed to the transport.
//
// # Wiring
//
// New takes the log store and, separately, its key index
// (logstore.KeyIndexer: scans, counts, segment ends and entry reads), nil
// when the store has none. Nothing is discovered by asserting interfaces on
// the store, so the server passes the traced store and the traced index
// (internal/telemetry) and every read of a call is a span of it. In a
// partitioned cluster Config.Owners (broker.Owners) says who serves each
// partition and Config.Peers streams from the owner of one served
// elsewhere (route.go).
//
// # Resources
//
// A call runs on the caller's goroutine and holds one read batch (at most
// BatchRecords records / BatchBytes bytes, or one larger record), or in an
// OSO snapshot one index cursor (one buffered block per index run) and one
// record, plus the events its Sender holds. Events are handed to the
// Sender one by one, in order; the Sender may group them into messages
// (the service puts up to 256 events / 1 MiB in one) and the stream
// flushes it before waiting for the partition, before scanning for the
// next snapshot's first match and after stream_end, so grouping never
// delays an event by a wait. The Sender blocking (gRPC flow control) is the
// back-pressure. Manager caps the calls open at once.
package changestream
