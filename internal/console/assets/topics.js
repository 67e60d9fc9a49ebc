// Topics: list, create, delete, and per topic its partitions, produce and purge.
import * as api from './api.js';
import { h, table, field, setStatus, flash, confirmDialog, n, fmtBytes, textToB64 } from './ui.js';

export function topicsPage() {
  const list = h('div', {});
  const name = h('input', { name: 'name', required: true, maxlength: 249, pattern: '[A-Za-z0-9._\\-]+' });
  const parts = h('input', { name: 'partitions', type: 'number', min: 1, value: 1, required: true });
  const form = h('form', { class: 'inline', id: 'create-topic', 'aria-label': 'Create a topic' },
    field('Name', name), field('Partitions', parts), h('button', { type: 'submit', class: 'primary' }, 'Create topic'));
  const load = async () => {
    const res = await api.get('/v1/topics');
    const topics = res.topics || [];
    list.replaceChildren(table('Topics', ['Name', 'Partitions', 'Records', 'Size', 'Segments', 'Cleanup'],
      topics.map((t) => {
        const ps = t.partitions || [];
        const records = ps.reduce((a, p) => a + n(p.highWatermark) - n(p.logStartOffset), 0);
        return [h('a', { href: '#/topics/' + encodeURIComponent(t.name) }, t.name), t.partitionCount, records,
          fmtBytes(ps.reduce((a, p) => a + n(p.sizeBytes), 0)), ps.reduce((a, p) => a + n(p.segmentCount), 0),
          t.config?.cleanupPolicy || 'delete'];
      }), [1, 2, 3, 4]));
  };
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api.post('/v1/topics', { name: name.value, partitions: Number(parts.value) });
      setStatus(`Topic ${name.value} created.`);
      name.value = '';
      await load();
    } catch (e) { if (e.status !== 401) setStatus('Create failed: ' + e.message, true); }
  });
  return { title: 'Topics', el: h('section', {}, h('h1', {}, 'Topics'), form, list), load };
}

export function topicPage(topic) {
  const body = h('div', {});
  const el = h('section', {}, h('p', {}, h('a', { href: '#/topics' }, '← Topics')), h('h1', {}, 'Topic ', h('code', {}, topic)), body);
  const chosen = { partition: '' }; // the produce form's partition, kept across reloads of the page
  const load = async () => {
    const t = await api.get('/v1/topics/' + api.enc(topic));
    const ps = t.partitions || [];
    const rows = ps.map((p) => {
      return [p.partition, p.logStartOffset, p.highWatermark, n(p.highWatermark) - n(p.logStartOffset), fmtBytes(p.sizeBytes), p.segmentCount,
        h('a', { href: `#/records?topic=${encodeURIComponent(topic)}&partition=${p.partition}` }, 'Browse')];
    });
    const produce = produceForm(topic, t.partitionCount, load, chosen);
    const del = h('button', { type: 'button', class: 'danger', id: 'delete-topic', onclick: async () => {
      if (!(await confirmDialog(`Delete topic ${topic} and all its records? This cannot be undone.`, topic))) return;
      try { await api.del('/v1/topics/' + api.enc(topic)); flash(`Topic ${topic} deleted.`); location.hash = '#/topics'; }
      catch (e) { if (e.status !== 401) setStatus('Delete failed: ' + e.message, true); }
    } }, 'Delete topic…');
    body.replaceChildren(
      h('dl', { class: 'kv' }, h('dt', {}, 'Topic ID'), h('dd', {}, h('code', {}, t.topicId)),
        h('dt', {}, 'Cleanup policy'), h('dd', {}, t.config?.cleanupPolicy || 'delete'),
        h('dt', {}, 'Retention'), h('dd', {}, t.config?.retentionMs && n(t.config.retentionMs) >= 0 ? `${n(t.config.retentionMs) / 1000} s` : 'unlimited')),
      table('Partitions', ['Partition', 'Log start', 'High watermark', 'Records', 'Size', 'Segments', 'Browse'], rows, [0, 1, 2, 3, 4, 5]),
      h('h2', {}, 'Produce'), produce, h('h2', {}, 'Purge'), purgeForm(ps), h('h2', {}, 'Delete'), del);
  };
  const purgeForm = (ps) => {
    const part = h('select', { name: 'partition' }, ps.map((p) => h('option', { value: p.partition }, String(p.partition))));
    const off = h('input', { name: 'offset', type: 'number', min: -1, required: true, value: ps[0] ? ps[0].highWatermark : 0 });
    part.addEventListener('change', () => { off.value = ps[Number(part.value)].highWatermark; });
    const form = h('form', { class: 'inline', id: 'purge', 'aria-label': 'Purge records' },
      field('Partition', part), field('Delete records below offset (-1: all)', off), h('button', { type: 'submit', class: 'danger' }, 'Purge…'));
    form.addEventListener('submit', (ev) => { ev.preventDefault(); purgeOne(ps[Number(part.value)], off.value); });
    return form;
  };
  const purgeOne = async (p, off) => {
    if (!/^-?\d+$/.test(String(off).trim())) { setStatus('Purge: the offset must be a whole number.', true); return; }
    if (!(await confirmDialog(`Delete the records of ${topic}/${p.partition} below offset ${off}? This cannot be undone.`))) return;
    try {
      const res = await api.post('/v1/purge', { topics: [{ topic, partitions: [{ partition: p.partition, offset: Number(off) }] }] });
      const r = res.topics?.[0]?.partitions?.[0];
      if (r && r.errorCode && r.errorCode !== 'ERROR_CODE_NONE') setStatus(`Purge failed: ${r.errorCode} ${r.errorMessage || ''}`, true);
      else setStatus(`Purged ${topic}/${p.partition}: log start is now ${r?.lowWatermark}.`);
      await load();
    } catch (e) { if (e.status !== 401) setStatus('Purge failed: ' + e.message, true); }
  };
  return { title: topic, el, load };
}

