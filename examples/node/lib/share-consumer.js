// A share-group consumer (Kafka KIP-932 "queues"): the loop a client of
// ShareGroupService runs. It is a small example, not a port of the Go
// client in client/shareconsumer, which also recovers from requests lost in
// transport without dropping acknowledgements.
//
// Two independent pieces of protocol:
//
// Membership (ShareGroupHeartbeat). The consumer joins with member_epoch 0
// and its subscription, then heartbeats every heartbeat_interval_ms with its
// current epoch; the responses carry its member_epoch and, when it changed,
// its assignment (the partitions it should fetch). It leaves with epoch -1.
// Membership only decides which partitions to ask for: the server never
// checks it on ShareFetch or ShareAcknowledge.
//
// The share session (ShareFetch and ShareAcknowledge). A ShareFetch with
// share_session_epoch 0 opens a session holding the partitions it names
// (and ends any earlier session of the same group and member, releasing its
// records). Every later ShareFetch *and* ShareAcknowledge carries the next
// epoch, 1, 2, ... up to 2147483647 and then 1 again: the two RPCs share one
// sequence, and each admitted request consumes exactly one epoch. An
// incremental ShareFetch names only partitions to add (in `topics`) or to
// drop (`forgotten_topics_data`); partitions carrying acknowledgements are
// named in `topics` too. Epoch -1 on either RPC delivers the last
// acknowledgements and closes the session. A refused epoch
// (INVALID_SHARE_SESSION_EPOCH) or a session the server no longer has
// (SHARE_SESSION_NOT_FOUND, e.g. after a restart or an idle eviction) is
// answered by opening a new session with epoch 0; the records held by the
// old one are delivered again.
//
// Records come with `acquired_records` ranges giving each offset's delivery
// count: 1 on the first delivery, 2 after a RELEASE or an expired lock, ...

import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

/** Acknowledgement types (AcknowledgeType enum names). */
export const AckType = Object.freeze({
  ACCEPT: 'ACKNOWLEDGE_TYPE_ACCEPT',
  RELEASE: 'ACKNOWLEDGE_TYPE_RELEASE',
  REJECT: 'ACKNOWLEDGE_TYPE_REJECT',
  RENEW: 'ACKNOWLEDGE_TYPE_RENEW',
});

const NONE = 'ERROR_CODE_NONE';
const MAX_EPOCH = 2147483647;

const tpKey = (topic, partition) => `${topic}\u0000${partition}`;
const tpOf = (key) => {
  const i = key.lastIndexOf('\u0000');
  return { topic: key.slice(0, i), partition: Number(key.slice(i + 1)) };
};

/** nextEpoch is the share-session epoch after `epoch`: 0 → 1, ..., 2147483647 → 1. */
export function nextEpoch(epoch) {
  return epoch === MAX_EPOCH ? 1 : epoch + 1;
}

/**
 * ackBatches turns {offset → type} into acknowledgement_batches: maximal runs
 * of consecutive offsets with the same type, one type per batch.
 * @param {Map<number, string>} acks
 */
export function ackBatches(acks) {
  const offsets = [...acks.keys()].sort((a, b) => a - b);
  const out = [];
  for (const off of offsets) {
    const type = acks.get(off);
    const last = out[out.length - 1];
    if (last && last.last_offset === off - 1 && last.acknowledge_types[0] === type) {
      last.last_offset = off;
    } else {
      out.push({ first_offset: off, last_offset: off, acknowledge_types: [type] });
    }
  }
  return out;
}

function groupByTopic(entries) {
  const byTopic = new Map();
  for (const [key, value] of entries) {
    const { topic, partition } = tpOf(key);
    if (!byTopic.has(topic)) {
      byTopic.set(topic, []);
    }
    byTopic.get(topic).push(value ?? partition);
  }
  return byTopic;
}

