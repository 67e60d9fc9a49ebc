// Record browser: one partition or all of them, from an offset, the
// earliest record or a timestamp, a page at a time, optionally only the
// records whose key contains a search text.
import * as api from './api.js';
import { h, table, field, setStatus, n, fmtTime, showBytes } from './ui.js';

// keyScanPages is how many pages a key search reads per partition before
// it stops and says so (the server has no key filter on Fetch).
const keyScanPages = 20;

export function recordsPage(q) {
  // A topic picker over the topics there are (free text still accepted).
  const topic = h('input', { name: 'topic', required: true, value: q.get('topic') || '', list: 'topic-list', autocomplete: 'off' });
  const topicList = h('datalist', { id: 'topic-list' });
  const part = h('select', { name: 'partition' }, h('option', { value: 'all' }, 'all'));
  let partitions = 0;
  let wanted = q.get('partition') || 'all'; // the partition asked for, until the options exist
  part.addEventListener('change', () => { wanted = part.value; });
  const fillPartitions = async () => {
    if (!topic.value) return;
    try {
      const t = await api.get('/v1/topics/' + api.enc(topic.value));
      partitions = n(t.partitionCount);
      const want = wanted;
      part.replaceChildren(h('option', { value: 'all' }, 'all'), Array.from({ length: partitions }, (_, i) => h('option', { value: i }, String(i))));
      part.value = [...part.options].some((o) => o.value === String(want)) ? String(want) : 'all';
    } catch { /* an unknown topic: the fetch says so */ }
  };
  topic.addEventListener('change', fillPartitions);
  const from = h('select', { name: 'from' }, h('option', { value: 'offset' }, 'offset'), h('option', { value: 'earliest' }, 'earliest'),
    h('option', { value: 'timestamp' }, 'timestamp'));
  const offset = h('input', { name: 'offset', type: 'number', value: q.get('offset') || '0' });
  const ts = h('input', { name: 'timestamp', type: 'datetime-local', step: 1 });
  const max = h('input', { name: 'max', type: 'number', min: 1, max: 500, value: '50' });
  const keySearch = h('input', { name: 'key', placeholder: '(any key)', size: 14 });
  const mode = h('select', { name: 'format' }, h('option', { value: 'text' }, 'text'), h('option', { value: 'json' }, 'JSON'), h('option', { value: 'hex' }, 'hex'));
  const offField = field('Offset', offset);
  const tsField = field('Timestamp (UTC)', ts);
  tsField.hidden = true;
  from.addEventListener('change', () => { offField.hidden = from.value !== 'offset'; tsField.hidden = from.value !== 'timestamp'; });
  const out = h('div', {});
  const pager = h('div', { class: 'pager' });
  // last: the page shown; next: per partition, the offset after it.
  let last = null;
  const show = () => {
    if (!last) return;
    const { records, bounds, note } = last;
    const all = last.parts.length > 1;
    out.replaceChildren(h('p', { class: 'muted' }, bounds.map((b) => `${all ? b.partition + ': ' : ''}log start ${b.ls}, high watermark ${b.hw}`).join('; ') + '.'),
      note ? h('p', { class: 'muted', id: 'records-note' }, note) : '',
      table(`Records of ${topic.value}/${all ? 'all partitions' : last.parts[0]}`, ['Partition', 'Offset', 'Timestamp', 'Key', 'Value', 'Headers'],
        records.map((r) => [r.partition, r.offset, fmtTime(r.timestamp), h('span', { class: 'payload' }, showBytes(r.key, mode.value === 'json' ? 'json?' : mode.value)),
          h('div', { class: 'payload' }, showBytes(r.value, mode.value)),
          (r.headers || []).map((x) => `${x.key}=${showBytes(x.value, 'text')}`).join(', ')]), [0, 1]));
    for (const td of out.querySelectorAll('tbody td:nth-child(4), tbody td:nth-child(5)')) td.classList.add('payload');
    const more = last.parts.some((p) => last.next[p] < last.hw[p]);
    pager.replaceChildren(
      h('button', { type: 'button', id: 'records-older', disabled: !last.parts.some((p) => last.first[p] > last.lsOf[p]), onclick: () => page(-1) }, '← Older'),
      h('button', { type: 'button', id: 'records-newer', disabled: !more, onclick: () => page(1) }, 'Newer →'));
  };
  mode.addEventListener('change', show);
  const form = h('form', { class: 'inline', id: 'browse', 'aria-label': 'Browse records' },
    field('Topic', topic), topicList, field('Partition', part), field('From', from), offField, tsField, field('Max records', max),
    field('Key contains', keySearch), field('Show as', mode),
    h('button', { type: 'submit', class: 'primary' }, 'Fetch'));

  // readPart reads up to max records of partition p from off on (with a
  // key search: the first max matches, scanning at most keyScanPages pages).
  const readPart = async (p, off, count) => {
    const base = `/v1/topics/${api.enc(topic.value)}/partitions/${p}`;
    const needle = keySearch.value;
    const got = [];
    let next = off, hw = 0, ls = 0, scanned = 0, stopped = false;
    for (;;) {
      const res = await api.get(`${base}/records?offset=${next}&max_records=${count}`);
      hw = n(res.highWatermark); ls = n(res.logStartOffset);
      const recs = res.records || [];
      for (const r of recs) {
        next = n(r.offset) + 1;
        if (needle && !showBytes(r.key, 'text').includes(needle)) continue;
        if (got.length < count) got.push({ ...r, partition: p });
      }
      scanned++;
      if (!needle || got.length >= count || !recs.length || next >= hw) break;
      if (scanned >= keyScanPages) { stopped = true; break; }
    }
    return { got, next, hw, ls, stopped };
  };
  const startOffset = async (p) => {
    const base = `/v1/topics/${api.enc(topic.value)}/partitions/${p}`;
    if (from.value === 'offset') return Number(offset.value);
    const spec = from.value === 'earliest' ? 'OFFSET_SPEC_EARLIEST' : 'OFFSET_SPEC_TIMESTAMP';
    let qs = `spec=${spec}`;
    if (from.value === 'timestamp') qs += `&timestamp=${Date.parse(ts.value + 'Z')}`;
    return n((await api.get(`${base}/offsets?${qs}`)).offset);
  };
  // fetchFrom reads a page from starts (partition -> offset) and shows it:
  // with all partitions, each partition's page merged by timestamp.
  // Only the answer of the latest request (a fetch, a page) is shown: an
  // earlier one still reading (its topic list, its start offsets) is dropped.
  let fetchSeq = 0;
  const fetchFrom = async (seq, parts, starts) => {
    const count = Number(max.value);
    const res = await Promise.all(parts.map((p) => starts[p] < 0 ? { got: [], next: -1, hw: 0, ls: 0 } : readPart(p, Math.max(starts[p], 0), count)));
    if (seq !== fetchSeq) return; // a later fetch (another page, a new search) superseded this one
    let records = res.flatMap((r) => r.got);
    if (parts.length > 1) records.sort((a, b) => n(a.timestamp) - n(b.timestamp) || a.partition - b.partition || n(a.offset) - n(b.offset));
    records = records.slice(0, count);
    const next = {}, first = {}, hw = {}, lsOf = {};
    parts.forEach((p, i) => {
      const mine = records.filter((r) => r.partition === p);
      // The page continues after this partition's last record shown.
      next[p] = mine.length ? n(mine[mine.length - 1].offset) + 1 : (res[i].got.length ? starts[p] : res[i].next);
      first[p] = mine.length ? n(mine[0].offset) : starts[p];
      hw[p] = res[i].hw; lsOf[p] = res[i].ls;
    });
    const stopped = res.some((r) => r.stopped);
    last = { parts, records, next, first, hw, lsOf, bounds: parts.map((p, i) => ({ partition: p, ls: res[i].ls, hw: res[i].hw })),
      note: stopped ? `The key search stopped after ${keyScanPages} pages of a partition; "Newer" goes on from there.` :
        (keySearch.value && !records.length ? 'No record with such a key in what was read.' : '') };
    setStatus('');
    show();
  };
  const page = async (dir) => {
    if (!last) return;
    const count = Number(max.value);
    const starts = {};
    for (const p of last.parts) starts[p] = dir > 0 ? last.next[p] : Math.max(last.lsOf[p], last.first[p] - count);
    try { await fetchFrom(++fetchSeq, last.parts, starts); } catch (e) { if (e.status !== 401) setStatus('Fetch failed: ' + e.message, true); }
  };
  const load = async () => {
    const seq = ++fetchSeq;
    try {
      const list = await api.get('/v1/topics');
      topicList.replaceChildren(...(list.topics || []).map((t) => h('option', { value: t.name })));
    } catch { /* the picker stays empty */ }
    if (!topic.value) return;
    if (from.value === 'timestamp' && !ts.value) { setStatus('Choose a timestamp.', true); return; }
    await fillPartitions();
    const parts = part.value === 'all' ? Array.from({ length: partitions }, (_, i) => i) : [Number(part.value)];
    if (!parts.length) { setStatus('The topic has no partitions.', true); return; }
    const starts = {};
    for (const p of parts) starts[p] = await startOffset(p);
    if (seq !== fetchSeq) return;
    if (parts.every((p) => starts[p] < 0)) { out.replaceChildren(h('p', {}, 'No record at or after that timestamp.')); pager.replaceChildren(); return; }
    await fetchFrom(seq, parts, starts);
  };
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try { await load(); } catch (e) { if (e.status !== 401) setStatus('Fetch failed: ' + e.message, true); }
  });
  return { title: 'Records', el: h('section', {}, h('h1', {}, 'Records'), form, out, pager), load };
}
