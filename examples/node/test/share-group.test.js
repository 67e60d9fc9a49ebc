import { test } from 'node:test';
import assert from 'node:assert/strict';
import grpc from '@grpc/grpc-js';
import { ShareConsumer, AckType } from '../lib/index.js';
import { useServer, eventually } from '../harness/fixture.js';

const srv = useServer();

// startFromEarliest makes the group's share-partitions start at the log start
// offset (the default, "latest", skips what was produced before they were
// first used).
async function startFromEarliest(client, group) {
  const resp = await client.shareGroups.updateShareGroupConfig({ group_id: group, config: { auto_offset_reset: 'earliest' } });
  assert.equal(resp.config.auto_offset_reset, 'earliest');
}

test('two consumers of one group over 3 partitions accept every record exactly once', { timeout: 60_000 }, async () => {
  const { client } = srv;
  const topic = 'orders';
  const group = 'billing';
  const perPartition = 12;
  await client.log.createTopic({ name: topic, partitions: 3 });
  await startFromEarliest(client, group);

  const a = new ShareConsumer(client, { groupId: group, topics: [topic], memberId: 'consumer-a', maxRecords: 5, maxWaitMs: 200 });
  const b = new ShareConsumer(client, { groupId: group, topics: [topic], memberId: 'consumer-b', maxRecords: 5, maxWaitMs: 200 });
  await a.subscribe();
  await b.subscribe();
  await a.heartbeat(); // a learns that b took part of its assignment
  const parts = (c) => c.assignment.map((tp) => tp.partition).sort();
  assert.ok(parts(a).length > 0 && parts(b).length > 0, `both members have partitions: a=${parts(a)} b=${parts(b)}`);
  assert.deepEqual([...parts(a), ...parts(b)].sort(), [0, 1, 2], 'the assignment splits the 3 partitions between them');

  for (let p = 0; p < 3; p++) {
    const records = Array.from({ length: perPartition }, (_, i) => ({ key: Buffer.from(`k${i}`), value: Buffer.from(`p${p}-${i}`) }));
    await client.log.produce({ topic, partition: p, records });
  }
  const total = 3 * perPartition;

  const seen = new Map(); // "partition:offset" → consumer
  const duplicates = [];
  const counts = { 'consumer-a': 0, 'consumer-b': 0 };
  const deadline = Date.now() + 20000; // a safety net: the loop ends when all records arrived
  let failed = false;
  const run = async (c) => {
    try {
      while (!failed && seen.size < total && Date.now() < deadline) {
        for (const r of await c.poll()) {
          const id = `${r.partition}:${r.offset}`;
          if (seen.has(id)) {
            duplicates.push(`${id} to ${c.memberId} after ${seen.get(id)}`);
          }
          seen.set(id, c.memberId);
          assert.equal(r.deliveryCount, 1, `first delivery of ${id}`);
          assert.equal(r.value.toString(), `p${r.partition}-${r.offset}`);
          assert.ok(c.assignment.some((tp) => tp.partition === r.partition), `${c.memberId} fetches only its partitions`);
          counts[c.memberId]++;
          c.acknowledge(r, AckType.ACCEPT); // sent with the next poll, or by close
        }
      }
    } catch (err) {
      failed = true; // stop the other consumer too
      throw err;
    }
  };
  await Promise.all([run(a), run(b)]);
  await a.close(); // epoch -1: delivers the last acknowledgements and ends the session
  await b.close();

  assert.deepEqual(duplicates, []);
  assert.equal(seen.size, total, 'every record was delivered');
  assert.ok(counts['consumer-a'] > 0 && counts['consumer-b'] > 0, JSON.stringify(counts));
  assert.deepEqual(a.ackFailures, []);
  assert.deepEqual(b.ackFailures, []);
  assert.equal(a.lastCloseError, undefined);
  assert.equal(b.lastCloseError, undefined);

  // The server agrees: every share-partition is past its records with no lag.
  const offsets = await client.shareGroups.describeShareGroupOffsets({ group_id: group, topics: [{ topic, partitions: [] }] });
  const byPartition = offsets.topics[0].partitions.map((p) => [p.partition, p.start_offset, p.lag]).sort((x, y) => x[0] - y[0]);
  assert.deepEqual(byPartition, [
    [0, perPartition, 0],
    [1, perPartition, 0],
    [2, perPartition, 0],
  ]);
  // ...and both members left the group.
  const desc = await client.shareGroups.describeShareGroup({ group_id: group });
  assert.equal(desc.members.length, 0);
  assert.equal(desc.state, 'SHARE_GROUP_STATE_EMPTY');
});