// produceForm is the topic page's produce form. chosen.partition keeps the
// partition picked across the page's reloads (every produce reloads it),
// so a second record goes where the first went.
function produceForm(topic, partitions, after, chosen) {
  const part = h('select', { name: 'partition' }, h('option', { value: '' }, 'by key'),
    Array.from({ length: partitions }, (_, i) => h('option', { value: i }, String(i))));
  if (chosen.partition !== '' && Number(chosen.partition) < partitions) part.value = chosen.partition;
  part.addEventListener('change', () => { chosen.partition = part.value; });
  const key = h('input', { name: 'key', placeholder: '(none)' });
  const value = h('input', { name: 'value', size: 40 });
  const headers = h('input', { name: 'headers', size: 30, placeholder: 'k=v, k2=v2' });
  const form = h('form', { class: 'inline', id: 'produce', 'aria-label': 'Produce a record' },
    field('Partition', part), field('Key', key), field('Value', value), field('Headers', headers),
    h('button', { type: 'submit', class: 'primary' }, 'Produce'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const rec = { value: textToB64(value.value) };
    if (key.value) rec.key = textToB64(key.value);
    // Headers as "k=v" pairs separated by commas; a value may hold '='.
    const hs = headers.value.split(',').map((x) => x.trim()).filter((x) => x);
    if (hs.some((x) => !x.includes('=') || x.startsWith('='))) { setStatus('Headers are k=v pairs separated by commas.', true); return; }
    if (hs.length) rec.headers = hs.map((x) => { const i = x.indexOf('='); return { key: x.slice(0, i), value: textToB64(x.slice(i + 1)) }; });
    const req = { records: [rec] };
    if (part.value !== '') req.partition = Number(part.value);
    try {
      const res = await api.post('/v1/topics/' + api.enc(topic) + '/records', req);
      const r = res.results?.[0];
      value.value = '';
      headers.value = '';
      await after();
      // After the reload: the status says the page shows the new record.
      setStatus(`Produced to partition ${r?.partition} at offset ${r?.offset}.`);
    } catch (e) { if (e.status !== 401) setStatus('Produce failed: ' + e.message, true); }
  });
  return form;
}
