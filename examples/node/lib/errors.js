// Decoding sharelog's request-level errors.
//
// A failed sharelog call ends with a gRPC status whose `grpc-status-details-bin`
// trailer is a serialized google.rpc.Status. Its `details` are protobuf `Any`
// messages; sharelog always puts a google.rpc.ErrorInfo there, with
//   reason   the Kafka-style error name (OFFSET_OUT_OF_RANGE, INVALID_SHARE_SESSION_EPOCH, ...),
//   domain   "sharelog",
//   metadata useful numbers as strings (log_start_offset, high_watermark, expected_epoch, ...).
// The reasons are listed in docs/errors.md.
//
// The google/rpc/*.proto files come from the `google-proto-files` package;
// nothing Google ships is copied into this repository.

import path from 'node:path';
import protobuf from 'protobufjs';
import googleProtoFiles from 'google-proto-files';

const TYPE_URL_PREFIX = 'type.googleapis.com/';
const ERROR_INFO = 'google.rpc.ErrorInfo';

let root;

// rpcRoot loads google/rpc/status.proto and error_details.proto once.
function rpcRoot() {
  if (!root) {
    // getProtoPath() is <package>/google; imports are relative to its parent.
    const includeDir = path.dirname(googleProtoFiles.getProtoPath());
    const r = new protobuf.Root();
    r.resolvePath = (_origin, target) => (path.isAbsolute(target) ? target : path.join(includeDir, target));
    r.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: true });
    r.resolveAll();
    root = r;
  }
  return root;
}

/**
 * decodeStatus returns the google.rpc.Status carried by a gRPC error
 * (`{code, message, details}`), or null if the error has no details trailer.
 * Each detail is `{type, ...fields}` when its type is one of google/rpc's
 * error details, else `{type, value}` with the raw bytes.
 */
export function decodeStatus(err) {
  const bins = err?.metadata?.get?.('grpc-status-details-bin');
  if (!bins || bins.length === 0) {
    return null;
  }
  const r = rpcRoot();
  const Status = r.lookupType('google.rpc.Status');
  const st = Status.decode(Buffer.from(bins[0]));
  const details = st.details.map((any) => {
    const type = any.type_url.startsWith(TYPE_URL_PREFIX) ? any.type_url.slice(TYPE_URL_PREFIX.length) : any.type_url;
    let T = null;
    try {
      T = r.lookupType(type);
    } catch {
      // not a google.rpc error detail: keep the bytes
    }
    if (!T) {
      return { type, value: Buffer.from(any.value) };
    }
    return { type, ...T.toObject(T.decode(any.value), { longs: Number, enums: String, defaults: true }) };
  });
  return { code: st.code, message: st.message, details };
}

/**
 * decodeErrorInfo returns the google.rpc.ErrorInfo of a gRPC error as
 * `{reason, domain, metadata}` (metadata a plain object of strings), or null
 * when the error carries none (for instance a transport failure or a
 * cancellation, which the client library raises itself).
 */
export function decodeErrorInfo(err) {
  const st = decodeStatus(err);
  const info = st?.details.find((d) => d.type === ERROR_INFO);
  if (!info) {
    return null;
  }
  return { reason: info.reason, domain: info.domain, metadata: { ...info.metadata } };
}
