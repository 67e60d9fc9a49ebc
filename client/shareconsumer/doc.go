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
// expires, or when the share session holding it ends. A session ends when
// the consumer closes, when the server restarts or evicts an idle session,
// and when the consumer reopens it after losing track of it. The consumer
// then reopens a session (epoch 0) and the acknowledgements still pending for
// records of the old one are dropped: they are reported with
// ErrSessionEnded, and Acknowledge returns ErrSessionEnded for those
// records. Records accepted successfully are never delivered again.
//
// # Sessions and retries
//
// The consumer keeps one share session per member: it
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
// same way, at once.
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
// # Concurrency
//
// Poll, Commit and Close run one at a time; Acknowledge can be called from
// any goroutine, e.g. by workers processing records asynchronously. Close
// interrupts a Poll in progress.
package shareconsumer
