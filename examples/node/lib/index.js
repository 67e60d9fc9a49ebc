// sharelog from Node.js: a promise-based client, a share-group consumer, a
// change-stream iterator and the decoding of request-level errors.
export { SharelogClient, loadSharelog, DEFAULT_PROTO_DIR, LOADER_OPTIONS } from './client.js';
export { ShareConsumer, AckType, ackBatches, nextEpoch } from './share-consumer.js';
export { changeEvents } from './change-stream.js';
export { decodeErrorInfo, decodeStatus } from './errors.js';
