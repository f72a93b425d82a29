// The experiments of a namespace: id, name, state, progress, best metric, searcher, owner
// and labels; a filter box and sortable columns; refreshed every 5 s (the list comes from
// the controller's informer cache, so polling it is cheap).
import { api, ns as nsPath } from './api.js';
import { h, clear, get, fmtNumber, stateBadge, progressBar, sortableTable } from './dom.js';

const state = { sort: 'id', dir: 'desc', filter: '' };

function owner(e) {
  return get(e, 'spec.owner') || get(e, 'spec.user') || '';
}

function labels(e) {
  const l = get(e, 'spec.labels');
  return Array.isArray(l) ? l.map(String) : [];
}

function best(e) {
  const b = get(e, 'status.bestValidation');
  return b && typeof b.value === 'number' ? b : null;
}

export function experimentsPage(ctx, ns) {
  const ac = new AbortController();
  const filter = h('input', { id: 'filter', type: 'search', value: state.filter,
    placeholder: 'name, state, label, searcher…', oninput: () => { state.filter = filter.value; draw(); } });
  const archived = h('input', { id: 'archived', type: 'checkbox', onchange: load });
  const status = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' }, 'Loading…');
  const box = h('div', { class: 'table-box', id: 'experiments' });
  let rows = [];
  let seen = '';
  clear(ctx.main).append(
    h('h1', {}, 'Experiments ', h('span', { class: 'muted' }, 'in ' + ns)),
    h('div', { class: 'toolbar' },
      h('label', { for: 'filter' }, 'Filter'), filter,
      h('label', { class: 'check' }, archived, ' Show archived')),
    box, status);
  ctx.main.dataset.page = 'experiments';

  const cols = [
    { key: 'id', label: 'ID', value: (e) => e.id, cell: (e) => (e.id === undefined ? '—' : String(e.id)) },
    { key: 'name', label: 'Name', value: (e) => e.name,
      cell: (e) => h('a', { href: '#/ns/' + encodeURIComponent(ns) + '/experiments/' + encodeURIComponent(e.name) },
        e.name, get(e, 'spec.name') && get(e, 'spec.name') !== e.name ? h('span', { class: 'muted' }, ' ' + get(e, 'spec.name')) : null) },
    { key: 'state', label: 'State', value: (e) => get(e, 'status.state') || '', cell: (e) => stateBadge(get(e, 'status.state')) },
    { key: 'progress', label: 'Progress', value: (e) => get(e, 'status.progress'), cell: (e) => progressBar(get(e, 'status.progress')) },
    { key: 'best', label: 'Best metric', value: (e) => (best(e) ? best(e).value : undefined),
      cell: (e) => (best(e) ? h('span', {}, h('span', { class: 'muted' }, best(e).metric + ' '), fmtNumber(best(e).value)) : '—') },
    { key: 'searcher', label: 'Searcher', value: (e) => get(e, 'spec.searcher.name') || '', cell: (e) => get(e, 'spec.searcher.name') || '—' },
    { key: 'owner', label: 'Owner', value: owner, cell: (e) => owner(e) || '—' },
    { key: 'labels', label: 'Labels', value: (e) => labels(e).join(','), cell: (e) => labels(e).map((l) => h('span', { class: 'label' }, l)) },
  ];

  function matches(e) {
    const f = state.filter.trim().toLowerCase();
    if (!f) return true;
    const text = [e.id, e.name, get(e, 'spec.name'), get(e, 'status.state'), get(e, 'spec.searcher.name'),
      owner(e), ...labels(e)].join(' ').toLowerCase();
    return f.split(/\s+/).every((w) => text.includes(w));
  }

  function draw() {
    const shown = rows.filter(matches);
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null;
    clear(box).append(sortableTable('Experiments of namespace ' + ns, cols, shown, state, draw));
    if (focused) {
      const b = box.querySelector('button[data-key="' + focused + '"]');
      if (b) b.focus();
    }
    status.textContent = rows.length === 0 ? 'No experiments in ' + ns + ' yet.'
      : shown.length + ' of ' + rows.length + ' experiments shown.';
  }

  async function load() {
    try {
      const j = await api(nsPath(ns) + 'experiments' + (archived.checked ? '?archived=true' : ''), { signal: ac.signal });
      const text = JSON.stringify(j.experiments || []);
      if (text === seen) return; /* unchanged: keep the table (and the focus) as it is */
      seen = text;
      rows = j.experiments || [];
      draw();
    } catch (e) {
      if (!ac.signal.aborted) ctx.fail(e);
    }
  }
  load();
  const timer = setInterval(load, 5000);
  return () => {
    clearInterval(timer);
    ac.abort();
  };
}
