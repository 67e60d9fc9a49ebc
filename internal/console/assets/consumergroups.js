// Kafka consumer groups (ConsumerGroupService, docs/consumer-groups.md):
// list; per group its members and assignments, committed offsets and lag
// per partition, an offset reset (dry run first, then execute) and delete.
import * as api from './api.js';
import { h, table, field, setStatus, confirmDialog, badge, n, flash } from './ui.js';

const POLL_MS = 2000;
// why is an API error's message with its reason (details[].reason).
const why = (e) => {
  const r = (e.body?.details || []).find((d) => d.reason)?.reason;
  return r ? `${e.message} (${r})` : e.message;
};
const typeName = (t) => String(t || '').replace(/^CONSUMER_GROUP_TYPE_/, '').toLowerCase();

export function consumerGroupsPage() {
  const out = h('div', {});
  const load = async () => {
    const res = await api.get('/v1/consumer-groups');
    out.replaceChildren(table('Consumer groups', ['Group', 'Type', 'State', 'Protocol type', 'Members'],
      (res.groups || []).map((g) => [h('a', { href: '#/consumer-groups/' + encodeURIComponent(g.group) }, g.group), typeName(g.type),
        badge(g.state), g.protocolType || '–', n(g.memberCount)]), [4]));
  };
  return { title: 'Consumer groups', el: h('section', {}, h('h1', {}, 'Consumer groups'), out), load };
}

