// The controller API from the browser: the user's token (kept in sessionStorage, so it goes
// with the tab) as `Authorization: Bearer` on every request, JSON errors turned into
// exceptions, and server-sent events read with fetch(): EventSource cannot send an
// Authorization header, and the API takes tokens only there (never in a URL, where they
// would reach logs and browser history).

const KEY = 'kdet.token';

export class Unauthorized extends Error {}
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export const token = () => sessionStorage.getItem(KEY);
export const setToken = (t) => sessionStorage.setItem(KEY, t);
export const clearToken = () => sessionStorage.removeItem(KEY);

// Paths are relative to the page, so the UI works behind a path prefix (kubectl proxy).
export const ns = (n) => 'api/v1/namespaces/' + encodeURIComponent(n) + '/';

// A link the API answered ("/proxy/...", "/api/v1/..."), relative to the page as every path
// here; '' when it does not start with prefix.
export function pageLink(url, prefix) {
  const u = String(url || '').replace(/^\//, '');
  return u.startsWith(prefix) ? u : '';
}

function headers(extra) {
  const t = token();
  if (!t) throw new Unauthorized('Log in with your kdet token.');
  return Object.assign({ Authorization: 'Bearer ' + t }, extra);
}

async function errorOf(r) {
  let msg = r.statusText;
  try {
    const j = await r.json();
    if (j && j.error) msg = j.error;
  } catch (e) { /* not JSON */ }
  if (r.status === 401) return new Unauthorized('The API refused the token (401): ' + msg);
  return new ApiError(r.status, r.status + ': ' + msg);
}

// The answer's JSON; with text: true its text (a page that only redraws when it changed
// compares the text, cheaper than comparing what it parses to).
export async function api(path, { method = 'GET', body, signal, text = false } = {}) {
  const init = { method, signal, cache: 'no-store', headers: headers({ Accept: 'application/json' }) };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const r = await fetch(path, init);
  if (!r.ok) throw await errorOf(r);
  return text ? r.text() : r.json();
}

const sleep = (ms, signal) => new Promise((res) => {
  const t = setTimeout(res, ms);
  if (signal) signal.addEventListener('abort', () => { clearTimeout(t); res(); }, { once: true });
});

// Follow a text/event-stream at path until signal aborts or onEvent returns false;
// reconnects after a drop with Last-Event-ID (the API resumes after it). onStatus
// ('live' | 'reconnecting') lets a page show the connection. A 401 throws Unauthorized.
export async function follow(path, onEvent, { signal, onStatus } = {}) {
  let last = null;
  while (!signal.aborted) {
    try {
      const r = await fetch(path, {
        signal, cache: 'no-store',
        headers: headers(Object.assign({ Accept: 'text/event-stream' }, last ? { 'Last-Event-ID': last } : {})),
      });
      if (!r.ok) throw await errorOf(r);
      if (onStatus) onStatus('live');
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      let ev = { event: 'message', data: [], id: null };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          let line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line.endsWith('\r')) line = line.slice(0, -1);
          if (line === '') {
            if (ev.data.length) {
              if (ev.id !== null) last = ev.id;
              if (onEvent(ev.event, ev.data.join('\n'), ev.id) === false) {
                reader.cancel().catch(() => {});
                return;
              }
            }
            ev = { event: 'message', data: [], id: null };
            continue;
          }
          if (line[0] === ':') continue;
          const c = line.indexOf(':');
          const field = c < 0 ? line : line.slice(0, c);
          let v = c < 0 ? '' : line.slice(c + 1);
          if (v[0] === ' ') v = v.slice(1);
          if (field === 'event') ev.event = v;
          else if (field === 'data') ev.data.push(v);
          else if (field === 'id') ev.id = v;
        }
      }
    } catch (e) {
      if (e instanceof Unauthorized) throw e;
      if (signal.aborted) return;
    }
    if (onStatus) onStatus('reconnecting');
    await sleep(2000, signal);
  }
}