export class ShareConsumer {
  /**
   * @param {import('./client.js').SharelogClient} client
   * @param {object} cfg
   * @param {string} cfg.groupId
   * @param {string[]} cfg.topics subscribed topics
   * @param {string} [cfg.memberId] 1..36 characters, kept for the consumer's life (default: a random UUID)
   * @param {number} [cfg.maxRecords] per ShareFetch, across all partitions (default 500)
   * @param {number} [cfg.maxWaitMs] long poll of a ShareFetch (default 500)
   */
  constructor(client, { groupId, topics, memberId = randomUUID(), maxRecords = 500, maxWaitMs = 500 }) {
    if (!groupId || !Array.isArray(topics) || topics.length === 0) {
      throw new TypeError('ShareConsumer needs a groupId and at least one topic');
    }
    this.client = client;
    this.groupId = groupId;
    this.topics = topics;
    this.memberId = memberId;
    this.maxRecords = maxRecords;
    this.maxWaitMs = maxWaitMs;

    // membership
    this.memberEpoch = 0;
    /** @type {{topic: string, partition: number}[]} the partitions assigned to this member */
    this.assignment = [];
    this.heartbeatIntervalMs = 5000;
    this.lastHeartbeatError = null;
    this.#timer = null;
    this.#beat = Promise.resolve();

    // share session
    this.sessionEpoch = 0; // the next epoch to send
    this.#sessionParts = new Set(); // partitions the server's session holds
    this.#pending = new Map(); // tpKey → Map<offset, AckType>
    this.#queue = Promise.resolve(); // session requests never overlap

    /** Acknowledgements the server refused or whose outcome is unknown: {topic, partition, offsets, code, message}. */
    this.ackFailures = [];
    this.closed = false;
  }

  #timer;
  #beat;
  #sessionParts;
  #pending;
  #queue;

  // ---- membership ----------------------------------------------------------

  /** subscribe joins the group and heartbeats in the background until close(). */
  async subscribe() {
    await this.heartbeat();
    this.#scheduleHeartbeat();
  }

