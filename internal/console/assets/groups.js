// Share groups: list; per group its members, offsets and lag, in-flight
// records, configuration, offset reset, and lag/throughput charts.
import * as api from './api.js';
import uPlot from './vendor/uPlot.esm.js';
import { h, table, field, setStatus, confirmDialog, badge, n, fmtTime } from './ui.js';

const POLL_MS = 2000;
const HISTORY = 300; // samples kept per group (10 minutes at 2 s)

// history[group] = { t: [], lag: [], rate: [], lastSettled, lastT }: kept
// while the tab lives, so leaving and coming back keeps the curves.
const history = {};

const stateName = (s) => String(s || '').replace(/^SHARE_GROUP_STATE_|^IN_FLIGHT_STATE_/, '');

export function groupsPage() {
  const out = h('div', {});
  const load = async () => {
    const res = await api.get('/v1/share-groups');
    out.replaceChildren(table('Share groups', ['Group', 'State'],
      (res.groups || []).map((g) => [h('a', { href: '#/groups/' + encodeURIComponent(g.groupId) }, g.groupId), badge(stateName(g.state))])));
  };
  return { title: 'Share groups', el: h('section', {}, h('h1', {}, 'Share groups'), out), load };
}

export function groupPage(group) {
  const base = '/v1/share-groups/' + api.enc(group);
  const summary = h('div', {});
  const charts = h('div', { class: 'grid' });
  const parts = h('div', {});
  const inflight = h('div', { id: 'inflight' });
  const members = h('div', {});
  const config = h('div', {});
  const reset = h('div', {});
  const paused = h('input', { type: 'checkbox', id: 'pause' });
  const el = h('section', {}, h('p', {}, h('a', { href: '#/groups' }, '← Share groups')), h('h1', {}, 'Share group ', h('code', {}, group)),
    h('p', {}, h('label', { for: 'pause' }, paused, ' Pause refresh'), h('span', { class: 'muted' }, ` (every ${POLL_MS / 1000} s)`)),
    summary, h('h2', {}, 'Lag and throughput'), charts, h('h2', {}, 'Partitions'), parts,
    h('h2', {}, 'In-flight records'), inflight, h('h2', {}, 'Members'), members,
    h('h2', {}, 'Configuration'), config, h('h2', {}, 'Reset start offsets'), reset);
  const hist = history[group] ||= { t: [], lag: [], rate: [], lastSettled: null, lastT: null };
  let plots = null;
  let timer = null;
  let stopped = false;
  let configShown = false;
  let latest = null; // the last poll's offsets and description

  // The charts follow their boxes' width (desktop: two side by side,
  // phone: one above the other).
  const resize = new ResizeObserver(() => {
    for (const p of plots || []) p.setSize({ width: Math.max(200, p.root.parentElement.clientWidth - 14), height: 200 });
  });
  const captions = []; // [figcaption, unit]: the latest value as text, for everyone who cannot read the canvas
  const drawCharts = () => {
    const data = [hist.t, hist.lag];
    const data2 = [hist.t, hist.rate];
    if (!plots) {
      const mk = (title, label, stroke, d) => {
        const cap = h('figcaption', { class: 'muted' });
        const box = h('figure', { class: 'chart', 'aria-label': title });
        charts.append(box);
        captions.push([cap, label]);
        const p = new uPlot({ title, width: Math.max(200, box.clientWidth - 14), height: 200, legend: { live: false },
          series: [{}, { label, stroke, width: 2 }], axes: [{}, { size: 60 }], scales: { x: { time: true } } }, d, box);
        // The canvas and its legend say nothing to a screen reader: the
        // figure's label and caption (the latest value) stand for them.
        p.root.setAttribute('aria-hidden', 'true');
        box.append(cap); // under the chart
        resize.observe(box);
        return p;
      };
      plots = [mk('Lag (records)', 'lag', '#0b57d0', data), mk('Settled per second', 'records/s', '#146c2e', data2)];
    } else {
      plots[0].setData(data);
      plots[1].setData(data2);
    }
    const last = hist.t.length - 1;
    captions[0][0].textContent = `Now: ${hist.lag[last]} records behind (${hist.t.length} samples).`;
    captions[1][0].textContent = `Now: ${hist.rate[last]} records settled per second.`;
  };

  const poll = async () => {
    const [d, offs, st] = await Promise.all([api.get(base), api.get(base + '/offsets'), api.get(base + '/partitions:state')]);
    // summary
    summary.replaceChildren(h('dl', { class: 'kv' },
      h('dt', {}, 'State'), h('dd', {}, badge(stateName(d.state))),
      h('dt', {}, 'Group epoch'), h('dd', {}, d.groupEpoch), h('dt', {}, 'Assignment epoch'), h('dd', {}, d.assignmentEpoch),
      h('dt', {}, 'Members'), h('dd', {}, (d.members || []).length),
      h('dt', {}, 'Dead-lettered'), h('dd', {}, `${d.deadLetteredRecords} copied, ${d.deadLetterSkippedRecords} skipped`)));
    members.replaceChildren(table('Members and assignments', ['Member', 'Epoch', 'Client', 'Host', 'Subscribed', 'Assigned partitions'],
      (d.members || []).map((m) => [h('code', {}, m.memberId), m.memberEpoch, m.clientId, m.clientHost, (m.subscribedTopicNames || []).join(', '),
        (m.assignment?.topicPartitions || []).map((tp) => `${tp.topic}: ${(tp.partitions || []).join(', ')}`).join('; ')]), [1]));
    // partitions: SPSO/SPEO from the state, lag from either
    const stateByKey = {};
    for (const t of st.topics || []) for (const p of t.partitions || []) stateByKey[t.topic + '/' + p.partition] = p;
    const rows = [];
    let lag = 0, settled = 0;
    for (const t of offs.topics || []) {
      for (const p of t.partitions || []) {
        const s = stateByKey[t.topic + '/' + p.partition] || {};
        const err = p.errorCode && p.errorCode !== 'ERROR_CODE_NONE' ? `${p.errorCode} ${p.errorMessage || ''}` : '';
        const speo = n(p.startOffset) < 0 || s.endOffset === undefined ? '–' : n(s.endOffset) < n(s.startOffset) ? 'none' : s.endOffset;
        // ORDERING_KEY groups (docs/queues.md): records waiting behind an
        // earlier record of their key hold the SPSO back.
        const waiting = s.keyWaiting === undefined ? '' : n(s.keyWaiting) > 0 ? `${s.keyWaiting} (oldest ${s.oldestKeyWaitingOffset})` : '0';
        rows.push([t.topic, p.partition, n(p.startOffset) < 0 ? '–' : p.startOffset, speo,
          n(p.lag) < 0 ? '–' : p.lag, waiting, err]);
        if (n(p.lag) > 0) lag += n(p.lag);
        if (n(p.startOffset) > 0) settled += n(p.startOffset);
      }
    }
    parts.replaceChildren(table('Share-partitions', ['Topic', 'Partition', 'SPSO', 'SPEO', 'Lag', 'Waiting on a key', 'Error'], rows, [1, 2, 3, 4]),
      h('p', { class: 'muted' }, 'SPSO: first offset not yet settled; SPEO: last offset with state (none: every offset from SPSO on is available); –: not initialised yet. ' +
        'Waiting on a key (key-ordered groups): records seen waiting behind an earlier record of their key, and the lowest of them; they hold the SPSO back.'));
    // in-flight ranges
    const now = Date.now();
    const ir = [];
    let truncated = false;
    for (const t of st.topics || []) {
      for (const p of t.partitions || []) {
        truncated ||= p.truncated;
        for (const r of p.ranges || []) {
          const s = stateName(r.state);
          const left = n(r.lockDeadlineUnixMs) ? Math.max(0, (n(r.lockDeadlineUnixMs) - now) / 1000).toFixed(1) + ' s' : '';
          // AVAILABLE records waiting for their redelivery backoff or their
          // sharelog-deliver-at time (docs/queues.md).
          const at = n(r.availableAtUnixMs);
          const avail = at ? h('span', { title: fmtTime(at) }, at > now ? 'in ' + ((at - now) / 1000).toFixed(1) + ' s' : 'now') : '';
          ir.push([t.topic, p.partition, r.firstOffset === r.lastOffset ? r.firstOffset : `${r.firstOffset}–${r.lastOffset}`,
            // The server keeps no delivery count once records are settled
            // (ACKNOWLEDGED, ARCHIVED: InFlightRange.delivery_count is 0).
            badge(s), s === 'ACKNOWLEDGED' || s === 'ARCHIVED' ? h('span', { class: 'muted', title: 'not kept once settled' }, '–') : (r.deliveryCount ?? 0),
            r.ownerMemberId ? h('code', {}, r.ownerMemberId) : '', left, avail]);
        }
      }
    }
    inflight.replaceChildren(table('Records with state, from each SPSO', ['Topic', 'Partition', 'Offsets', 'State', 'Deliveries', 'Held by', 'Lock expires in', 'Available'], ir, [1, 4]),
      truncated ? h('p', { class: 'muted' }, 'Some partitions have more ranges than shown (the server returns at most 100 per partition).') : '');
    // history: settled = sum of SPSOs, so its rate is records settled per second
    const t = now / 1000;
    const rate = hist.lastT !== null && settled >= hist.lastSettled ? (settled - hist.lastSettled) / Math.max(t - hist.lastT, 0.001) : 0;
    hist.lastSettled = settled; hist.lastT = t;
    hist.t.push(t); hist.lag.push(lag); hist.rate.push(Math.round(rate * 10) / 10);
    if (hist.t.length > HISTORY) { hist.t.shift(); hist.lag.shift(); hist.rate.shift(); }
    drawCharts();
    latest = { offs, d };
    if (!configShown) { configShown = true; showConfig(d.config); showReset(offs); }
  };

  const showConfig = (c) => {
    const fields = [['recordLockDurationMs', 'Record lock duration (ms)', 'number'], ['deliveryCountLimit', 'Delivery count limit', 'number'],
      ['partitionMaxRecordLocks', 'Max record locks per partition', 'number'], ['autoOffsetReset', 'Auto offset reset', 'text'],
      ['sessionTimeoutMs', 'Session timeout (ms)', 'number'], ['heartbeatIntervalMs', 'Heartbeat interval (ms)', 'number'],
      ['deadLetterTopic', 'Dead-letter topic', 'text'],
      // docs/queues.md: key ordering and redelivery backoff.
      ['ordering', 'Ordering', 'select', [['ORDERING_NONE', 'none'], ['ORDERING_KEY', 'key']]],
      ['redeliveryBackoffInitialMs', 'Redelivery backoff, initial (ms; 0 = off)', 'number'],
      ['redeliveryBackoffMaxMs', 'Redelivery backoff, max (ms)', 'number'],
      ['redeliveryBackoffMultiplier', 'Redelivery backoff multiplier', 'number', null, 'any'],
      // docs/kafka.md "Transactions": what a transactional producer's records the group delivers.
      ['isolationLevel', 'Isolation level', 'select', [['ISOLATION_LEVEL_READ_UNCOMMITTED', 'read uncommitted'], ['ISOLATION_LEVEL_READ_COMMITTED', 'read committed']]]];
    const inputs = {};
    const input = ([k, , type, opts, step]) => {
      if (type !== 'select') return h('input', { name: k, type, step, value: c?.[k] ?? '' });
      const sel = h('select', { name: k }, opts.map(([v, label]) => h('option', { value: v }, label)));
      sel.value = c?.[k] ?? opts[0][0];
      return sel;
    };
    const form = h('form', { class: 'inline', id: 'group-config', 'aria-label': 'Group configuration' },
      fields.map((f) => field(f[1], inputs[f[0]] = input(f))),
      h('button', { type: 'submit', class: 'primary' }, 'Save changes'));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const upd = {};
      for (const [k, , type, opts] of fields) {
        const v = inputs[k].value;
        if (String(c?.[k] ?? (opts ? opts[0][0] : '')) === v) continue;
        upd[k] = type === 'number' ? Number(v) : v;
      }
      if (!Object.keys(upd).length) { setStatus('Nothing changed.'); return; }
      try {
        const res = await api.patch(base + '/config', { config: upd });
        c = res.config;
        setStatus('Configuration saved: ' + Object.keys(upd).join(', ') + '.');
      } catch (e) { if (e.status !== 401) setStatus('Save failed: ' + e.message, true); }
    });
    config.replaceChildren(form);
  };

  const showReset = (offs) => {
    const opts = [];
    for (const t of offs.topics || []) for (const p of t.partitions || []) opts.push([t.topic, p.partition, p.startOffset]);
    if (!opts.length) { reset.replaceChildren(h('p', { class: 'muted' }, 'No share-partition has state yet.')); return; }
    const which = h('select', { name: 'partition' }, opts.map(([t, p], i) => h('option', { value: i }, `${t}/${p}`)));
    const off = h('input', { name: 'start_offset', type: 'number', min: 0, value: Math.max(0, n(opts[0][2])) });
    const preview = h('p', { class: 'muted', 'aria-live': 'polite' });
    const form = h('form', { class: 'inline', id: 'reset-offsets', 'aria-label': 'Reset start offsets' },
      field('Share-partition', which), field('New start offset', off), h('button', { type: 'submit', class: 'danger' }, 'Preview and reset…'));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const [topic, partition] = opts[Number(which.value)];
      const d = latest.d;
      const curP = (latest.offs.topics || []).find((t) => t.topic === topic)?.partitions?.find((p) => p.partition === partition);
      const cur = curP ? curP.startOffset : '?';
      // The API has no dry run: the preview is this page's, and the server
      // refuses the reset while the group has members.
      const text = `Dry run: ${topic}/${partition} start offset ${cur} → ${off.value}; its in-flight state is dropped. ` +
        ((d.members || []).length ? 'The group has members: the server will refuse this.' : 'Apply it?');
      preview.textContent = text;
      if (!(await confirmDialog(text))) return;
      try {
        const res = await api.post(base + '/offsets:alter', { topics: [{ topic, partitions: [{ partition, startOffset: Number(off.value) }] }] });
        const r = res.topics?.[0]?.partitions?.[0];
        if (r && r.errorCode && r.errorCode !== 'ERROR_CODE_NONE') setStatus(`Reset failed: ${r.errorCode} ${r.errorMessage || ''}`, true);
        else setStatus(`Start offset of ${topic}/${partition} reset to ${off.value}.`);
      } catch (e) { if (e.status !== 401) setStatus('Reset failed: ' + e.message, true); }
    });
    reset.replaceChildren(form, preview);
  };

  const tick = async () => {
    if (stopped) return;
    if (!paused.checked) {
      try { await poll(); } catch (e) { if (e.status === 401) { stopped = true; return; } setStatus(e.message, true); }
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  };
  return {
    title: group, el,
    load: async () => { await poll(); timer = setTimeout(tick, POLL_MS); },
    stop: () => { stopped = true; clearTimeout(timer); resize.disconnect(); plots?.forEach((p) => p.destroy()); },
  };
}
