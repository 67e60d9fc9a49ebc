// Package broker is the log API's domain: what CreateTopic, DeleteTopic,
// Produce, Fetch, ListOffsets and Purge do, independent of the transport.
// The gRPC/REST handlers of internal/transport/grpcapi and the Kafka
// handlers of internal/transport/kafkawire only translate their messages to
// these calls and back; neither calls a store.
//
// It owns:
//   - routing: a record without a partition goes to murmur2(key) modulo the
//     partition count, as Kafka's default partitioner picks, and keyless
//     records go round-robin;
//   - appends: the records of one partition are appended atomically and
//     contiguously, and the partitions of one call in parallel so their
//     fsyncs overlap ([Log.Produce]; a Kafka partition's batches:
//     [Log.ProduceBatch]);
//   - the fetch bounds ([Log.ReadPartition]: outside [log start, high
//     watermark] is OFFSET_OUT_OF_RANGE, at the high watermark the answer
//     is empty) and the long-poll ([Log.LongPoll]): at the high watermark
//     a fetch of one partition or several waits up to its MaxWait for an
//     append, if a [LongPolls] slot is free;
//   - list offsets: earliest, latest, by timestamp and max timestamp;
//   - topic creation's checks and configs ([Log.ValidateTopic],
//     [TopicSettings.SetConfig], [Log.ConfigEntries]) and [MaxPartitions];
//   - topic alterations (topicalter.go): partitions added
//     ([Log.CreatePartitions], at the controller) and configs set, reset
//     or replaced ([Log.AlterTopicConfigs], [Log.ReplaceTopicConfigs]),
//     through the store's AlterTopic, so that every transport sees one
//     config; max.message.bytes and message.timestamp.type on produce
//     ([CheckBatchSize], [LogAppendTime]; docs/kafka.md "Topic configs");
//   - purge: each partition judged alone (docs/purge.md);
//   - routing by partition owner in a partitioned cluster (route.go): the
//     partitions this instance serves are served here, under a hold that
//     keeps them here while an append or purge runs, the others at their
//     owner ([Owners], [Peers]); topics are created and deleted at the
//     controller ([Controller]); a call another instance forwarded is
//     never forwarded again ([WithForwardedBy]); [Locate] is the owner
//     decision, shared with the change streams;
//   - topic lifecycle events: share groups, change streams and future
//     listeners [Log.Subscribe] to topic creation and deletion (also a
//     Kafka auto-creation, [Log.EnsureTopic]) instead of being called back
//     by a handler.
//
// The storage types and sentinels a transport needs are re-exported here
// (types.go), so that no transport imports a storage package.
//
// Errors are *apierr.Error values or the store's sentinels; [ErrorOf]
// (errors.go) is the one place where a sentinel gets its reason, for every
// transport, and per-partition outcomes are apierr.Reasons. The package
// imports neither gRPC nor the generated code.
package broker
