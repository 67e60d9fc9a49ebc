// Package changestream is the Go client of sharelog's change streams
// (ChangeStreamService.StreamChanges, docs/change-streams.md): it follows one
// partition, hands every snapshot boundary, mutation and deletion to a
// Handler, and keeps a Checkpoint that the application persists with its
// state.
//
// # Resume rules
//
// The committed checkpoint C = {topic_id, partition, next} moves only at
// consistent points: after every ordered item or offset_advanced, at the end
// of an out-of-sequence-order (OSO) snapshot, at stream_end{OK} and after a
// reset. Inside an OSO snapshot (items in key order, one per key) the
// library tracks Y (the last offset before the snapshot) and X (the
// greatest offset seen in it) but C stays at Y+1; at OSO END, next = X+1.
// A call that fails is retried with backoff from C.next (the OSO snapshot
// then comes again in full); if the snapshot began from nothing (Y = -1) and
// had delivered items, the application is reset first, because a re-sent
// snapshot cannot retract a key whose tombstone was compacted away.
//
// ROLLBACK_REQUIRED, stream_end{ROLLBACK} and that aborted-OSO case call
// Handler.OnReset, learn the topic's current id with DescribeTopic and
// restart from offset 0. stream_end{TOPIC_DELETED} ends Run with
// ErrTopicDeleted; any break of the stream's grammar ends it with a
// *ProtocolError, the checkpoint unchanged.
//
// # Usage
//
//	conn, _ := grpc.NewClient(addr, append(changestream.DialOptions(),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
//	st, _ := changestream.New(conn, changestream.Config{
//		Topic: "orders", Partition: 0, KeyPrefix: []byte("eu/"),
//		From: savedCheckpoint, // nil: start from nothing
//	}, handler)
//	err := st.Run(ctx) // handler.OnCheckpoint is where state and checkpoint are saved
//
// The server sends events in messages of up to 256 events / 1 MiB; the
// library hands them to the handler one by one, as if each had come alone,
// and a checkpoint may fall between two events of one message. Handlers
// run one at a time on Run's goroutine and the next message is read only
// when the handler has taken the last event of this one, so a slow handler
// slows the server through gRPC flow control instead of buffering (the
// library holds at most one message).
package changestream
