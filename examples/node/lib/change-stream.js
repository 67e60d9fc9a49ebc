// An async iterator over a change stream (ChangeStreamService.StreamChanges).
//
// A call sends, in order: an optional OSO snapshot, ordered snapshots (a
// snapshot_marker, then the mutations and deletions it covers, then maybe
// offset_advanced), the live tail, and, when it ends on the server's side,
// one stream_end{reason} after which the call completes with status OK.
// Without end_offset a call never ends OK: the client stops it by
// cancelling. The resume rules (where to start again, rollbacks) are those
// of the Go client in client/changestream; this example does not resume.

import grpc from '@grpc/grpc-js';
import { decodeErrorInfo } from './errors.js';

/**
 * changeEvents yields the events of one StreamChanges call as flat objects:
 * `{type: 'mutation', offset, timestamp, key, value, headers}`,
 * `{type: 'deletion', offset, timestamp, key}`,
 * `{type: 'snapshot_marker', start_offset, end_offset, source}`,
 * `{type: 'oso_snapshot', phase}`, `{type: 'offset_advanced', offset}`,
 * `{type: 'stream_end', reason}`.
 *
 * Stopping: break out of the `for await` loop, or abort `signal`; either
 * cancels the call and the iteration ends without an error. A status other
 * than OK (and not caused by that cancellation) is thrown as grpc-js's
 * ServiceError with `errorInfo` decoded.
 *
 * It accepts both shapes of the response: one event per message
 * (`{event: 'mutation', mutation: {...}}`) and a batch of them
 * (`{events: [...]}`), so it keeps working when the server batches events.
 *
 * @param {import('./client.js').SharelogClient} client
 * @param {object} request a StreamChangesRequest (topic, partition, start_offset, end_offset?, ...)
 * @param {{signal?: AbortSignal}} [opts]
 */
export async function* changeEvents(client, request, { signal } = {}) {
  if (signal?.aborted) {
    return;
  }
  const call = client.changes.streamChanges(request, client.metadata);
  let cancelled = false;
  const cancel = () => {
    cancelled = true;
    call.cancel();
  };
  signal?.addEventListener('abort', cancel, { once: true });
  try {
    for await (const msg of call) {
      for (const ev of eventsOf(msg)) {
        yield ev;
      }
    }
  } catch (err) {
    if (cancelled && err.code === grpc.status.CANCELLED) {
      return;
    }
    err.errorInfo = decodeErrorInfo(err);
    throw err;
  } finally {
    signal?.removeEventListener('abort', cancel);
    cancel(); // no effect on a call that already completed
  }
}

function eventsOf(msg) {
  if (msg.event === undefined && Array.isArray(msg.events)) {
    return msg.events.map(flatten);
  }
  return [flatten(msg)];
}

function flatten(ev) {
  if (!ev.event) {
    throw new Error(`change stream: an event of a type this client does not know: ${JSON.stringify(ev)}`);
  }
  return { type: ev.event, ...ev[ev.event] };
}
