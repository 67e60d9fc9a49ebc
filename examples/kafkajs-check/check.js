// Black-box check of sharelog's Kafka listener with kafkajs 2.2.4 (an
// independent, pure-JavaScript Kafka client): createTopics, produce (plain
// and gzip, and idempotent: true into kafkajs-idem), fetchTopicOffsets,
// deleteTopicRecords, a consumer group (consume, committed offsets,
// listGroups, describeGroups, deleteGroups). The broker address comes
// from KAFKA_BROKER; any mismatch exits non-zero.
import assert from 'node:assert/strict';
import { Kafka, CompressionTypes, logLevel } from 'kafkajs';

const broker = process.env.KAFKA_BROKER;
if (!broker) {
  console.error('KAFKA_BROKER is not set');
  process.exit(2);
}
const kafka = new Kafka({ clientId: 'kafkajs-check', brokers: [broker], logLevel: logLevel.WARN, retry: { retries: 2 } });
const admin = kafka.admin();
const producer = kafka.producer({ allowAutoTopicCreation: false });
const topic = 'kafkajs-check';

async function main() {
  await admin.connect();
  await producer.connect();

  const created = await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true });
  assert.equal(created, true, 'createTopics should report a new topic');
  const again = await admin.createTopics({ topics: [{ topic, numPartitions: 2 }] });
  assert.equal(again, false, 'creating an existing topic reports false');

  const plain = await producer.send({
    topic, acks: -1,
    messages: [0, 1, 2].map((i) => ({ partition: 0, key: `k${i}`, value: `v${i}` })),
  });
  assert.equal(plain.length, 1);
  assert.equal(plain[0].errorCode, 0);
  assert.equal(plain[0].baseOffset, '0');
  const gz = await producer.send({
    topic, acks: -1, compression: CompressionTypes.GZIP,
    messages: [3, 4].map((i) => ({ partition: 0, key: `k${i}`, value: `v${i}`, headers: { h: 'x' } })),
  });
  assert.equal(gz[0].baseOffset, '3');
  await producer.send({ topic, acks: 1, messages: [{ partition: 1, value: 'p1' }] });

  let offsets = await admin.fetchTopicOffsets(topic);
  const byPartition = (os) => Object.fromEntries(os.map((o) => [o.partition, o]));
  let p = byPartition(offsets);
  assert.equal(p[0].low, '0');
  assert.equal(p[0].high, '5');
  assert.equal(p[1].high, '1');

  // kafkajs needs the topic's metadata before deleteTopicRecords.
  await admin.fetchTopicMetadata({ topics: [topic] });
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '2' }, { partition: 1, offset: '-1' }] });
  offsets = await admin.fetchTopicOffsets(topic);
  p = byPartition(offsets);
  assert.equal(p[0].low, '2', 'log start after deleteTopicRecords');
  assert.equal(p[0].high, '5');
  assert.equal(p[1].low, '1', '-1 purges up to the high watermark');

  const byTime = await admin.fetchTopicOffsetsByTimestamp(topic, 0);
  assert.equal(byPartition(byTime)[0].offset, '2', 'the first offset at or after timestamp 0 is the log start');

  // A consumer group: kafkajs joins, is assigned both partitions, consumes
  // what is left after the purge and commits it.
  const groupId = 'kafkajs-check-group';
  const consumer = kafka.consumer({ groupId, retry: { retries: 2 } });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const seen = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`consumed ${seen.length} of 3 records`)), 60000);
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        seen.push(`${partition}/${message.offset}`);
        if (seen.length === 3) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  await consumer.disconnect(); // commits and leaves the group
  assert.deepEqual(seen.sort(), ['0/2', '0/3', '0/4']);
  const committed = await admin.fetchOffsets({ groupId, topics: [topic] });
  assert.deepEqual(Object.fromEntries(committed[0].partitions.map((o) => [o.partition, o.offset])), { 0: '5', 1: '-1' },
    'committed offsets after the group consumed (partition 1 was empty)');
  const { groups } = await admin.listGroups(); // ListGroups v2
  assert.ok(groups.some((g) => g.groupId === groupId && g.protocolType === 'consumer'), 'the group is listed');
  const described = await admin.describeGroups([groupId]);
  assert.equal(described.groups[0].state, 'Empty', 'the group is empty once its consumer left');
  await admin.deleteGroups([groupId]);
  // An idempotent producer (InitProducerID, producer id and sequences in
  // its batches): each batch stored once at consecutive offsets. The
  // records stay for the caller to read back (.ci/kafka-clients, with kcat:
  // kafkajs has no consumer without consumer groups).
  const idem = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
  await idem.connect();
  await admin.createTopics({ topics: [{ topic: 'kafkajs-idem', numPartitions: 1 }], waitForLeaders: true });
  for (let b = 0; b < 3; b++) {
    const r = await idem.send({
      topic: 'kafkajs-idem', acks: -1,
      messages: [0, 1].map((i) => ({ partition: 0, value: `idem-${2 * b + i}` })),
    });
    assert.equal(r[0].errorCode, 0);
    assert.equal(r[0].baseOffset, String(2 * b), `idempotent batch ${b}: base offset`);
  }
  await idem.disconnect();

  await admin.deleteTopics({ topics: [topic] });
  const topics = await admin.listTopics();
  assert.ok(!topics.includes(topic), 'deleted topic is still listed');
  console.log('kafkajs-check: ok (createTopics, produce none+gzip, fetchTopicOffsets, deleteTopicRecords, by timestamp, consumer group, idempotent produce, deleteTopics)');
}

main()
  .then(async () => {
    await producer.disconnect();
    await admin.disconnect();
  })
  .catch(async (err) => {
    console.error('kafkajs-check: FAILED:', err);
    try { await producer.disconnect(); await admin.disconnect(); } catch { /* already failing */ }
    process.exit(1);
  });
