// Package shareconsumer consumes sharelog share groups (Kafka KIP-932,
// "queues for Kafka"): many consumers read the same partitions, each record
// is locked for one consumer at a time, and every record is acknowledged —
// accepted, released for redelivery, rejected, or its lock renewed. It is
// the Go counterpart of Kafka's KafkaShareConsumer.
//
//	conn, err := grpc.NewClient("127.0.0.1:9090", grpc.WithTransportCredentials(insecure.NewCredentials()))
//	if err != nil { ... }
//	defer conn.Close()
//
//	c, err := shareconsumer.New(conn, shareconsumer.Config{
//		GroupID: "billing",
//		Topics:  []string{"orders"},
//		AckMode: shareconsumer.AckExplicit,
//	})
//	if err != nil { ... }
//	defer c.Close(context.Background())
//
//	for {
//		recs, err := c.Poll(ctx)
//		if err != nil {
//			return err // ctx ended, the consumer was closed, or the server refused us
//		}
//		for _, r := range recs {
//			if err := process(r); err != nil {
//				c.Acknowledge(r, shareconsumer.Release) // try again later, maybe elsewhere
//				continue
//			}
//			c.Acknowledge(r, shareconsumer.Accept)
//		}
//		// The acknowledgements go with the next Poll; Commit sends them now.
//	}
//
// # Acknowledgement
//
// In the default implicit mode (AckImplicit) the records returned by a Poll
// are accepted by the next Poll, Commit or Close, except those acknowledged
// otherwise with Acknowledge before. In explicit mode (AckExplicit) only
// Acknowledge settles a record; one left alone stays locked until its lock
// expires (the group's record_lock_duration_ms, 30 s by default) and is then
// delivered again, maybe to another consumer. Renew restarts a lock for
// long processing. Acknowledgements travel with the next ShareFetch (Poll),
// or with ShareAcknowledge (Commit, and renewals), grouped into ranges of
// consecutive offsets with the same type. Their outcomes are returned by
// Commit and passed to Config.OnAcknowledgement. The server applies the
// acknowledgements of one partition in one request atomically: one offset
// it refuses (for instance a lock that expired) fails the others of that
// partition in that request.
//
// # Delivery guarantee
//
// At least once. A record is delivered again after a Release, when its lock
// expires, or when the share session holding it ends (in a partitioned
// cluster, also when its partition moves to another owner: see Clusters).
// A session ends when
// the consumer closes, when the server restarts or evicts an idle session,
// and when the consumer reopens it after losing track of it. The consumer
// then reopens a session (epoch 0) and the acknowledgements still pending for
// records of the old one are dropped: they are reported with
// ErrSessionEnded, and Acknowledge returns ErrSessionEnded for those
// records. Records accepted successfully are never delivered again.
//
// # Sessions and retries
//
// The consumer keeps one share session per member (in a partitioned
// cluster, one per partition owner: see Clusters): it
// opens it with epoch 0, then numbers every ShareFetch and ShareAcknowledge
// 1, 2, ... (one sequence for both, wrapping from 2147483647 to 1), adds and
// forgets partitions as its assignment changes, and closes it with epoch -1
// on Close. Transport failures (UNAVAILABLE, timeouts,
// SHARE_SESSION_LIMIT_REACHED) are retried with exponential backoff
// (Config.Backoff) until the caller's context ends. After a request fails in
// transport the consumer cannot know whether the server admitted it (and
// consumed its epoch), so it stops using the session: it closes it with
// epoch -1 when acknowledgements must still be delivered (sending again
// those of the failed request: if they had been applied the server refuses
// them and they are reported ErrAckOutcomeUnknown), or replaces it with a new
// epoch-0 session, which releases the old session's records.
// SHARE_SESSION_NOT_FOUND and INVALID_SHARE_SESSION_EPOCH are handled the
// same way, at once. In a cluster, NOT_OWNER and OWNER_UNREACHABLE (nothing
// was applied) are retried inside Poll after the owners are read again,
// never returned to the application; OUTCOME_UNKNOWN (an instance
// forwarded the request to the owner and the answer was lost) is a lost
// response, and acknowledgements a partition answers with it are reported
// ErrAckOutcomeUnknown.
//
// # Membership
//
// New starts a goroutine that joins the group with ShareGroupHeartbeat
// (member epoch 0, with the subscription), heartbeats every
// heartbeat_interval_ms, rejoins after UNKNOWN_MEMBER_ID or
// FENCED_MEMBER_EPOCH (e.g. after a server restart or missed heartbeats),
// and leaves (epoch -1) on Close. The consumer fetches the partitions of its
// assignment: share sessions never consult membership on the server, so the
// assignment decides which partitions the consumer adds to and forgets from
// its session.
//
// Fallback: against a server that answers ShareGroupHeartbeat with
// UNIMPLEMENTED (a sharelog version without membership), the consumer logs it
// once and fetches every partition of the subscribed topics instead, found
// with DescribeTopic and refreshed every few seconds. This is correct — the
// server locks each record for one consumer at a time — only less balanced.
// It keeps probing for membership every 30 s and uses the assignment as soon
// as the server offers one.
//
// # Clusters
//
// In a cluster whose DescribeCluster mode is "partitioned" (docs/cluster.md)
// each partition has an owner instance, and an instance serves ShareFetch
// and ShareAcknowledge itself, for the partitions it owns: a share session
// lives on the instance that received it, and a partition owned elsewhere
// is answered NOT_LEADER_OR_FOLLOWER and left out of the session. So, as
// Kafka's share consumer keeps one share session per leader node, the
// consumer keeps one session per partition owner:
//
//	conn, err := grpc.NewClient(seed, creds)
//	...
//	c, err := shareconsumer.New(conn, shareconsumer.Config{
//		GroupID: "billing",
//		Topics:  []string{"orders"},
//		Dial: func(addr string) (grpc.ClientConnInterface, error) {
//			return grpc.NewClient(addr, creds)
//		},
//	})
//
// Config.Dial reaches the other instances at the addresses DescribeCluster
// advertises (a *router.Conn given to New lends its own dialer instead).
// With a dialer, the consumer reads the view with DescribeCluster on the
// given connection before its first fetch, again every 30 s, and soon
// after a partition is answered NOT_LEADER_OR_FOLLOWER or a request to an
// owner fails. It groups the partitions it fetches by owner and keeps, per
// owner address, a session of its own (its own epochs, partition set,
// pending acknowledgements and recovery after transport failures, as
// described above); a partition without an owner at the moment (an
// election) is fetched once the view names one. Membership
// (ShareGroupHeartbeat) and DescribeTopic keep going through the given
// connection, whose instance forwards them to the group's coordinator.
//
// Poll with several sessions fetches from all owners in parallel and
// waits for all of them, so it waits about MaxWait once, not once per
// owner. After a Poll that returned records it first fetches without
// waiting and long-polls only if no owner had any, so that an idle owner
// does not hold back the records of a busy one; after an empty Poll it
// long-polls at once (records arriving during that long poll are returned
// when it ends: after at most MaxWait). Each owner is asked for an even
// share of MaxRecords, so a Poll never returns more than MaxRecords, and
// may return fewer while only one owner has records. Commit sends every
// session's acknowledgements; Close closes every session (epoch -1, with
// its final acknowledgements) in parallel, giving up on an owner after
// three failed attempts (one that cannot be reached is likely gone, and
// released its records), then leaves the group.
//
// An acknowledgement goes to the session that delivered the record. When a
// partition moves to another owner, the consumer learns it from the old
// owner's NOT_LEADER_OR_FOLLOWER (or from the view), re-reads the view,
// forgets the partition in the old owner's session and adds it to the new
// owner's; nothing is returned to Poll's caller (the Logger says it). The
// old owner released the locks it held, so its deliveries of that
// partition can no longer be acknowledged: they are handled as records of
// an ended session — pending acknowledgements are reported with
// ErrSessionEnded (so are those the old owner refused with
// NOT_LEADER_OR_FOLLOWER, never applied), Acknowledge returns
// ErrSessionEnded, and the records are delivered again, from the new
// owner. An owner that stops answering is retried with backoff like any
// transport failure while the view still names it, and its session is
// closed (best effort) once the view has moved its partitions.
//
// Without a dialer, or when the mode is "single" or "active-standby" (one
// instance owns everything) or the server does not implement
// DescribeCluster, the consumer keeps its one session on the given
// connection, as described above. In a partitioned cluster it then
// consumes only the partitions of that connection's instance: each other
// partition of its assignment is answered NOT_LEADER_OR_FOLLOWER, logged
// at WARN, and asked for again every 5 s (it is served if ownership moves
// to that instance); Poll reports no error for it. Set Config.Dial.
//
// # Concurrency
//
// Poll, Commit and Close run one at a time; Acknowledge can be called from
// any goroutine, e.g. by workers processing records asynchronously. Close
// interrupts a Poll in progress.
package shareconsumer
