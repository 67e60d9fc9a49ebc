// kafkajs 2.2.4 over SASL_SSL with SCRAM-SHA-512: produces to a topic and
// checks its offsets; a wrong password must be refused with
// SASL_AUTHENTICATION_FAILED (the broker's message, in kafkajs's
// KafkaJSSASLAuthenticationError). Environment: KAFKA_BROKER, KAFKA_CA (PEM file
// of the CA), KAFKA_USER, KAFKA_PASSWORD, KAFKA_TOPIC. .ci/kafka-clients
// reads the records back with kcat (kafkajs consumes only through a
// classic consumer group, which the listener does not serve yet).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Kafka, logLevel } from 'kafkajs';

const { KAFKA_BROKER: broker, KAFKA_CA: caFile, KAFKA_USER: username, KAFKA_PASSWORD: password, KAFKA_TOPIC: topic } = process.env;
if (!broker || !caFile || !username || !password || !topic) {
  console.error('KAFKA_BROKER, KAFKA_CA, KAFKA_USER, KAFKA_PASSWORD and KAFKA_TOPIC must be set');
  process.exit(2);
}
const ssl = { ca: [readFileSync(caFile, 'utf8')] };
const client = (pass) => new Kafka({
  clientId: 'kafkajs-sasl-check', brokers: [broker], ssl, logLevel: logLevel.NOTHING, retry: { retries: 0 },
  sasl: { mechanism: 'scram-sha-512', username, password: pass },
});

async function main() {
  const kafka = client(password);
  const admin = kafka.admin();
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await admin.connect();
  await producer.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
    const sent = await producer.send({ topic, acks: -1, messages: ['js-0', 'js-1', 'js-2'].map((v) => ({ key: 'k', value: v })) });
    assert.equal(sent[0].errorCode, 0);
    assert.equal(sent[0].baseOffset, '0');
    const [p] = await admin.fetchTopicOffsets(topic);
    assert.equal(p.high, '3', 'three records over SASL_SSL/SCRAM-SHA-512');
  } finally {
    await producer.disconnect();
    await admin.disconnect();
  }

  const bad = client(password + '-wrong').admin();
  // kafkajs wraps the broker's SASL_AUTHENTICATION_FAILED (58) answer in a
  // KafkaJSSASLAuthenticationError carrying the broker's message.
  await assert.rejects(bad.connect(), (err) => {
    assert.equal(err.name, 'KafkaJSSASLAuthenticationError', `error of ${err}`);
    assert.match(err.message, /SCRAM SHA512 authentication failed: .*invalid credentials with SASL mechanism SCRAM-SHA-512/, 'the broker says why');
    return true;
  });
  console.log('kafkajs-sasl-check: ok (SASL_SSL SCRAM-SHA-512: createTopics, produce, fetchTopicOffsets; a wrong password is SASL_AUTHENTICATION_FAILED)');
}

main().catch((err) => {
  console.error('kafkajs-sasl-check: FAILED:', err);
  process.exit(1);
});
