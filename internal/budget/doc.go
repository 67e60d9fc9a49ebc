// Package budget bounds the memory held by responses that carry record
// data (docs/operations.md "Budgets"): the gRPC and REST Fetch, ShareFetch,
// change-stream batches and the Kafka Fetch and ShareFetch all draw from
// one [Bytes] budget (--max-response-bytes-in-flight) with a share per
// client (--max-response-bytes-per-principal, the client being
// principal.Name of the call: its principal, or its IP when anonymous).
//
// What is counted is an estimate of a response's encoded size: the record
// data times the transport's [Encoding] (4/3 for the REST gateway's JSON,
// where bytes are base64; 1 for protobuf and the Kafka wire) plus a fixed
// overhead per record. The estimate stands for the copies a response makes
// on its way out (the records read, the message, its encoding); it is a
// unit of account, not a measure of the heap.
//
// Lifecycle. A transport puts a [Holder] in the context of each call that
// may answer records ([WithHolder]), with its encoding, and releases it
// when the response is written (the gRPC stats handler at the end of the
// call, the Kafka listener after writing the response frame, the REST
// gateway after writing the HTTP body; see [Tickets]). The domain reserves
// through [Bytes.Reserve] before it reads records, and settles the
// reservation to what the response really carries ([Grant.Settle]). A
// context without a Holder is not budgeted (in-process calls, tests).
//
// A reservation takes what is free, up to what it asked for, as soon as at
// least [MinGrant] (or all it asked for, if less) is free under both the
// total and the client's share; a response is then cut to what it got, as
// a Kafka fetch is to its byte limit (but a response always carries its
// first record: the reservation grows by the excess, so the total may be
// exceeded by at most one record per response). Otherwise it waits for
// other responses to be written, up to its wait, and then gets nothing.
//
// Locks: Bytes.mu and Holder.mu are leaves; a Holder's lock is never held
// while Bytes.mu is taken.
package budget
