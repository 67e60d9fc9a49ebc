// A tour of sharelog from Node.js: create a topic, produce, fetch, consume it
// through a share group, purge, watch a change stream, and decode an error.
//
//   make run                                   # the server, in one terminal
//   cd examples/node && npm ci && node example.js [--addr 127.0.0.1:9090]
//
// It exits with status 1 if any step does not give what it expects.

import { parseArgs } from 'node:util';
import { SharelogClient, ShareConsumer, AckType, changeEvents } from './lib/index.js';

const { values: opts } = parseArgs({
  options: {
    addr: { type: 'string', default: process.env.SHARELOG_GRPC_ADDR || '127.0.0.1:9090' },
  },
});

function check(ok, what) {
  if (!ok) {
    throw new Error(`unexpected: ${what}`);
  }
}

async function main() {
  const client = new SharelogClient(opts.addr);
  try {
    await client.waitForReady(5000);
  } catch {
    throw new Error(`no sharelog server at ${opts.addr} (start one with 'make run')`);
  }
  try {
    const topic = `node-example-${Date.now()}`; // a new topic on every run
    const group = `${topic}-group`;

    // 1. A topic with 3 partitions; 9 records routed by key.
    const t = await client.log.createTopic({ name: topic, partitions: 3 });
    console.log(`created ${t.name} (${t.topic_id}) with ${t.partition_count} partitions`);
    const records = Array.from({ length: 9 }, (_, i) => ({ key: Buffer.from(`user-${i}`), value: Buffer.from(`event ${i}`) }));
    const produced = await client.log.produce({ topic, records });
    console.log('produced:', produced.results.map((r) => `p${r.partition}@${r.offset}`).join(' '));

    // 2. Fetch partition 0 from the start.
    const f = await client.log.fetch({ topic, partition: 0, offset: 0 });
    console.log(`partition 0 has ${f.records.length} records (high watermark ${f.high_watermark})`);

    // 3. Consume everything through a share group. "earliest": start at the
    //    log start rather than at the records produced from now on.
    await client.shareGroups.updateShareGroupConfig({ group_id: group, config: { auto_offset_reset: 'earliest' } });
    const consumer = new ShareConsumer(client, { groupId: group, topics: [topic], maxWaitMs: 500 });
    await consumer.subscribe();
    let accepted = 0;
    for (let polls = 0; accepted < records.length && polls < 20; polls++) {
      for (const r of await consumer.poll()) {
        console.log(`  share-consumed p${r.partition}@${r.offset} ${r.value} (delivery ${r.deliveryCount})`);
        consumer.acknowledge(r, AckType.ACCEPT);
        accepted++;
      }
    }
    await consumer.close();
    check(accepted === records.length && consumer.ackFailures.length === 0, `accepted ${accepted} of ${records.length}`);
    console.log(`share group ${group}: accepted ${accepted} records`);

    // 4. Purge partition 0 up to its high watermark, then read below it.
    const purged = await client.log.purge({ topics: [{ topic, partitions: [{ partition: 0, offset: -1 }] }] });
    const p0 = purged.topics[0].partitions[0];
    console.log(`purged partition 0: log start offset now ${p0.low_watermark} (${p0.error_code})`);
    if (p0.low_watermark > 0) {
      try {
        await client.log.fetch({ topic, partition: 0, offset: 0 });
        check(false, 'a fetch below the log start offset succeeded');
      } catch (err) {
        // err.errorInfo is the google.rpc.ErrorInfo of the status details.
        console.log(`fetch below the log start: ${err.errorInfo?.reason}`, err.errorInfo?.metadata);
        check(err.errorInfo?.reason === 'OFFSET_OUT_OF_RANGE', `reason ${err.errorInfo?.reason}`);
      }
    }

    // 5. The change stream of partition 1, up to its current high watermark.
    const { partitions } = await client.log.describeTopic({ name: topic });
    const hw = partitions[1].high_watermark;
    for await (const ev of changeEvents(client, { topic, partition: 1, start_offset: 0, end_offset: hw })) {
      if (ev.type === 'mutation') {
        console.log(`  change @${ev.offset}: ${ev.key} = ${ev.value}`);
      } else {
        console.log(`  ${ev.type}`, ev.reason ?? '');
      }
    }

    await client.log.deleteTopic({ name: topic });
    console.log('done');
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error(err.message);
  process.exitCode = 1;
});