test('a released record is delivered again with delivery count 2', { timeout: 60_000 }, async () => {
  const { client } = srv;
  const topic = 'retries';
  const group = 'retrier';
  await client.log.createTopic({ name: topic, partitions: 1 });
  await startFromEarliest(client, group);
  await client.log.produce({ topic, records: ['a', 'b', 'c'].map((v) => ({ key: Buffer.from(v), value: Buffer.from(v) })) });

  const c = new ShareConsumer(client, { groupId: group, topics: [topic], maxWaitMs: 500 });
  await c.subscribe();
  const first = await eventually(async () => {
    const recs = await c.poll();
    return recs.length > 0 && recs;
  }, { what: 'the first delivery' });
  assert.deepEqual(first.map((r) => [r.offset, r.deliveryCount]), [[0, 1], [1, 1], [2, 1]]);

  // RELEASE offset 0, ACCEPT offset 1, through ShareAcknowledge: it takes the
  // session's next epoch like a ShareFetch would.
  c.acknowledge(first[0], AckType.RELEASE);
  c.acknowledge(first[1], AckType.ACCEPT);
  const epochBefore = c.sessionEpoch;
  assert.equal(await c.commit(), 0, 'no acknowledgement refused');
  assert.equal(c.sessionEpoch, epochBefore + 1, 'ShareAcknowledge consumed one epoch');

  // ACCEPT offset 2 with the next ShareFetch, which gets offset 0 again.
  c.acknowledge(first[2], AckType.ACCEPT);
  const again = await eventually(async () => {
    const recs = await c.poll();
    return recs.length > 0 && recs;
  }, { what: 'the redelivery' });
  assert.deepEqual(again.map((r) => [r.offset, r.deliveryCount, r.value.toString()]), [[0, 2, 'a']]);
  c.acknowledge(again[0], AckType.ACCEPT);
  await c.close();
  assert.deepEqual(c.ackFailures, []);
  assert.equal(c.lastCloseError, undefined);

  const offsets = await client.shareGroups.describeShareGroupOffsets({ group_id: group });
  assert.deepEqual(offsets.topics[0].partitions.map((p) => [p.start_offset, p.lag]), [[3, 0]]);
});

test('session epochs: a stale epoch and an epoch-0 ShareAcknowledge are refused with ErrorInfo', { timeout: 60_000 }, async () => {
  const { client } = srv;
  const topic = 'epochs';
  const group = 'epoch-check';
  await client.log.createTopic({ name: topic, partitions: 1 });
  const base = { group_id: group, member_id: 'raw-member' };
  await client.shareGroups.shareFetch({ ...base, share_session_epoch: 0, topics: [{ topic, partitions: [{ partition: 0 }] }] });
  await client.shareGroups.shareFetch({ ...base, share_session_epoch: 1 });
  await client.shareGroups.shareAcknowledge({ ...base, share_session_epoch: 2 }); // shares the sequence

  await assert.rejects(client.shareGroups.shareFetch({ ...base, share_session_epoch: 2 }), (err) => {
    assert.equal(err.code, grpc.status.FAILED_PRECONDITION);
    assert.equal(err.errorInfo?.reason, 'INVALID_SHARE_SESSION_EPOCH');
    assert.equal(err.errorInfo?.metadata.expected_epoch, '3');
    return true;
  });
  await assert.rejects(client.shareGroups.shareAcknowledge({ ...base, share_session_epoch: 0 }), (err) => {
    assert.equal(err.errorInfo?.reason, 'INVALID_SHARE_SESSION_EPOCH');
    return true;
  });
  await client.shareGroups.shareFetch({ ...base, share_session_epoch: 3 }); // the refused requests consumed nothing
  await client.shareGroups.shareAcknowledge({ ...base, share_session_epoch: -1 }); // close
  await assert.rejects(client.shareGroups.shareFetch({ ...base, share_session_epoch: 4 }), (err) => {
    assert.equal(err.code, grpc.status.NOT_FOUND);
    assert.equal(err.errorInfo?.reason, 'SHARE_SESSION_NOT_FOUND');
    return true;
  });
});
