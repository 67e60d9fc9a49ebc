// Package telemetry wires OpenTelemetry for the server: a tracer provider
// configured by the standard OTEL_* variables, a meter provider exported in
// the Prometheus text format on /metrics, and spans around log-store calls.
//
// Log-store calls are traced by wrappers the server puts around the store
// before handing it out: TraceStore wraps a logstore.Store (a span per
// call, named "logstore.<Method>", a child of the calling RPC's span;
// appends and reads counted), TraceKeyIndex wraps the store's key index
// (a span per key scan, from ScanKeys to the cursor's Close, and per key
// count; entry reads counted in an atomic and added to the metric in
// blocks and at each scan's end, so no SDK call runs per entry). Both are plain interface wrappers: the
// server hands the wrapped store and the wrapped index to their users
// (share groups, change streams) explicitly, so nothing needs the unwrapped
// store and every read a change stream makes is traced.
//
// Lifecycle: Setup builds the providers once at server start; Shutdown
// flushes the span batcher. The wrappers hold no state of their own but the
// key index's count of entry reads not yet added to the metric.
package telemetry
