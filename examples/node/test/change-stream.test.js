import { test } from 'node:test';
import assert from 'node:assert/strict';
import grpc from '@grpc/grpc-js';
import { changeEvents } from '../lib/index.js';
import { useServer } from '../harness/fixture.js';

const srv = useServer();

const rec = (key, value) => ({ key: Buffer.from(key), ...(value === undefined ? {} : { value: Buffer.from(value) }) });

test('a change stream with end_offset delivers the produced records and ends OK', { timeout: 60_000 }, async () => {
  const { client } = srv;
  const topic = 'profiles';
  await client.log.createTopic({ name: topic, partitions: 1 });
  await client.log.produce({ topic, records: [rec('alice', 'v1'), rec('bob', 'v1'), rec('alice')] });

  const events = [];
  for await (const ev of changeEvents(client, { topic, partition: 0, start_offset: 0, end_offset: 3 })) {
    events.push(ev);
  }
  const changes = events
    .filter((e) => e.type === 'mutation' || e.type === 'deletion')
    .map((e) => [e.type, e.offset, e.key.toString(), e.value?.toString()]);
  assert.deepEqual(changes, [
    ['mutation', 0, 'alice', 'v1'],
    ['mutation', 1, 'bob', 'v1'],
    ['deletion', 2, 'alice', undefined],
  ]);
  assert.equal(events[0].type, 'snapshot_marker');
  assert.deepEqual(events.at(-1), { type: 'stream_end', reason: 'STREAM_END_REASON_OK' });
});

test('a live change stream receives records produced after it opened and stops cleanly on abort', { timeout: 60_000 }, async () => {
  const { client } = srv;
  const topic = 'live';
  await client.log.createTopic({ name: topic, partitions: 1 });
  const ac = new AbortController();
  const received = [];
  const consuming = (async () => {
    for await (const ev of changeEvents(client, { topic, partition: 0, start_offset: 0 }, { signal: ac.signal })) {
      if (ev.type === 'mutation') {
        received.push(ev.value.toString());
        if (received.length === 2) {
          ac.abort(); // no end_offset: the client ends the call
        }
      }
    }
    return 'ended';
  })();
  await client.log.produce({ topic, records: [rec('a', 'first')] });
  await client.log.produce({ topic, records: [rec('b', 'second')] });
  assert.equal(await consuming, 'ended', 'the loop ends without an error');
  assert.deepEqual(received, ['first', 'second']);

  // Leaving the loop with break cancels the call as well.
  let n = 0;
  for await (const ev of changeEvents(client, { topic, partition: 0, start_offset: 0 })) {
    if (ev.type === 'mutation' && ++n === 1) {
      break;
    }
  }
  assert.equal(n, 1);
});

test('a change stream on an unknown topic fails with a decoded ErrorInfo', { timeout: 60_000 }, async () => {
  const { client } = srv;
  await assert.rejects(
    (async () => {
      for await (const ev of changeEvents(client, { topic: 'nope', partition: 0, start_offset: 0 })) {
        assert.fail(`unexpected event ${JSON.stringify(ev)}`);
      }
    })(),
    (err) => {
      assert.equal(err.code, grpc.status.NOT_FOUND);
      assert.equal(err.errorInfo?.reason, 'UNKNOWN_TOPIC_OR_PARTITION');
      return true;
    },
  );
});
