// Tests of the pieces that need no server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { ackBatches, nextEpoch, AckType, changeEvents } from '../lib/index.js';

test('session epochs run 0 → 1 → 2 ... 2147483647 → 1, never 0 again', () => {
  assert.equal(nextEpoch(0), 1);
  assert.equal(nextEpoch(1), 2);
  assert.equal(nextEpoch(2147483646), 2147483647);
  assert.equal(nextEpoch(2147483647), 1);
});

test('acknowledgements become maximal runs of consecutive offsets with one type', () => {
  const { ACCEPT, RELEASE } = AckType;
  const acks = new Map([
    [7, ACCEPT],
    [3, ACCEPT],
    [4, ACCEPT],
    [5, RELEASE],
    [6, ACCEPT],
    [9, ACCEPT],
  ]);
  assert.deepEqual(ackBatches(acks), [
    { first_offset: 3, last_offset: 4, acknowledge_types: [ACCEPT] },
    { first_offset: 5, last_offset: 5, acknowledge_types: [RELEASE] },
    { first_offset: 6, last_offset: 7, acknowledge_types: [ACCEPT] },
    { first_offset: 9, last_offset: 9, acknowledge_types: [ACCEPT] },
  ]);
  assert.deepEqual(ackBatches(new Map()), []);
});

// fakeClient serves one StreamChanges call from a list of response messages.
function fakeClient(messages) {
  return {
    metadata: undefined,
    changes: {
      streamChanges: () => Object.assign(Readable.from(messages), { cancel() {} }),
    },
  };
}

test('change events are read from one-event and batched responses alike', async () => {
  const one = [
    { event: 'snapshot_marker', snapshot_marker: { start_offset: 0, end_offset: 1, source: 'SNAPSHOT_SOURCE_DISK' } },
    { event: 'mutation', mutation: { offset: 0, key: Buffer.from('k') } },
    { event: 'deletion', deletion: { offset: 1, key: Buffer.from('k') } },
    { event: 'stream_end', stream_end: { reason: 'STREAM_END_REASON_OK' } },
  ];
  const batched = [{ events: one.slice(0, 3) }, { events: one.slice(3) }];
  for (const messages of [one, batched]) {
    const got = [];
    for await (const ev of changeEvents(fakeClient(messages), {})) {
      got.push([ev.type, ev.offset ?? ev.reason ?? ev.start_offset]);
    }
    assert.deepEqual(got, [
      ['snapshot_marker', 0],
      ['mutation', 0],
      ['deletion', 1],
      ['stream_end', 'STREAM_END_REASON_OK'],
    ]);
  }
});

test('an event of an unknown type is an error, not silently skipped', async () => {
  await assert.rejects(async () => {
    for await (const ev of changeEvents(fakeClient([{ events: [{ something_new: {} }] }]), {})) {
      assert.fail(`unexpected ${JSON.stringify(ev)}`);
    }
  }, /does not know/);
});
