// One trial: its summary, its metrics (one chart per metric, live over the trial's metrics
// stream) and its logs, followed over the logs stream (the last 500 lines, then each new
// one) with a search box that filters the lines shown and a "Follow" switch that keeps the
// newest line in view; its checkpoints, each of which can be registered in a model
// (checkpoints.js); its history: the experiment's events (GET .../experiments/{e}/events,
// polled with after=) that concern this trial, oldest first: the searcher's decisions
// (matched by the trial's request id, as the searcher records them without a trial id) and
// the trial's own events: its state changes and restarts (with their cause) and early exits
// (matched by its store id, or by its request id before it had one), each with its time,
// kind and reason;
// its profiler: system metrics and per-phase timings, one small chart per group
// (profiler.js), polled while the trial has not ended.
import { api, follow, ns as nsPath } from './api.js';
import { h, clear, get, fmtNumber, fmtTime, stateBadge, progressBar, hparamsText } from './dom.js';
import { ChartSet } from './chart.js';
import { checkpointsSection } from './checkpoints.js';
import { profilerSection } from './profiler.js';

const KEEP_LINES = 20000;
const EVENTS_PAGE = 1000; // the events route's most per request

export function trialPage(ctx, ns, name) {
  const ac = new AbortController();
  const base = nsPath(ns) + 'trials/' + encodeURIComponent(name);
  const summary = h('dl', { class: 'summary' });
  const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '#/ns/' + encodeURIComponent(ns) }, 'Experiments'), ' / ');
  const chartsBox = h('div', { class: 'charts', id: 'charts' });
  const logToggle = h('input', { id: 'logscale', type: 'checkbox', onchange: () => charts.setLog(logToggle.checked) });
  const search = h('input', { id: 'log-search', type: 'search', placeholder: 'text in a line', oninput: () => redraw() });
  const followBox = h('input', { id: 'log-follow', type: 'checkbox', checked: true, onchange: () => { if (followBox.checked) scroll(); } });
  const logs = h('pre', { id: 'logs', class: 'logs', tabindex: '0', 'aria-label': 'trial logs', dataset: { lines: '0' } });
  const logStatus = h('span', { class: 'muted', role: 'status' }, 'connecting…');
  const live = h('span', { class: 'live muted' }, '');
  const ckpts = checkpointsSection(ctx, ns, name, ac.signal);
  const prof = profilerSection(base, ac.signal);
  const historyBox = h('div', { class: 'table-box', id: 'history', dataset: { events: '0' } },
    h('p', { class: 'muted empty' }, 'Loading…'));
  clear(ctx.main).append(crumbs, h('h1', {}, 'Trial ', name), summary,
    h('h2', {}, 'Metrics ', live),
    h('div', { class: 'toolbar' }, h('label', { class: 'check' }, logToggle, ' Log scale (y)')),
    chartsBox,
    prof.el,
    ckpts.el,
    h('section', { id: 'history-section', 'aria-labelledby': 'history-title' },
      h('h2', { id: 'history-title' }, 'History'),
      h('p', { class: 'muted' }, 'The searcher\'s decisions about this trial and what happened to it (its states, restarts and early exits), oldest first.'),
      historyBox),
    h('h2', {}, 'Logs ', logStatus),
    h('div', { class: 'toolbar' },
      h('label', { for: 'log-search' }, 'Search'), search,
      h('label', { class: 'check' }, followBox, ' Follow')),
    logs);
  ctx.main.dataset.page = 'trial';
  const charts = new ChartSet(chartsBox);
  const lines = [];

  function fmtLine(l) {
    return (l.rank >= 0 ? '[rank=' + l.rank + '] ' : '') + l.line;
  }
  function shown(l) {
    const q = search.value.trim().toLowerCase();
    return !q || l.toLowerCase().includes(q);
  }
  function scroll() {
    logs.scrollTop = logs.scrollHeight;
  }
  function redraw() {
    logs.textContent = lines.filter(shown).join('\n');
    logs.dataset.lines = String(lines.length);
    if (followBox.checked) scroll();
  }
  function addLines(batch) {
    const add = batch.map(fmtLine);
    lines.push(...add);
    if (lines.length > KEEP_LINES) {
      lines.splice(0, lines.length - KEEP_LINES);
      redraw();
      return;
    }
    const text = add.filter(shown).join('\n');
    if (text) logs.append((logs.textContent ? '\n' : '') + text);
    logs.dataset.lines = String(lines.length);
    if (followBox.checked) scroll();
  }

  function drawSummary(t) {
    const exp = get(t, 'spec.experiment');
    if (exp && crumbs.childNodes.length === 2)
      crumbs.append(h('a', { href: '#/ns/' + encodeURIComponent(ns) + '/experiments/' + encodeURIComponent(exp) }, exp), ' / ', name);
    const items = [
      ['State', stateBadge(get(t, 'status.state'))],
      ['Experiment', exp || '—'],
      ['Hyperparameters', h('code', {}, hparamsText(get(t, 'spec.hparams')))],
      ['Steps (batches)', String(get(t, 'status.batchesTrained') ?? 0)],
      ['Progress', progressBar(get(t, 'status.progress'))],
      ['Best', fmtNumber(get(t, 'status.bestValidation.value'))],
      ['Restarts', String(get(t, 'status.restarts') ?? 0)],
      ['Message', get(t, 'status.message') || ''],
    ];
    clear(summary).append(...items.filter(([, v]) => v !== '').map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v))));
  }

  // The history: every event of the experiment after the last one seen, kept when it is
  // about this trial. The searcher's decisions carry the trial's request id in `details`
  // (the experiment-wide `shutdown` is left out); the trial's own (e.g. early_exit) its id.
  const history = [];
  let lastEvent = 0;
  function mine(ev, t) {
    if (ev.trial_id !== null && ev.trial_id !== undefined) return typeof t.id === 'number' && ev.trial_id === t.id;
    const rid = get(t, 'spec.requestId');
    return !!rid && ev.decision !== 'shutdown' && get(ev, 'details.request_id') === rid;
  }
  function drawHistory() {
    historyBox.dataset.events = String(history.length);
    clear(historyBox).append(history.length
      ? h('table', {},
        h('caption', { class: 'visually-hidden' }, 'History of trial ' + name),
        h('thead', {}, h('tr', {}, ['Time', 'Kind', 'Decision', 'Reason'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, history.map((ev) => h('tr', { dataset: { id: String(ev.id), kind: ev.kind || '', decision: ev.decision || '', at: ev.at || '' } },
          h('td', { class: 'col-at' }, fmtTime(ev.at)),
          h('td', { class: 'col-kind' }, ev.kind || ''),
          h('td', { class: 'col-decision' }, ev.kind === 'trial' && /^[A-Z_]+$/.test(ev.decision || '') ? stateBadge(ev.decision) : ev.decision || ''),
          h('td', { class: 'col-reason' }, ev.reason || '')))))
      : h('p', { class: 'muted empty' }, 'No events yet'));
  }
  async function loadHistory(t) {
    const exp = get(t, 'spec.experiment');
    if (!exp) {
      drawHistory();
      return;
    }
    const path = nsPath(ns) + 'experiments/' + encodeURIComponent(exp) + '/events?limit=' + EVENTS_PAGE + '&after=';
    let added = lastEvent === 0; /* the first load draws, even when empty */
    for (;;) {
      const j = await api(path + lastEvent, { signal: ac.signal });
      const evs = j.events || [];
      for (const ev of evs) {
        if (typeof ev.id === 'number' && ev.id > lastEvent) lastEvent = ev.id;
        if (mine(ev, t)) {
          history.push(ev);
          added = true;
        }
      }
      if (evs.length < EVENTS_PAGE) break;
    }
    if (added) drawHistory();
  }

  const failed = (e) => { if (!ac.signal.aborted) ctx.fail(e); };
  let seen = '';
  async function load() {
    const j = await api(base, { signal: ac.signal });
    const text = JSON.stringify(j.trial);
    if (text !== seen) {
      seen = text;
      drawSummary(j.trial || {});
      await ckpts.reload(); /* a new checkpoint changes the trial's status too */
    }
    await Promise.all([loadHistory(j.trial || {}), prof.poll(get(j.trial, 'status.state'))]);
  }

  follow(base + '/metrics/stream', (ev, data) => {
    if (ev === 'metrics') {
      const b = JSON.parse(data);
      if (b.kind === 'training' || b.kind === 'validation') charts.addRows(name, b.kind, b.rows); /* profiling: below */
    }
  }, { signal: ac.signal, onStatus: (s) => { live.textContent = s === 'live' ? '● live' : 'reconnecting…'; } }).catch(failed);
  Promise.all(['validation', 'training'].map((kind) =>
    api(base + '/metrics?kind=' + kind + '&max_points=2000', { signal: ac.signal })
      .then((j) => charts.addRows(name, kind, j.metrics))
      .catch((e) => (e.status === 404 ? charts.schedule() : Promise.reject(e))))).catch(failed);
  follow(base + '/logs/stream?tail=500', (ev, data) => {
    if (ev === 'logs') addLines(JSON.parse(data).logs || []);
    if (ev === 'end') {
      logStatus.textContent = 'the trial ended (' + (JSON.parse(data).state || '') + ')';
      return false;
    }
    return undefined;
  }, { signal: ac.signal, onStatus: (s) => { logStatus.textContent = s === 'live' ? '● following' : 'reconnecting…'; } }).catch(failed);
  load().catch(failed);
  const timer = setInterval(() => load().catch(failed), 5000);
  return () => {
    clearInterval(timer);
    ac.abort();
    charts.destroy();
    prof.destroy();
  };
}
