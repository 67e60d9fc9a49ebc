import { test } from 'node:test';
import assert from 'node:assert/strict';
import grpc from '@grpc/grpc-js';
import { useServer } from '../harness/fixture.js';

const srv = useServer();

test('produce then fetch returns the same records, keys, values, tombstones and headers', { timeout: 60_000 }, async () => {
  const { client } = srv;
  const topic = await client.log.createTopic({ name: 'roundtrip', partitions: 2 });
  assert.equal(topic.partition_count, 2);
  assert.match(topic.topic_id, /^[0-9a-f-]{36}$/);

  const sent = [
    { key: Buffer.from('user-1'), value: Buffer.from('{"n":1}'), headers: [{ key: 'trace', value: Buffer.from('abc') }] },
    { key: Buffer.from('user-2'), value: Buffer.from('{"n":2}') },
    { value: Buffer.from('no key') },
    { key: Buffer.from('user-1') }, // no value: a tombstone
  ];
  const produced = await client.log.produce({ topic: 'roundtrip', partition: 1, records: sent });
  assert.deepEqual(
    produced.results.map((r) => [r.partition, r.offset]),
    [[1, 0], [1, 1], [1, 2], [1, 3]],
  );
  assert.ok(produced.log_append_time > 0);

  const fetched = await client.log.fetch({ topic: 'roundtrip', partition: 1, offset: 0, max_records: 10 });
  assert.equal(fetched.high_watermark, 4);
  assert.equal(fetched.log_start_offset, 0);
  assert.deepEqual(fetched.records.map((r) => r.offset), [0, 1, 2, 3]);
  assert.deepEqual(fetched.records.map((r) => r.key?.toString()), ['user-1', 'user-2', undefined, 'user-1']);
  assert.deepEqual(fetched.records.map((r) => r.value?.toString()), ['{"n":1}', '{"n":2}', 'no key', undefined]);
  assert.deepEqual(
    fetched.records[0].headers.map((h) => [h.key, h.value.toString()]),
    [['trace', 'abc']],
  );
  for (const r of fetched.records) {
    assert.equal(r.timestamp, produced.log_append_time, 'records sent without a timestamp get the append time');
  }

  // Partition 0 got nothing; a fetch from its high watermark with no wait is empty.
  const empty = await client.log.fetch({ topic: 'roundtrip', partition: 0, offset: 0 });
  assert.equal(empty.records.length, 0);
  assert.equal(empty.high_watermark, 0);
});

test('a long-polling fetch at the high watermark returns the record produced meanwhile', { timeout: 60_000 }, async () => {
  const { client } = srv;
  await client.log.createTopic({ name: 'longpoll', partitions: 1 });
  const waiting = client.log.fetch({ topic: 'longpoll', partition: 0, offset: 0, max_wait_ms: 10000 });
  await client.log.produce({ topic: 'longpoll', records: [{ key: Buffer.from('k'), value: Buffer.from('late') }] });
  const got = await waiting;
  assert.deepEqual(got.records.map((r) => r.value.toString()), ['late']);
});

test('a request-level error carries a decoded ErrorInfo', { timeout: 60_000 }, async () => {
  const { client } = srv;
  await client.log.createTopic({ name: 'twice', partitions: 1 });
  await assert.rejects(client.log.createTopic({ name: 'twice', partitions: 1 }), (err) => {
    assert.equal(err.code, grpc.status.ALREADY_EXISTS);
    assert.equal(err.errorInfo?.reason, 'TOPIC_ALREADY_EXISTS');
    assert.equal(err.errorInfo?.domain, 'sharelog');
    return true;
  });
  await assert.rejects(client.log.fetch({ topic: 'no-such-topic', partition: 0, offset: 0 }), (err) => {
    assert.equal(err.code, grpc.status.NOT_FOUND);
    assert.equal(err.errorInfo?.reason, 'UNKNOWN_TOPIC_OR_PARTITION');
    return true;
  });
});
