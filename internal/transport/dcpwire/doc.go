// Package dcpwire is the DCP listener (docs/dcp.md): the producer side of
// Couchbase's Database Change Protocol over the memcached binary protocol,
// so that DCP consumers (gocbcore's DCPAgent, gomemcached's UprFeed and
// what is built on them) stream sharelog's change streams unchanged.
//
// It translates only: bucket = topic, vBucket = partition, seqno =
// offset + 1, vbuuid = a 64-bit value derived from the topic id. Every
// stream is a changestream.Manager call (the domain the gRPC
// StreamChanges uses), so snapshots, OSO, resume points and rollbacks
// follow docs/change-streams.md; the topic look-ups go through the log
// domain (broker.Log); authentication is the Kafka listener's
// (internal/edge's tokens and certificates, internal/users' SCRAM
// logins) and authorization the Guard's (READ on the topic to open a
// stream, as StreamChanges).
//
// # Files
//
//	frame.go      the binary framing: the reader (body limit, length checks), the encoders
//	server.go     the listener, connections, the request dispatch, the writer
//	sasl.go       SASL_LIST_MECHS, SASL_AUTH, SASL_STEP (PLAIN, SCRAM-SHA256/512)
//	bootstrap.go  HELLO, GET_ERROR_MAP, SELECT_BUCKET, GET_CLUSTER_CONFIG
//	producer.go   DCP_OPEN, DCP_CONTROL, GET_FAILOVER_LOG, GET_ALL_VB_SEQNOS, BUFFER_ACK, NOOPs
//	stream.go     DCP_STREAM_REQ, CLOSE_STREAM and the events of a stream
//	collections.go  the default collection: GET_COLLECTIONS_MANIFEST, GET_COLLECTION_ID
//
// # Concurrency
//
// One goroutine per connection reads and answers requests in order; each
// open stream runs on its own goroutine and writes its event batches
// through the connection's writer (one mutex, a leaf), after taking their
// bytes from the connection's flow-control credit (its mutex a leaf too).
// A connection's state (features, login, bucket, controls) is only touched
// by its reading goroutine; a stream copies the controls when it starts.
package dcpwire
