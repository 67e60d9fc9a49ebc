// kafkajs 2.2.4's transactional producer against sharelog's Kafka listener
// (docs/kafka.md "Transactions"): into kafkajs-txn (one partition), a
// transaction of three records committed, then one of two records
// aborted, then a committed one of one record. .ci/kafka-clients reads the
// topic back with kcat, read committed (the four committed records) and
// read uncommitted (all six). The broker address comes from KAFKA_BROKER;
// any failure exits non-zero.
import assert from 'node:assert/strict';
import { Kafka, logLevel } from 'kafkajs';

const broker = process.env.KAFKA_BROKER;
if (!broker) {
  console.error('KAFKA_BROKER is not set');
  process.exit(2);
}
const kafka = new Kafka({ clientId: 'kafkajs-txn', brokers: [broker], logLevel: logLevel.WARN, retry: { retries: 2 } });
const topic = 'kafkajs-txn';

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  assert.equal(await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true }), true);
  await admin.disconnect();

  const producer = kafka.producer({ transactionalId: 'kafkajs-txn', idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const run = async (values, commit) => {
    const txn = await producer.transaction();
    await txn.send({ topic, acks: -1, messages: values.map((v) => ({ partition: 0, value: v })) });
    if (commit) {
      await txn.commit();
    } else {
      await txn.abort();
    }
  };
  await run(['js-a0', 'js-a1', 'js-a2'], true);
  await run(['js-b0', 'js-b1'], false);
  await run(['js-c0'], true);
  await producer.disconnect();
  console.log('kafkajs transactions: committed 2, aborted 1');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
