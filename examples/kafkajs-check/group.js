// A kafkajs 2.2.4 consumer group of two members through rebalances,
// against sharelog's Kafka listener (KAFKA_BROKER):
//
//  1. member 1 joins alone, gets the four partitions and consumes batch A;
//  2. member 2 joins: the group rebalances and splits the partitions
//     between them; batch B is consumed by both, each only from its own
//     partitions;
//  3. member 2 leaves: member 1 takes over its partitions and consumes
//     batch C from all four;
//  4. member 1 leaves too, batch D is produced, and a restarted consumer
//     of the group resumes at the committed offsets: it reads D and nothing
//     before it.
//
// Every phase waits for the group's committed offsets (OffsetFetch) to
// reach what was consumed before the next membership change, so no record
// may legitimately be delivered twice: across the members the records
// consumed are exactly the records produced, each once. Any mismatch
// exits non-zero.
import assert from 'node:assert/strict';
import { Kafka, logLevel } from 'kafkajs';

const broker = process.env.KAFKA_BROKER;
if (!broker) {
  console.error('KAFKA_BROKER is not set');
  process.exit(2);
}
// kafkajs logs every REBALANCE_IN_PROGRESS answer to a heartbeat (at ERROR
// level) and the rejoin after it; this check rebalances on purpose, so
// those lines are left out and everything else is printed as kafkajs does.
const rebalancing = 'The group is rebalancing, so a rejoin is needed';
const logCreator = () => ({ namespace, label, log }) => {
  if (log.error === rebalancing) return;
  const { message, ...extra } = log;
  console.error(JSON.stringify({ level: label, logger: 'kafkajs', message: `[${namespace}] ${message}`, ...extra }));
};
const kafka = new Kafka({ clientId: 'kafkajs-group', brokers: [broker], logLevel: logLevel.WARN, logCreator, retry: { retries: 3 } });
const admin = kafka.admin();
const producer = kafka.producer({ allowAutoTopicCreation: false });
const topic = 'kafkajs-group';
const groupId = 'kafkajs-group-check';
const partitions = [0, 1, 2, 3];
const produced = new Map(); // "partition/offset" -> key
const consumed = []; // { member, partition, offset, key }
const members = [];

