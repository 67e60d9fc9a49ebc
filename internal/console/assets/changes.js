// Live change stream: the NDJSON route read with fetch streaming.
import * as api from './api.js';
import { h, field, setStatus, n, fmtTime, showBytes, textToB64 } from './ui.js';

const MAX_ROWS = 1000; // rows kept on the page; older ones scroll away

export function changesPage(q) {
  const topic = h('input', { name: 'topic', required: true, value: q.get('topic') || '' });
  const part = h('input', { name: 'partition', type: 'number', min: 0, value: q.get('partition') || '0' });
  const start = h('input', { name: 'start_offset', type: 'number', min: 0, value: '0' });
  const mode = h('select', { name: 'oso_mode' }, h('option', { value: 'OSO_MODE_OFF' }, 'ordered'),
    h('option', { value: 'OSO_MODE_ON' }, 'OSO (out-of-order snapshot)'), h('option', { value: 'OSO_MODE_ON_WITH_OFFSET_ADVANCED' }, 'OSO with offset advanced'));
  const prefix = h('input', { name: 'key_prefix', placeholder: '(all keys)' });
  const fmt = h('select', { name: 'format' }, h('option', { value: 'text' }, 'text'), h('option', { value: 'json' }, 'JSON'), h('option', { value: 'hex' }, 'hex'));
  const go = h('button', { type: 'submit', class: 'primary', id: 'follow' }, 'Follow');
  const stopBtn = h('button', { type: 'button', id: 'stop', disabled: true }, 'Stop');
  const count = h('p', { class: 'muted', id: 'stream-state', 'aria-live': 'polite' }, 'Not following.');
  const tbody = h('tbody', {});
  const tableEl = h('div', { class: 'table-wrap', id: 'events' }, h('table', {}, h('caption', {}, 'Events, oldest first'),
    h('thead', {}, h('tr', {}, ['Event', 'Offset', 'Timestamp', 'Key', 'Value'].map((t) => h('th', { scope: 'col' }, t)))), tbody));
  const form = h('form', { class: 'inline', id: 'changes-form', 'aria-label': 'Follow a change stream' },
    field('Topic', topic), field('Partition', part), field('Start offset', start), field('Mode', mode), field('Key prefix', prefix),
    field('Show as', fmt), go, stopBtn);
  let ctl = null;
  let events = 0;

  const row = (kind, cls, off, ts, key, value) => {
    tbody.append(h('tr', { class: cls }, h('td', { 'data-label': 'Event' }, kind), h('td', { class: 'num', 'data-label': 'Offset' }, off ?? ''),
      h('td', { 'data-label': 'Timestamp' }, ts ? fmtTime(ts) : ''),
      h('td', { class: 'payload', 'data-label': 'Key' }, key !== undefined ? showBytes(key, fmt.value === 'json' ? 'json?' : fmt.value) : ''),
      h('td', { class: 'payload', 'data-label': 'Value' }, value !== undefined ? showBytes(value, fmt.value) : '')));
    while (tbody.children.length > MAX_ROWS) tbody.firstChild.remove();
    const box = tableEl;
    if (box.scrollHeight - box.scrollTop - box.clientHeight < 80) box.scrollTop = box.scrollHeight;
  };
  const onLine = (line) => {
    if (line.error) { setStatus(`Stream error: ${line.error.message}`, true); return; }
    const e = line.result || {};
    events++;
    count.textContent = `Following: ${events} events.`;
    if (e.mutation) row('mutation', 'ev-mutation', e.mutation.offset, e.mutation.timestamp, e.mutation.key, e.mutation.value);
    else if (e.deletion) row('deletion', 'ev-deletion', e.deletion.offset, e.deletion.timestamp, e.deletion.key);
    else if (e.snapshotMarker) row(`snapshot ${e.snapshotMarker.startOffset}–${e.snapshotMarker.endOffset} (${String(e.snapshotMarker.source).replace('SNAPSHOT_SOURCE_', '').toLowerCase()})`, 'ev-marker');
    else if (e.osoSnapshot) row(`OSO ${String(e.osoSnapshot.phase).replace('OSO_PHASE_', '').toLowerCase()}`, 'ev-marker');
    else if (e.offsetAdvanced) row('offset advanced', 'ev-marker', e.offsetAdvanced.offset);
    else if (e.streamEnd) row(`end: ${String(e.streamEnd.reason).replace('STREAM_END_REASON_', '').toLowerCase()}`, 'ev-marker');
  };
  const stop = () => { ctl?.abort(); ctl = null; go.disabled = false; stopBtn.disabled = true; };
  stopBtn.addEventListener('click', () => { stop(); count.textContent = `Stopped after ${events} events.`; });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    stop();
    tbody.replaceChildren();
    events = 0;
    let qs = `start_offset=${n(start.value)}&oso_mode=${mode.value}`;
    if (prefix.value) qs += `&key_prefix=${encodeURIComponent(textToB64(prefix.value))}`;
    const path = `/v1/topics/${api.enc(topic.value)}/partitions/${n(part.value)}/changes?${qs}`;
    ctl = new AbortController();
    go.disabled = true; stopBtn.disabled = false;
    count.textContent = 'Following: 0 events.';
    setStatus('');
    const mine = ctl;
    try {
      await api.stream(path, onLine, mine.signal);
      if (ctl === mine) { count.textContent = `Stream ended after ${events} events.`; stop(); }
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (ctl === mine) stop();
      if (e.status !== 401) setStatus('Stream failed: ' + e.message, true);
    }
  });
  return { title: 'Change stream', el: h('section', {}, h('h1', {}, 'Change stream'), form, count, tableEl), stop };
}
