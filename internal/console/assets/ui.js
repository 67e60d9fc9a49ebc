// Small DOM helpers shared by the pages.

// h builds an element: h('td', {class: 'num'}, 'text', child, ...).
export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

// flash keeps a notice for the page the app shows next (a page change
// clears the status line otherwise).
let pending = '';
export function flash(msg) { pending = msg; }
export function takeFlash() { const m = pending; pending = ''; return m; }

export function setStatus(msg, isError) {
  const s = document.getElementById('status');
  s.textContent = msg || '';
  s.className = isError ? 'error' : '';
}

// table with a caption, header cells and rows of cells (strings or nodes);
// numeric columns are listed in num.
export function table(caption, heads, rows, num = []) {
  return h('div', { class: 'table-wrap' }, h('table', {},
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, heads.map((t, i) => h('th', { scope: 'col', class: num.includes(i) ? 'num' : null }, t)))),
    h('tbody', {}, rows.length ? rows.map((r) => h('tr', {}, r.map((c, i) => h('td', { class: num.includes(i) ? 'num' : null, 'data-label': heads[i] }, c))))
      : h('tr', {}, h('td', { colspan: heads.length, class: 'muted' }, 'None.')))));
}

export function field(label, input) {
  const id = input.id || ('f-' + Math.random().toString(36).slice(2));
  input.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), input);
}

export function badge(s) { return h('span', { class: 'badge st-' + s }, s); }

// confirm asks in a modal dialog; with word set, the user must type it.
export function confirmDialog(text, word) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  const typed = document.getElementById('confirm-typed');
  const input = document.getElementById('confirm-input');
  const ok = document.getElementById('confirm-ok');
  typed.hidden = !word;
  input.value = '';
  document.getElementById('confirm-word').textContent = word || '';
  ok.disabled = !!word;
  input.oninput = () => { ok.disabled = input.value !== word; };
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
    d.returnValue = '';
    d.showModal();
    (word ? input : document.getElementById('confirm-cancel')).focus();
  });
}

export const n = (v) => (v === undefined || v === null ? 0 : Number(v));
export const fmtBytes = (b) => { b = n(b); const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB']; let i = 0; while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; } return (i ? b.toFixed(1) : b) + ' ' + u[i]; };
export const fmtTime = (ms) => (n(ms) ? new Date(n(ms)).toISOString().replace('T', ' ').replace('Z', ' UTC') : '');

// Bytes arrive base64-encoded (protobuf JSON); show them as text, JSON or hex
// ('json?' is JSON where it parses, plain text otherwise, for keys).
export function b64bytes(s) { const bin = atob(s || ''); const out = new Uint8Array(bin.length); for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i); return out; }
export function textToB64(t) { const b = new TextEncoder().encode(t); let s = ''; for (const x of b) s += String.fromCharCode(x); return btoa(s); }
export function showBytes(s, mode) {
  if (s === undefined || s === null) return h('span', { class: 'muted' }, 'null');
  const b = b64bytes(s);
  if (mode === 'hex') return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join(' ');
  let t;
  try { t = new TextDecoder('utf-8', { fatal: true }).decode(b); } catch { return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join(' ') + ' (not UTF-8: hex)'; }
  if (mode === 'json' || mode === 'json?') {
    try { return JSON.stringify(JSON.parse(t), null, 2); } catch { return mode === 'json' ? t + ' (not JSON)' : t; }
  }
  return t;
}
