import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ShareConsumer } from '../lib/index.js';
import { useServer, eventually } from '../harness/fixture.js';

// A short heartbeat interval, so that the background heartbeats run within the test.
const srv = useServer({ args: ['--share-heartbeat-interval', '100ms'] });

test('background heartbeats pick up a new assignment and keep the member in the group', { timeout: 60_000 }, async () => {
  const { client } = srv;
  await client.log.createTopic({ name: 'jobs', partitions: 2 });
  const a = new ShareConsumer(client, { groupId: 'workers', topics: ['jobs'], memberId: 'worker-a' });
  await a.subscribe();
  assert.equal(a.heartbeatIntervalMs, 100, 'the interval comes from the server');
  assert.deepEqual(a.assignment.map((tp) => tp.partition).sort(), [0, 1]);

  const b = new ShareConsumer(client, { groupId: 'workers', topics: ['jobs'], memberId: 'worker-b' });
  await b.subscribe();
  assert.equal(b.assignment.length, 1);
  // No explicit heartbeat from a: its timer learns that it lost a partition.
  await eventually(() => a.assignment.length === 1, { intervalMs: 20, what: "a's new assignment" });
  assert.notEqual(a.assignment[0].partition, b.assignment[0].partition);
  assert.equal(a.lastHeartbeatError, null);

  const desc = await client.shareGroups.describeShareGroup({ group_id: 'workers' });
  assert.deepEqual(desc.members.map((m) => m.member_id).sort(), ['worker-a', 'worker-b']);
  await a.close();
  await b.close();
  const after = await client.shareGroups.describeShareGroup({ group_id: 'workers' });
  assert.equal(after.members.length, 0, 'close leaves the group');
});
