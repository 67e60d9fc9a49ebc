// A thin promise-based client over sharelog's three gRPC services, with the
// protos loaded at run time from the repository's proto/ directory (no
// generated JavaScript).

import path from 'node:path';
import { fileURLToPath } from 'node:url';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
import { decodeErrorInfo } from './errors.js';

/** The repository's proto/ directory, found from this file's location. */
export const DEFAULT_PROTO_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../proto');

const PROTO_FILES = ['sharelog/v1/log.proto', 'sharelog/v1/share_group.proto', 'sharelog/v1/change_stream.proto'];

/**
 * How messages look in JavaScript: field names as in the .proto files
 * (snake_case), enums as their names ('ACKNOWLEDGE_TYPE_ACCEPT'), bytes as
 * Buffers, int64 as Number (exact below 2^53, far above any offset a log
 * reaches), unset scalar fields as their zero value, and the name of the set
 * member of a oneof in a virtual field (`event` in a change-stream response).
 */
export const LOADER_OPTIONS = { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true };

/** loadSharelog returns the `sharelog.v1` package (service constructors and message types). */
export function loadSharelog(protoDir = process.env.SHARELOG_PROTO_DIR || DEFAULT_PROTO_DIR) {
  const def = protoLoader.loadSync(PROTO_FILES, { ...LOADER_OPTIONS, includeDirs: [protoDir] });
  return grpc.loadPackageDefinition(def).sharelog.v1;
}

/**
 * SharelogClient holds one channel to a server and a promise-returning stub
 * per service: `client.log.produce(req)`, `client.shareGroups.shareFetch(req)`,
 * ... (each RPC under its lowerCamelCase name). A failed call rejects with
 * grpc-js's ServiceError (`code`, `details`, `metadata`) plus `errorInfo`,
 * the decoded google.rpc.ErrorInfo or null.
 *
 * `client.changes.streamChanges(req)` is the raw server stream; see
 * change-stream.js for an async iterator over its events.
 */
export class SharelogClient {
  /**
   * @param {string} address host:port of the gRPC listener
   * @param {object} [opts]
   * @param {grpc.ChannelCredentials} [opts.credentials] default: insecure (plaintext)
   * @param {string} [opts.protoDir] default: the repository's proto/
   * @param {number} [opts.timeoutMs] deadline of every unary call (default 30000)
   * @param {string} [opts.token] bearer token, for a server started with --auth-tokens-file
   */
  constructor(address, { credentials = grpc.credentials.createInsecure(), protoDir, timeoutMs = 30000, token } = {}) {
    const pkg = loadSharelog(protoDir);
    this.timeoutMs = timeoutMs;
    this.metadata = new grpc.Metadata();
    if (token) {
      this.metadata.set('authorization', `Bearer ${token}`);
    }
    const logRaw = new pkg.LogService(address, credentials);
    const channelOverride = logRaw.getChannel(); // the three services share one connection
    this.raw = {
      log: logRaw,
      shareGroups: new pkg.ShareGroupService(address, credentials, { channelOverride }),
      changes: new pkg.ChangeStreamService(address, credentials, { channelOverride }),
    };
    this.log = this.#promisify(this.raw.log);
    this.shareGroups = this.#promisify(this.raw.shareGroups);
    this.changes = this.raw.changes;
  }

  // promisify wraps every unary RPC of a grpc-js client in a function
  // (request, {timeoutMs}) => Promise<response>.
  #promisify(stub) {
    const out = {};
    for (const [name, method] of Object.entries(stub.constructor.service)) {
      if (method.requestStream || method.responseStream) {
        continue;
      }
      const fn = (req, { timeoutMs = this.timeoutMs } = {}) =>
        new Promise((resolve, reject) => {
          const deadline = new Date(Date.now() + timeoutMs);
          stub[name](req, this.metadata, { deadline }, (err, resp) => {
            if (err) {
              err.errorInfo = decodeErrorInfo(err);
              reject(err);
            } else {
              resolve(resp);
            }
          });
        });
      out[name.charAt(0).toLowerCase() + name.slice(1)] = fn;
    }
    return out;
  }

  /** waitForReady resolves once the channel is connected (or rejects after timeoutMs). */
  waitForReady(timeoutMs = 10000) {
    return new Promise((resolve, reject) => {
      this.raw.log.waitForReady(new Date(Date.now() + timeoutMs), (err) => (err ? reject(err) : resolve()));
    });
  }

  /** close closes the channel; calls in flight fail with CANCELLED. */
  close() {
    this.raw.log.close();
  }
}
