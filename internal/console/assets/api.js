// The console's only way to the server: the public REST API under /v1,
// with the bearer token (if any) from session storage.

const TOKEN_KEY = 'sharelog.token';

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY); }

export class APIError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// onUnauthorized is called on every 401: the app asks for a token.
let onUnauthorized = () => {};
export function setUnauthorizedHandler(f) { onUnauthorized = f; }

function headers(extra) {
  const h = { Accept: 'application/json', ...extra };
  const t = token();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

export async function call(method, path, body, opts = {}) {
  const init = { method, headers: headers(body !== undefined ? { 'Content-Type': 'application/json' } : {}), signal: opts.signal };
  if (body !== undefined) init.body = JSON.stringify(body);
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch { data = { message: text.trim() }; } }
  if (res.status === 401) onUnauthorized();
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

export const get = (p, o) => call('GET', p, undefined, o);
export const post = (p, b) => call('POST', p, b);
export const patch = (p, b) => call('PATCH', p, b);
export const del = (p) => call('DELETE', p);

// stream reads an NDJSON response line by line (the gateway's server
// streaming: one {"result": ...} or {"error": ...} object per line) and
// calls onLine for each; it returns when the stream ends or signal aborts.
export async function stream(path, onLine, signal) {
  const res = await fetch(path, { headers: headers(), signal });
  if (res.status === 401) onUnauthorized();
  if (!res.ok) {
    let data = null;
    try { data = JSON.parse(await res.text()); } catch { /* not JSON */ }
    throw new APIError(res.status, data);
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) onLine(JSON.parse(line));
    }
  }
  if (buf.trim()) onLine(JSON.parse(buf));
}

export const enc = encodeURIComponent;