async function waitFor(what, cond, ms = 30000) {
  const until = Date.now() + ms;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// produce sends two records to every partition, keyed by batch and
// partition, and remembers their offsets.
async function produce(batch) {
  const res = await producer.send({
    topic, acks: -1,
    messages: partitions.flatMap((p) => [0, 1].map((i) => ({ partition: p, key: `${batch}-${p}-${i}`, value: `v-${batch}-${p}-${i}` }))),
  });
  for (const r of res) {
    assert.equal(r.errorCode, 0);
    for (const i of [0, 1]) produced.set(`${r.partition}/${Number(r.baseOffset) + i}`, `${batch}-${r.partition}-${i}`);
  }
}

async function startMember(name) {
  const consumer = kafka.consumer({
    groupId, sessionTimeout: 6000, heartbeatInterval: 300, rebalanceTimeout: 20000, maxWaitTimeInMs: 300, retry: { retries: 3 },
  });
  const m = { name, consumer, assignment: null, joins: 0 };
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    m.assignment = [...(e.payload.memberAssignment[topic] || [])].sort((a, b) => a - b);
    m.joins++;
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  consumer.run({
    eachMessage: async ({ partition, message }) => {
      consumed.push({ member: name, partition, offset: Number(message.offset), key: message.key.toString() });
    },
  }).catch((err) => { console.error(`kafkajs-group: ${name} failed:`, err); process.exit(1); });
  members.push(m);
  return m;
}

async function stopMember(m) {
  await m.consumer.disconnect(); // commits what it consumed and leaves the group
  members.splice(members.indexOf(m), 1);
}

// committedAtEnd waits until the group's committed offset of every partition
// is the partition's end (every record produced so far consumed and
// committed).
async function committedAtEnd() {
  const end = await admin.fetchTopicOffsets(topic);
  const want = Object.fromEntries(end.map((o) => [o.partition, o.high]));
  let last;
  await waitFor('the commits to reach the end offsets', async () => {
    const c = await admin.fetchOffsets({ groupId, topics: [topic] });
    last = Object.fromEntries(c[0].partitions.map((o) => [o.partition, o.offset]));
    return JSON.stringify(last) === JSON.stringify(want);
  }).catch((err) => { throw new Error(`${err.message}: committed ${JSON.stringify(last)}, end ${JSON.stringify(want)}`); });
}

const consumedOf = (batch) => consumed.filter((c) => c.key.startsWith(`${batch}-`));

// expectBatch checks that a batch was consumed once and in full, and who
// consumed each of its partitions.
function expectBatch(batch, ownerOf) {
  const got = consumedOf(batch);
  const keys = got.map((c) => c.key).sort();
  const want = partitions.flatMap((p) => [0, 1].map((i) => `${batch}-${p}-${i}`)).sort();
  assert.deepEqual(keys, want, `batch ${batch}: consumed once and in full`);
  for (const c of got) {
    assert.equal(c.member, ownerOf(c.partition), `batch ${batch}: partition ${c.partition} consumed by ${c.member}`);
  }
}

async function main() {
  await admin.connect();
  await producer.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions.length }], waitForLeaders: true });

  // 1. One member: all partitions are its own.
  await produce('A');
  const m1 = await startMember('member-1');
  await waitFor('member 1 to consume batch A', () => consumedOf('A').length === 8);
  assert.deepEqual(m1.assignment, partitions, 'member 1 alone holds every partition');
  expectBatch('A', () => 'member-1');
  await committedAtEnd();

  // 2. A second member joins: the partitions are split between the two.
  const joinsBefore = m1.joins;
  const m2 = await startMember('member-2');
  await waitFor('the rebalance to split the partitions', () => m1.joins > joinsBefore && m2.assignment !== null &&
    m1.assignment.length > 0 && m2.assignment.length > 0 &&
    JSON.stringify([...m1.assignment, ...m2.assignment].sort((a, b) => a - b)) === JSON.stringify(partitions));
  const split = { 'member-1': m1.assignment, 'member-2': m2.assignment };
  const described = await admin.describeGroups([groupId]);
  assert.equal(described.groups[0].state, 'Stable');
  assert.equal(described.groups[0].members.length, 2, 'the group has two members');
  await produce('B');
  await waitFor('both members to consume batch B', () => consumedOf('B').length === 8);
  expectBatch('B', (p) => (split['member-1'].includes(p) ? 'member-1' : 'member-2'));
  await committedAtEnd();

  // 3. Member 2 leaves: member 1 takes its partitions over.
  const joinsBeforeLeave = m1.joins;
  await stopMember(m2);
  await waitFor('member 1 to take over every partition', () => m1.joins > joinsBeforeLeave &&
    JSON.stringify(m1.assignment) === JSON.stringify(partitions));
  await produce('C');
  await waitFor('member 1 to consume batch C', () => consumedOf('C').length === 8);
  expectBatch('C', () => 'member-1');
  await committedAtEnd();
  await stopMember(m1);

  // 4. The group restarted resumes at its commits.
  await produce('D');
  const m3 = await startMember('member-3');
  await waitFor('the restarted member to consume batch D', () => consumedOf('D').length === 8);
  await new Promise((r) => setTimeout(r, 500)); // anything read twice or from before the commits shows up here
  expectBatch('D', () => 'member-3');
  await committedAtEnd();
  await stopMember(m3);

  // Across all members: every record produced, consumed exactly once.
  const seen = consumed.map((c) => `${c.partition}/${c.offset}`);
  assert.equal(new Set(seen).size, seen.length, 'a record was consumed twice');
  assert.deepEqual(seen.sort(), [...produced.keys()].sort(), 'consumed records are the produced ones');
  for (const c of consumed) assert.equal(c.key, produced.get(`${c.partition}/${c.offset}`), `key at ${c.partition}/${c.offset}`);
  const parts = (ps) => ps.join(',');
  console.log(`kafkajs-group: ok (member 1 alone; member 2 joins: split ${parts(split['member-1'])} / ${parts(split['member-2'])}; ` +
    `member 2 leaves: member 1 takes all; restart resumes at the commits; ${consumed.length} records, each once)`);
}

main()
  .then(async () => {
    await producer.disconnect();
    await admin.disconnect();
  })
  .catch(async (err) => {
    console.error('kafkajs-group: FAILED:', err);
    try {
      for (const m of [...members]) await m.consumer.disconnect();
      await producer.disconnect();
      await admin.disconnect();
    } catch { /* already failing */ }
    process.exit(1);
  });
