// Record browser: one partition from an offset or a timestamp.
import * as api from './api.js';
import { h, table, field, setStatus, n, fmtTime, showBytes } from './ui.js';

export function recordsPage(q) {
  const topic = h('input', { name: 'topic', required: true, value: q.get('topic') || '' });
  const part = h('input', { name: 'partition', type: 'number', min: 0, value: q.get('partition') || '0' });
  const from = h('select', { name: 'from' }, h('option', { value: 'offset' }, 'offset'), h('option', { value: 'earliest' }, 'earliest'),
    h('option', { value: 'timestamp' }, 'timestamp'));
  const offset = h('input', { name: 'offset', type: 'number', value: q.get('offset') || '0' });
  const ts = h('input', { name: 'timestamp', type: 'datetime-local', step: 1 });
  const max = h('input', { name: 'max', type: 'number', min: 1, max: 500, value: '50' });
  const mode = h('select', { name: 'format' }, h('option', { value: 'text' }, 'text'), h('option', { value: 'json' }, 'JSON'), h('option', { value: 'hex' }, 'hex'));
  const offField = field('Offset', offset);
  const tsField = field('Timestamp (UTC)', ts);
  tsField.hidden = true;
  from.addEventListener('change', () => { offField.hidden = from.value !== 'offset'; tsField.hidden = from.value !== 'timestamp'; });
  const out = h('div', {});
  let last = null;
  const show = () => {
    if (!last) return;
    const { records, hw, ls } = last;
    out.replaceChildren(h('p', { class: 'muted' }, `Log start ${ls}, high watermark ${hw}.`),
      table(`Records of ${topic.value}/${part.value}`, ['Offset', 'Timestamp', 'Key', 'Value', 'Headers'],
        records.map((r) => [r.offset, fmtTime(r.timestamp), h('span', { class: 'payload' }, showBytes(r.key, mode.value === 'json' ? 'json?' : mode.value)),
          h('div', { class: 'payload' }, showBytes(r.value, mode.value)),
          (r.headers || []).map((x) => `${x.key}=${showBytes(x.value, 'text')}`).join(', ')]), [0]));
    for (const td of out.querySelectorAll('tbody td:nth-child(3), tbody td:nth-child(4)')) td.classList.add('payload');
  };
  mode.addEventListener('change', show);
  const form = h('form', { class: 'inline', id: 'browse', 'aria-label': 'Browse records' },
    field('Topic', topic), field('Partition', part), field('From', from), offField, tsField, field('Max records', max), field('Show as', mode),
    h('button', { type: 'submit', class: 'primary' }, 'Fetch'));
  const load = async () => {
    if (!topic.value) return;
    const base = `/v1/topics/${api.enc(topic.value)}/partitions/${Number(part.value)}`;
    let off = Number(offset.value);
    if (from.value !== 'offset') {
      const spec = from.value === 'earliest' ? 'OFFSET_SPEC_EARLIEST' : 'OFFSET_SPEC_TIMESTAMP';
      let qs = `spec=${spec}`;
      if (from.value === 'timestamp') {
        if (!ts.value) { setStatus('Choose a timestamp.', true); return; }
        qs += `&timestamp=${Date.parse(ts.value + 'Z')}`;
      }
      off = n((await api.get(`${base}/offsets?${qs}`)).offset);
      if (off < 0) { out.replaceChildren(h('p', {}, 'No record at or after that timestamp.')); return; }
    }
    const res = await api.get(`${base}/records?offset=${off}&max_records=${Number(max.value)}`);
    last = { records: res.records || [], hw: res.highWatermark, ls: res.logStartOffset };
    setStatus('');
    show();
  };
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try { await load(); } catch (e) { if (e.status !== 401) setStatus('Fetch failed: ' + e.message, true); }
  });
  return { title: 'Records', el: h('section', {}, h('h1', {}, 'Records'), form, out), load };
}