  // scheduleHeartbeat arms the next background heartbeat, at the interval
  // the server last asked for. A failed one is retried at the next tick.
  #scheduleHeartbeat() {
    this.#timer = setTimeout(() => {
      this.heartbeat()
        .catch((err) => {
          this.lastHeartbeatError = err;
        })
        .finally(() => {
          if (!this.closed && this.#timer !== null) {
            this.#scheduleHeartbeat();
          }
        });
    }, this.heartbeatIntervalMs);
    this.#timer.unref(); // never keeps the process alive on its own
  }

  /**
   * heartbeat sends one ShareGroupHeartbeat now (joining if not a member) and
   * applies the assignment it returns. Heartbeats never overlap.
   */
  heartbeat() {
    this.#beat = this.#beat.catch(() => {}).then(() => this.#heartbeatOnce(true));
    return this.#beat;
  }

  async #heartbeatOnce(mayRejoin) {
    const joining = this.memberEpoch === 0;
    let resp;
    try {
      resp = await this.client.shareGroups.shareGroupHeartbeat({
        group_id: this.groupId,
        member_id: this.memberId,
        member_epoch: this.memberEpoch,
        subscribed_topic_names: joining ? this.topics : [],
      });
    } catch (err) {
      const reason = err.errorInfo?.reason;
      if (mayRejoin && !joining && (reason === 'UNKNOWN_MEMBER_ID' || reason === 'FENCED_MEMBER_EPOCH' || reason === 'GROUP_ID_NOT_FOUND')) {
        // Expired or fenced (e.g. the server restarted): join again.
        this.memberEpoch = 0;
        return this.#heartbeatOnce(false);
      }
      throw err;
    }
    this.lastHeartbeatError = null;
    this.memberEpoch = resp.member_epoch;
    if (resp.heartbeat_interval_ms > 0) {
      this.heartbeatIntervalMs = resp.heartbeat_interval_ms;
    }
    if (resp.assignment) {
      this.assignment = resp.assignment.topic_partitions.flatMap((tp) =>
        tp.partitions.map((partition) => ({ topic: tp.topic, partition })),
      );
    }
    return resp;
  }

  // ---- share session -------------------------------------------------------

  // serial runs session requests one after another: they share the epoch.
  #serial(fn) {
    const run = this.#queue.then(fn);
    this.#queue = run.catch(() => {});
    return run;
  }

  /**
   * acknowledge settles a record returned by poll(); the acknowledgement
   * travels with the next poll(), commit() or close().
   */
  acknowledge(record, type = AckType.ACCEPT) {
    if (!Object.values(AckType).includes(type)) {
      throw new TypeError(`unknown acknowledgement type ${type}`);
    }
    const key = tpKey(record.topic, record.partition);
    if (!this.#pending.has(key)) {
      this.#pending.set(key, new Map());
    }
    this.#pending.get(key).set(record.offset, type);
  }

  #takePending() {
    const p = this.#pending;
    this.#pending = new Map();
    return p;
  }

  #fail(acks, code, message) {
    for (const [key, m] of acks) {
      if (m.size > 0) {
        this.ackFailures.push({ ...tpOf(key), offsets: [...m.keys()].sort((a, b) => a - b), code, message });
      }
    }
  }

  // resetSession forgets the session: the next ShareFetch opens a new one
  // with epoch 0, which also ends the old one on the server if it still
  // exists (its records become available again).
  #resetSession() {
    this.sessionEpoch = 0;
    this.#sessionParts.clear();
  }

  /**
   * poll sends one ShareFetch carrying the pending acknowledgements and
   * returns the records it acquired, each with its deliveryCount. It returns
   * [] when nothing arrived within maxWaitMs, or after reopening a session
   * the server refused (call it again).
   */
  poll({ maxWaitMs = this.maxWaitMs } = {}) {
    return this.#serial(() => this.#poll(maxWaitMs));
  }

  async #poll(maxWaitMs) {
    if (this.closed) {
      throw new Error('ShareConsumer is closed');
    }
    const desired = new Set(this.assignment.map((tp) => tpKey(tp.topic, tp.partition)));
    const entries = new Map(); // tpKey → ShareFetchPartition
    const forgotten = new Map();
    let acks = new Map();
    if (this.sessionEpoch === 0) {
      // Acknowledgements are not allowed when opening a session; any still
      // pending belong to a session that ended, which released the records.
      this.#fail(this.#takePending(), 'SESSION_ENDED', 'the share session ended before these were sent');
      if (desired.size === 0) {
        await sleep(maxWaitMs); // nothing assigned (yet): don't open an empty session
        return [];
      }
      for (const key of desired) {
        entries.set(key, { partition: tpOf(key).partition, acknowledgement_batches: [] });
      }
    } else {
      acks = this.#takePending();
      for (const key of desired) {
        if (!this.#sessionParts.has(key)) {
          entries.set(key, { partition: tpOf(key).partition, acknowledgement_batches: [] });
        }
      }
      for (const key of this.#sessionParts) {
        if (!desired.has(key)) {
          forgotten.set(key, undefined);
        }
      }
      for (const [key, m] of acks) {
        entries.set(key, { partition: tpOf(key).partition, acknowledgement_batches: ackBatches(m) });
        if (!desired.has(key) && !this.#sessionParts.has(key)) {
          forgotten.set(key, undefined); // acknowledge it without adding it to the session
        }
      }
    }
    const req = {
      group_id: this.groupId,
      member_id: this.memberId,
      share_session_epoch: this.sessionEpoch,
      max_wait_ms: maxWaitMs,
      max_records: this.maxRecords,
      topics: [...groupByTopic(entries)].map(([topic, partitions]) => ({ topic, partitions })),
      forgotten_topics_data: [...groupByTopic(forgotten)].map(([topic, partitions]) => ({ topic, partitions })),
    };

    let resp;
    try {
      resp = await this.client.shareGroups.shareFetch(req, { timeoutMs: maxWaitMs + this.client.timeoutMs });
    } catch (err) {
      const reason = err.errorInfo?.reason;
      // Whatever went wrong, the session's state on the server is no longer
      // known: reopen it. Acknowledgements sent with a refused epoch were not
      // applied; after a transport failure they may or may not have been.
      this.#resetSession();
      this.#fail(acks, reason ?? `grpc status ${err.code}`, err.details);
      if (reason === 'INVALID_SHARE_SESSION_EPOCH' || reason === 'SHARE_SESSION_NOT_FOUND') {
        return [];
      }
      throw err;
    }

    if (this.sessionEpoch === 0) {
      this.#sessionParts.clear();
    }
    this.sessionEpoch = nextEpoch(this.sessionEpoch);
    for (const key of entries.keys()) {
      this.#sessionParts.add(key);
    }
    for (const key of forgotten.keys()) {
      this.#sessionParts.delete(key);
    }

    const records = [];
    const answered = new Set();
    for (const tr of resp.responses) {
      for (const pr of tr.partitions) {
        const key = tpKey(tr.topic, pr.partition);
        answered.add(key);
        if (pr.acknowledge_error_code !== NONE && acks.has(key)) {
          this.#fail(new Map([[key, acks.get(key)]]), pr.acknowledge_error_code, pr.acknowledge_error_message);
        }
        if (pr.error_code === 'ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION') {
          this.#sessionParts.delete(key); // the server dropped it from the session
        }
        records.push(...recordsOf(tr.topic, pr));
      }
    }
    this.#failUnanswered(acks, answered);
    return records;
  }

  /**
   * commit sends the pending acknowledgements now with ShareAcknowledge
   * (consuming one session epoch, like a ShareFetch) and resolves to the
   * number of acknowledged offsets the server refused or left without an
   * outcome (also in ackFailures).
   */
  commit() {
    return this.#serial(() => this.#acknowledge(false));
  }

  async #acknowledge(closing) {
    const acks = this.#takePending();
    if (this.sessionEpoch === 0) {
      // No session: nothing to acknowledge in (ShareAcknowledge never opens one).
      this.#fail(acks, 'SESSION_ENDED', 'no share session to acknowledge in');
      return 0;
    }
    if (acks.size === 0 && !closing) {
      return 0;
    }
    const req = {
      group_id: this.groupId,
      member_id: this.memberId,
      share_session_epoch: closing ? -1 : this.sessionEpoch,
      topics: [...groupByTopic(new Map([...acks].map(([key, m]) => [key, { partition: tpOf(key).partition, acknowledgement_batches: ackBatches(m) }])))].map(
        ([topic, partitions]) => ({ topic, partitions }),
      ),
    };
    let resp;
    try {
      resp = await this.client.shareGroups.shareAcknowledge(req);
    } catch (err) {
      this.#resetSession();
      this.#fail(acks, err.errorInfo?.reason ?? `grpc status ${err.code}`, err.details);
      if (closing && err.errorInfo?.reason === 'SHARE_SESSION_NOT_FOUND') {
        return acks.size; // already gone: nothing left to close
      }
      throw err;
    }
    if (closing) {
      this.#resetSession();
    } else {
      this.sessionEpoch = nextEpoch(this.sessionEpoch);
    }
    let refused = 0;
    const answered = new Set();
    for (const tr of resp.responses) {
      for (const pr of tr.partitions) {
        const key = tpKey(tr.topic, pr.partition);
        answered.add(key);
        if (pr.error_code !== NONE && acks.has(key)) {
          refused += acks.get(key).size;
          this.#fail(new Map([[key, acks.get(key)]]), pr.error_code, pr.error_message);
        }
      }
    }
    refused += this.#failUnanswered(acks, answered);
    return refused;
  }

  // failUnanswered reports the acknowledgements of partitions a response
  // left out (the server always answers them; never expected) and returns
  // how many offsets that was.
  #failUnanswered(acks, answered) {
    let n = 0;
    for (const [key, m] of acks) {
      if (!answered.has(key)) {
        n += m.size;
        this.#fail(new Map([[key, m]]), 'NO_OUTCOME', 'the response did not report this partition');
      }
    }
    return n;
  }

  /**
   * close sends the pending acknowledgements with epoch -1 (closing the share
   * session, which releases any record still held), stops heartbeating and
   * leaves the group.
   */
  async close() {
    if (this.closed) {
      return;
    }
    this.closed = true; // poll() refuses from now on
    clearTimeout(this.#timer);
    this.#timer = null;
    await this.#serial(() => this.#acknowledge(true)).catch((err) => {
      this.lastCloseError = err;
    });
    await this.#beat.catch(() => {});
    if (this.memberEpoch > 0) {
      await this.client.shareGroups
        .shareGroupHeartbeat({ group_id: this.groupId, member_id: this.memberId, member_epoch: -1 })
        .catch((err) => {
          this.lastCloseError ??= err;
        });
      this.memberEpoch = 0;
    }
  }
}

// recordsOf pairs a partition's records with their delivery counts from
// acquired_records (ascending, non-overlapping ranges covering every record).
function recordsOf(topic, pr) {
  const out = [];
  let j = 0;
  const acq = pr.acquired_records;
  for (const r of pr.records) {
    while (j < acq.length && acq[j].last_offset < r.offset) {
      j++;
    }
    const deliveryCount = j < acq.length && acq[j].first_offset <= r.offset ? acq[j].delivery_count : 0;
    out.push({
      topic,
      partition: pr.partition,
      offset: r.offset,
      timestamp: r.timestamp,
      key: r.key, // undefined: keyless
      value: r.value, // undefined: a tombstone
      headers: r.headers,
      deliveryCount,
    });
  }
  return out;
}
