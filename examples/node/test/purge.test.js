import { test } from 'node:test';
import assert from 'node:assert/strict';
import grpc from '@grpc/grpc-js';
import { decodeStatus } from '../lib/index.js';
import { useServer } from '../harness/fixture.js';

const srv = useServer();

test('purge moves the log start; a fetch below it fails with OFFSET_OUT_OF_RANGE and its metadata', { timeout: 60_000 }, async () => {
  const { client } = srv;
  const topic = 'audit';
  await client.log.createTopic({ name: topic, partitions: 1 });
  const records = Array.from({ length: 10 }, (_, i) => ({ key: Buffer.from(`k${i}`), value: Buffer.from(`v${i}`) }));
  await client.log.produce({ topic, records });

  const purged = await client.log.purge({ topics: [{ topic, partitions: [{ partition: 0, offset: 4 }] }] });
  assert.deepEqual(
    purged.topics.map((t) => [t.topic, t.partitions.map((p) => [p.partition, p.low_watermark, p.error_code])]),
    [[topic, [[0, 4, 'ERROR_CODE_NONE']]]],
  );
  const described = await client.log.describeTopic({ name: topic });
  assert.equal(described.partitions[0].log_start_offset, 4);
  assert.equal(described.partitions[0].high_watermark, 10);
  const earliest = await client.log.listOffsets({ topic, partition: 0, spec: 'OFFSET_SPEC_EARLIEST' });
  assert.equal(earliest.offset, 4);

  await assert.rejects(client.log.fetch({ topic, partition: 0, offset: 1 }), (err) => {
    assert.equal(err.code, grpc.status.OUT_OF_RANGE);
    assert.deepEqual(err.errorInfo, {
      reason: 'OFFSET_OUT_OF_RANGE',
      domain: 'sharelog',
      metadata: { log_start_offset: '4', high_watermark: '10' },
    });
    // The whole google.rpc.Status, for clients that want the other details too.
    const st = decodeStatus(err);
    assert.equal(st.code, grpc.status.OUT_OF_RANGE);
    assert.equal(st.message, err.details);
    assert.deepEqual(st.details.map((d) => d.type), ['google.rpc.ErrorInfo']);
    return true;
  });

  const fromStart = await client.log.fetch({ topic, partition: 0, offset: 4 });
  assert.deepEqual(fromStart.records.map((r) => r.offset), [4, 5, 6, 7, 8, 9]);
  assert.equal(fromStart.log_start_offset, 4);
});

test('purge reports a bad partition in the body without failing the others', { timeout: 60_000 }, async () => {
  const { client } = srv;
  await client.log.createTopic({ name: 'mixed', partitions: 1 });
  await client.log.produce({ topic: 'mixed', records: [{ value: Buffer.from('x') }, { value: Buffer.from('y') }] });
  const purged = await client.log.purge({
    topics: [{ topic: 'mixed', partitions: [{ partition: 0, offset: -1 }, { partition: 5, offset: 1 }] }],
  });
  const results = Object.fromEntries(purged.topics[0].partitions.map((p) => [p.partition, p]));
  assert.equal(results[0].error_code, 'ERROR_CODE_NONE');
  assert.equal(results[0].low_watermark, 2, 'offset -1 purges up to the high watermark');
  assert.equal(results[5].error_code, 'ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION');
  assert.equal(results[5].low_watermark, -1);
  assert.notEqual(results[5].error_message, '');
});

test('an error without details decodes to null', { timeout: 60_000 }, async () => {
  const { decodeErrorInfo } = await import('../lib/index.js');
  assert.equal(decodeErrorInfo(new Error('plain')), null);
  const md = new grpc.Metadata();
  assert.equal(decodeErrorInfo({ code: grpc.status.UNAVAILABLE, metadata: md }), null);
});
