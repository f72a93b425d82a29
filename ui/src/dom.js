// A few DOM helpers: elements are built with h(), text always goes in as text nodes
// (never innerHTML), so names and log lines from the API cannot inject markup.

export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value' || k === 'checked') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, kids);
  return el;
}

function append(el, kids) {
  for (const k of kids) {
    if (k === null || k === undefined || k === false) continue;
    if (Array.isArray(k)) append(el, k);
    else el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function get(obj, path) {
  let o = obj;
  for (const p of path.split('.')) {
    if (o === null || o === undefined) return undefined;
    o = o[p];
  }
  return o;
}

export function fmtNumber(v) {
  if (typeof v !== 'number' || !isFinite(v)) return '—';
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}

// A byte count as "950 B", "12.3 MB", "1.20 GB"; '—' when unknown.
export function fmtBytes(n) {
  if (typeof n !== 'number' || !isFinite(n) || n < 0) return '—';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) {
    n /= 1000;
    i++;
  }
  return (i ? n.toPrecision(3) : String(n)) + ' ' + u[i];
}

export function fmtProgress(p) {
  return typeof p === 'number' && isFinite(p) ? Math.round(p * 100) + '%' : '—';
}

export function stateBadge(state) {
  const s = state || 'UNKNOWN';
  return h('span', { class: 'state state-' + s.toLowerCase() }, s);
}

export function progressBar(p) {
  if (typeof p !== 'number' || !isFinite(p)) return '—';
  const pct = Math.max(0, Math.min(1, p));
  return h('span', { class: 'progress' },
    h('progress', { max: '100', value: String(Math.round(pct * 100)), 'aria-hidden': 'true' }),
    ' ', fmtProgress(pct));
}

export function hparamsText(hp) {
  if (!hp || typeof hp !== 'object') return '';
  return Object.entries(hp).map(([k, v]) =>
    k + '=' + (typeof v === 'number' ? fmtNumber(v) : typeof v === 'object' ? JSON.stringify(v) : v)).join(' ');
}

// A table with sortable columns: cols = [{key, label, value(row) for sorting, cell(row)}].
// Sorting is by a button in each header (keyboard-usable), shown with aria-sort.
// rowAttrs(row), when given, makes each row's attributes (h()'s form: {dataset: {...}}).
export function sortableTable(caption, cols, rows, state, rerender, rowAttrs) {
  const sorted = rows.slice();
  const col = cols.find((c) => c.key === state.sort);
  if (col) {
    const dir = state.dir === 'desc' ? -1 : 1;
    sorted.sort((a, b) => {
      const x = col.value(a), y = col.value(b);
      if (x === y) return 0;
      if (x === undefined || x === null || x === '') return 1;
      if (y === undefined || y === null || y === '') return -1;
      return (typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y))) * dir;
    });
  }
  const head = h('tr', {}, cols.map((c) => {
    const on = c.key === state.sort;
    return h('th', { scope: 'col', 'aria-sort': on ? (state.dir === 'desc' ? 'descending' : 'ascending') : 'none' },
      h('button', { type: 'button', class: 'sort', dataset: { key: c.key },
        onclick: () => {
          state.dir = on && state.dir !== 'desc' ? 'desc' : 'asc';
          state.sort = c.key;
          rerender();
        } }, c.label, h('span', { class: 'arrow', 'aria-hidden': 'true' }, on ? (state.dir === 'desc' ? ' ▼' : ' ▲') : '')));
  }));
  return h('table', {},
    h('caption', { class: 'visually-hidden' }, caption),
    h('thead', {}, head),
    h('tbody', {}, sorted.map((r) => h('tr', rowAttrs ? rowAttrs(r) : {}, cols.map((c) => h('td', { class: 'col-' + c.key }, c.cell(r)))))));
}

// A sortable table that keeps only the rows in view (plus a margin) in the DOM, for lists of
// 10,000: fixed row height, a scrolling box, spacer rows above and below. Sorting and the
// header are sortableTable's. The box carries data-rows (all rows) for tests.
export function virtualTable(caption, cols, rows, state, rerender, { rowHeight = 34, height = 420 } = {}) {
  const sorted = sortRows(cols, rows, state);
  const t = sortableTable(caption, cols, [], state, rerender);
  const body = t.querySelector('tbody');
  const box = h('div', { class: 'vscroll', tabindex: '0', role: 'region', 'aria-label': caption,
    style: 'max-height:' + height + 'px', dataset: { rows: String(sorted.length) } }, t);
  const span = cols.length;
  let first = -1, last = -1;
  function paint() {
    const top = box.scrollTop;
    const n = Math.ceil((box.clientHeight || height) / rowHeight);
    const a = Math.max(0, Math.floor(top / rowHeight) - 10);
    const b = Math.min(sorted.length, a + n + 20);
    if (a === first && b === last) return;
    first = a;
    last = b;
    const pad = (px) => (px > 0 ? [h('tr', { class: 'vpad', 'aria-hidden': 'true' }, h('td', { colspan: String(span), style: 'height:' + px + 'px;padding:0;border:0' }))] : []);
    clear(body).append(...pad(a * rowHeight),
      ...sorted.slice(a, b).map((r) => h('tr', { class: 'vrow', style: 'height:' + rowHeight + 'px' },
        cols.map((c) => h('td', { class: 'col-' + c.key }, c.cell(r))))),
      ...pad((sorted.length - b) * rowHeight));
  }
  box.addEventListener('scroll', () => requestAnimationFrame(paint), { passive: true });
  requestAnimationFrame(paint);
  paint();
  return box;
}

function sortRows(cols, rows, state) {
  const sorted = rows.slice();
  const col = cols.find((c) => c.key === state.sort);
  if (col) {
    const dir = state.dir === 'desc' ? -1 : 1;
    const keyed = sorted.map((r) => [col.value(r), r]);
    keyed.sort(([x], [y]) => {
      if (x === y) return 0;
      if (x === undefined || x === null || x === '') return 1;
      if (y === undefined || y === null || y === '') return -1;
      return (typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y))) * dir;
    });
    return keyed.map(([, r]) => r);
  }
  return sorted;
}

// An RFC 3339 time of the API as "YYYY-MM-DD HH:MM:SS" (UTC, as det prints it), or '—'.
export function fmtTime(iso) {
  if (typeof iso !== 'string' || !iso) return '—';
  const d = new Date(iso);
  if (isNaN(d.getTime())) return iso;
  return d.toISOString().slice(0, 19).replace('T', ' ');
}

// How long ago an RFC 3339 time was: "42s", "5m", "3h", "2d"; '—' when unknown.
export function fmtAge(iso, now = Date.now()) {
  const t = typeof iso === 'string' ? Date.parse(iso) : NaN;
  if (isNaN(t)) return '—';
  const s = Math.max(0, Math.floor((now - t) / 1000));
  if (s < 120) return s + 's';
  if (s < 7200) return Math.floor(s / 60) + 'm';
  if (s < 172800) return Math.floor(s / 3600) + 'h';
  return Math.floor(s / 86400) + 'd';
}

// Metrics {name: value} as "name=value name=value" (numbers shortened).
export function metricsText(m) {
  if (!m || typeof m !== 'object') return '';
  return Object.entries(m).map(([k, v]) => k + '=' + (typeof v === 'number' ? fmtNumber(v) : JSON.stringify(v))).join(' ');
}

// A status line's error: role=alert, so screen readers announce it.
export function alertText(msg) {
  return h('span', { class: 'error', role: 'alert' }, msg);
}