export function consumerGroupPage(group) {
  const base = '/v1/consumer-groups/' + api.enc(group);
  const summary = h('div', {});
  const members = h('div', {});
  const offsets = h('div', {});
  const reset = h('div', {});
  const danger = h('div', {});
  const paused = h('input', { type: 'checkbox', id: 'pause' });
  const el = h('section', {}, h('p', {}, h('a', { href: '#/consumer-groups' }, '← Consumer groups')),
    h('h1', {}, 'Consumer group ', h('code', {}, group)),
    h('p', {}, h('label', { for: 'pause' }, paused, ' Pause refresh'), h('span', { class: 'muted' }, ` (every ${POLL_MS / 1000} s)`)),
    summary, h('h2', {}, 'Members and assignments'), members, h('h2', {}, 'Committed offsets and lag'), offsets,
    h('h2', {}, 'Reset offsets'), reset, h('h2', {}, 'Delete'), danger);
  let timer = null;
  let stopped = false;
  let formsShown = false;
  let latest = null; // the last poll's description and offsets

  const poll = async () => {
    const [d, offs] = await Promise.all([api.get(base), api.get(base + '/offsets')]);
    latest = { d, offs };
    summary.replaceChildren(h('dl', { class: 'kv' },
      h('dt', {}, 'State'), h('dd', {}, badge(d.state)), h('dt', {}, 'Type'), h('dd', {}, typeName(d.type)),
      h('dt', {}, 'Protocol'), h('dd', {}, [d.protocolType, d.protocol].filter(Boolean).join(' / ') || '–'),
      h('dt', {}, d.type === 'CONSUMER_GROUP_TYPE_CONSUMER' ? 'Group epoch' : 'Generation'), h('dd', {}, n(d.epoch)),
      h('dt', {}, 'Members'), h('dd', {}, (d.members || []).length)));
    const owner = {};
    for (const m of d.members || []) for (const tp of m.assignment || []) for (const p of tp.partitions || []) owner[tp.topic + '/' + p] = m;
    members.replaceChildren(table('Members', ['Member', 'Instance', 'Client', 'Host', 'Assigned partitions'],
      (d.members || []).map((m) => [h('code', {}, m.memberId), m.groupInstanceId || '–', m.clientId || '–', m.clientHost || '–',
        (m.assignment || []).map((tp) => `${tp.topic}: ${(tp.partitions || []).join(', ')}`).join('; ') || '–'])));
    const rows = [];
    for (const t of offs.topics || []) {
      for (const p of t.partitions || []) {
        const err = p.errorCode && p.errorCode !== 'ERROR_CODE_NONE' ? `${p.errorCode} ${p.errorMessage || ''}` : '';
        const m = owner[t.topic + '/' + p.partition];
        rows.push([t.topic, p.partition, n(p.committedOffset) < 0 ? '–' : p.committedOffset, n(p.logEndOffset) < 0 ? '–' : p.logEndOffset,
          p.lag === undefined ? '–' : p.lag, m ? h('code', {}, m.memberId) : '–', err]);
      }
    }
    offsets.replaceChildren(table('Partitions', ['Topic', 'Partition', 'Committed offset', 'Log end offset', 'Lag', 'Consumer', 'Error'], rows, [1, 2, 3, 4]),
      h('p', { class: 'muted' }, 'Committed offset: the next offset the group reads; lag: log end offset − committed offset; –: nothing committed.'));
    if (!formsShown) { formsShown = true; showReset(); showDelete(); }
  };

  const showReset = () => {
    const topics = [...new Set((latest.offs.topics || []).map((t) => t.topic))];
    const topic = h('input', { name: 'topic', required: true, value: topics[0] || '', list: 'cg-topics' });
    const parts = h('input', { name: 'partitions', placeholder: 'all', inputmode: 'numeric' });
    const to = h('select', { name: 'to' }, [['OFFSET_RESET_EARLIEST', 'Earliest'], ['OFFSET_RESET_LATEST', 'Latest'],
      ['OFFSET_RESET_TIMESTAMP', 'Date and time (UTC)'], ['OFFSET_RESET_OFFSET', 'Offset'], ['OFFSET_RESET_SHIFT_BY', 'Shift by']]
      .map(([v, l]) => h('option', { value: v }, l)));
    const value = h('input', { name: 'value', placeholder: 'offset, shift or 2026-05-01T00:00:00Z' });
    const preview = h('div', { 'aria-live': 'polite' });
    const form = h('form', { class: 'inline', id: 'cg-reset', 'aria-label': 'Reset offsets' },
      h('datalist', { id: 'cg-topics' }, topics.map((t) => h('option', { value: t }))),
      field('Topic', topic), field('Partitions', parts), field('Reset to', to), field('Value', value),
      h('button', { type: 'submit', class: 'danger' }, 'Preview and reset…'));
    const request = (dryRun) => {
      const t = { topic: topic.value.trim(), resetTo: to.value };
      const ps = parts.value.split(',').map((s) => s.trim()).filter(Boolean).map(Number);
      if (ps.length) t.partitions = ps;
      if (to.value === 'OFFSET_RESET_TIMESTAMP') {
        const ms = Date.parse(value.value.trim());
        if (Number.isNaN(ms)) throw new Error('Not a date and time: ' + value.value);
        t.timestampMs = String(ms);
      }
      if (to.value === 'OFFSET_RESET_OFFSET') t.offset = String(Number(value.value || 0));
      if (to.value === 'OFFSET_RESET_SHIFT_BY') t.shiftBy = String(Number(value.value || 0));
      return { topics: [t], dryRun };
    };
    const planTable = (res, caption) => table(caption, ['Topic', 'Partition', 'Current', 'New', 'Error'],
      (res.topics || []).flatMap((t) => (t.partitions || []).map((p) => [t.topic, p.partition,
        n(p.previousOffset) < 0 ? '–' : p.previousOffset, n(p.offset) < 0 ? '–' : p.offset,
        p.errorCode && p.errorCode !== 'ERROR_CODE_NONE' ? `${p.errorCode} ${p.errorMessage || ''}` : ''])), [1, 2, 3]);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      let plan;
      try {
        // The server plans the reset (a dry run writes nothing) and refuses
        // it while the group has members.
        plan = await api.post(base + '/offsets:alter', request(true));
      } catch (e) {
        if (e.status !== 401) { preview.replaceChildren(); setStatus('Reset refused: ' + why(e), true); }
        return;
      }
      preview.replaceChildren(planTable(plan, 'Dry run: the planned offsets'));
      const count = (plan.topics || []).reduce((a, t) => a + (t.partitions || []).length, 0);
      if (!(await confirmDialog(`Reset ${count} partition(s) of ${topic.value} as the dry run shows?`))) return;
      try {
        const res = await api.post(base + '/offsets:alter', request(false));
        preview.replaceChildren(planTable(res, 'Reset executed'));
        setStatus('Offsets reset.');
        await poll();
      } catch (e) { if (e.status !== 401) setStatus('Reset failed: ' + why(e), true); }
    });
    reset.replaceChildren(h('p', { class: 'muted' }, 'Only a group without members can be reset; the dry run shows the plan first.'), form, preview);
  };

  const showDelete = () => {
    const btn = h('button', { type: 'button', class: 'danger', id: 'cg-delete' }, 'Delete group…');
    btn.addEventListener('click', async () => {
      if (!(await confirmDialog(`Delete consumer group ${group} and its committed offsets?`, group))) return;
      try {
        await api.del(base);
        flash(`Consumer group ${group} deleted.`);
        location.hash = '#/consumer-groups';
      } catch (e) { if (e.status !== 401) setStatus('Delete failed: ' + why(e), true); }
    });
    danger.replaceChildren(h('p', { class: 'muted' }, 'Only a group without members can be deleted.'), btn);
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
    stop: () => { stopped = true; clearTimeout(timer); },
  };
}
