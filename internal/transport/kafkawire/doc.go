// Package kafkawire is sharelog's Kafka wire-protocol listener: a second
// transport beside internal/transport/grpcapi that lets unmodified Kafka clients
// (franz-go, librdkafka and kcat, kafkajs) produce, consume, purge and
// administer topics. It has no semantics of its own: every handler decodes
// the request with kmsg, calls the same domain packages the gRPC handlers
// call (broker for the log, never a store; sharegroup; consumergroup for
// the classic consumer groups, groups.go), and encodes the
// answer; an error's code is its domain reason's Kafka code (errors.go:
// broker.ErrorOf, the coordinator answers of the group calls, and the
// listener's own codec errors). docs/kafka.md describes what is served.
//
// # Files
//
//	server.go        Listener: accept loop, connections, lifecycle
//	frame.go         the size-capped frame reader and the request header
//	timeouts.go      the idle and request timeouts of a connection
//	handlers.go      the handler table; ApiVersions is generated from it
//	records.go       RecordBatch v2 decode (CRC-32C, bounded decompression) and encode
//	errors.go        sharelog errors → Kafka error codes
//	NN_name.go       one file per API key, as franz-go's kfake
//
// # Connections
//
// Requests on one connection are handled in order, one at a time, as Kafka
// does; different connections run in parallel. A frame larger than
// --kafka-max-request-bytes, a malformed header or body, an unknown key or
// an unsupported version closes that connection only (ApiVersions answers an
// unsupported version with its range instead, KIP-511). Nothing a request
// does is half-applied: a Produce validates every batch of a partition
// before its one broker.Log.ProduceBatch. A connection with no request
// for --kafka-idle-timeout, or whose request's bytes do not all arrive
// within --kafka-request-timeout, is closed (docs/kafka.md "Limits").
package kafkawire
