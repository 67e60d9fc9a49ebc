// Package broker is the log API's domain: what CreateTopic, DeleteTopic,
// Produce, Fetch, ListOffsets and Purge do, independent of the transport.
// The gRPC/REST handlers of internal/transport/grpcapi (and any other listener) only
// translate their messages to these calls and back.
//
// It owns:
//   - routing: a record without a partition goes to murmur2(key) modulo the
//     partition count, as Kafka's default partitioner picks, and keyless
//     records go round-robin;
//   - appends: the records of one partition are appended atomically and
//     contiguously, and the partitions of one call in parallel so their
//     fsyncs overlap;
//   - the Fetch long-poll: at the high watermark a fetch waits up to its
//     MaxWait for an append, if a [LongPolls] slot is free;
//   - purge: each partition judged alone (docs/purge.md);
//   - routing by partition owner in a partitioned cluster (route.go): the
//     partitions this instance serves are served here, under a hold that
//     keeps them here while an append or purge runs, the others at their
//     owner ([Owners], [Peers]); a call another instance forwarded is
//     never forwarded again ([WithForwardedBy]);
//   - topic lifecycle events: share groups, change streams and future
//     listeners [Log.Subscribe] to topic creation and deletion instead of
//     being called back by a handler.
//
// Errors are *apierr.Error values or the store's sentinels (which the
// transport maps); the package imports neither gRPC nor the generated code.
package broker
