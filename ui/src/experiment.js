// One experiment: its summary, the trials table (state, hyperparameters, best metric,
// steps; virtualised: only the rows in view are in the DOM) and the learning curves of every
// trial, one chart per metric. The history of all trials comes in one request per kind
// (GET .../experiments/{e}/metrics: the store's M4 overviews, a budget of points per chart
// shared by the trials), asked at once with the experiment, not after it; a zoom asks the
// steps in view again, in detail. New batches come from the experiment's metrics stream,
// drawn as they arrive, without a reload. The summary and the table are refreshed every 5 s
// (redrawn only when the answer's text changed). Pause or Activate (whichever applies),
// Cancel (after a confirm()) and Archive or Unarchive call
// POST .../experiments/{e}/pause|activate|cancel|archive|unarchive; the API's refusal is
// shown; the state follows at the next poll.
import { api, follow, ns as nsPath, Unauthorized } from './api.js';
import { h, clear, get, fmtNumber, fmtProgress, stateBadge, progressBar, hparamsText, virtualTable } from './dom.js';
import { ChartSet, colorOf } from './chart.js';
import { hparamView } from './hpviz.js';

const MAX_POINTS = 4000; // per trial and metric (the overviews give at most 1,024)
const BUDGET = 200000; // points per chart, shared by the trials
const EARLY_MAX = 100; // batches kept per trial whose store id is not known yet

export function experimentPage(ctx, ns, name) {
  const ac = new AbortController();
  const base = nsPath(ns);
  const tstate = { sort: 'name', dir: 'asc' };
  const summary = h('dl', { class: 'summary' });
  const trialsBox = h('div', { class: 'table-box', id: 'trials' });
  const chartsBox = h('div', { class: 'charts', id: 'charts' });
  const hpBox = h('div', { class: 'hparams', id: 'hparams' });
  let exp = {};
  const live = h('span', { class: 'live muted', role: 'status' }, 'connecting…');
  const logToggle = h('input', { id: 'logscale', type: 'checkbox', onchange: () => charts.setLog(logToggle.checked) });
  const title = h('h1', {}, 'Experiment ', name);
  const act = (verb) => () => action(verb);
  const buttons = {
    pause: h('button', { type: 'button', id: 'exp-pause', hidden: true, onclick: act('pause') }, 'Pause'),
    activate: h('button', { type: 'button', id: 'exp-activate', hidden: true, onclick: act('activate') }, 'Activate'),
    cancel: h('button', { type: 'button', id: 'exp-cancel', hidden: true, onclick: act('cancel') }, 'Cancel'),
    archive: h('button', { type: 'button', id: 'exp-archive', hidden: true,
      onclick: () => action(get(exp, 'spec.archived') === true ? 'unarchive' : 'archive') }, 'Archive'),
  };
  const said = h('span', { id: 'exp-said', role: 'status' });
  let busy = false;
  clear(ctx.main).append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/ns/' + encodeURIComponent(ns) }, 'Experiments'), ' / ', name),
    title, summary,
    h('div', { class: 'toolbar', id: 'exp-actions' }, buttons.pause, buttons.activate, buttons.cancel, buttons.archive, said),
    h('h2', {}, 'Trials'), trialsBox,
    h('h2', {}, 'Hyperparameters'), hpBox,
    h('h2', {}, 'Learning curves ', live),
    h('div', { class: 'toolbar' }, h('label', { class: 'check' }, logToggle, ' Log scale (y)'),
      h('span', { class: 'muted' }, 'Drag across a chart to zoom; double-click to zoom out.')),
    chartsBox);
  ctx.main.dataset.page = 'experiment';
  delete ctx.main.dataset.ready;
  /* The charts know trials by store id (the history's answers carry ids, not names), so they
   * are drawn without waiting for the experiment's answer; names label them when it came. */
  const keyOf = (id) => '#' + id;
  const nameOf = new Map(); // chart key -> trial name
  const charts = new ChartSet(chartsBox, { loadRange, label: (k) => nameOf.get(k) || k });
  const loaded = new Set(); // store ids of the trials whose history was asked
  const early = new Map(); // name -> [[kind, rows]] streamed before the trial's id was known
  let byName = new Map(); // name -> trial, of the latest answer
  let trials = [];
  let seen = '';
  let histories = null; // the latest history request (a later load waits for it); null before the first
  let marked = false; // the first render and the first complete drawing are marked once

  const cols = [
    { key: 'name', label: 'Trial', value: (t) => t.id ?? t.name,
      cell: (t) => h('a', { href: '#/ns/' + encodeURIComponent(ns) + '/trials/' + encodeURIComponent(t.name) },
        h('span', { class: 'swatch', style: 'background:' + colorOf(charts.index(t.id !== undefined ? keyOf(t.id) : t.name)),
          'aria-hidden': 'true' }),
        t.name, t.id !== undefined ? h('span', { class: 'muted' }, ' #' + t.id) : null) },
    { key: 'state', label: 'State', value: (t) => get(t, 'status.state') || '', cell: (t) => stateBadge(get(t, 'status.state')) },
    { key: 'hparams', label: 'Hyperparameters', value: (t) => hparamsText(get(t, 'spec.hparams')),
      cell: (t) => h('code', {}, hparamsText(get(t, 'spec.hparams'))) },
    { key: 'best', label: 'Best metric', value: (t) => get(t, 'status.bestValidation.value'),
      cell: (t) => fmtNumber(get(t, 'status.bestValidation.value')) },
    { key: 'steps', label: 'Steps (batches)', value: (t) => get(t, 'status.batchesTrained') ?? 0,
      cell: (t) => String(get(t, 'status.batchesTrained') ?? 0) },
    { key: 'progress', label: 'Progress', value: (t) => get(t, 'status.progress'), cell: (t) => progressBar(get(t, 'status.progress')) },
    { key: 'restarts', label: 'Restarts', value: (t) => get(t, 'status.restarts') ?? 0, cell: (t) => String(get(t, 'status.restarts') ?? 0) },
  ];

  function drawSummary(e) {
    const b = get(e, 'status.bestValidation');
    const items = [
      ['State', stateBadge(get(e, 'status.state'))],
      ['Progress', fmtProgress(get(e, 'status.progress'))],
      ['Searcher', (get(e, 'spec.searcher.name') || '—') + (get(e, 'spec.searcher.metric') ? ' on ' + get(e, 'spec.searcher.metric') : '')],
      ['Best', b && typeof b.value === 'number' ? fmtNumber(b.value) + ' (' + (b.trial || '') + ', ' + (b.batches ?? '?') + ' batches)' : '—'],
      ['Trials', String(get(e, 'status.trials.total') ?? trials.length)],
      ['Message', get(e, 'status.message') || ''],
    ];
    clear(summary).append(...items.filter(([, v]) => v !== '').map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v))));
    if (e.id !== undefined) title.textContent = 'Experiment ' + name + ' #' + e.id;
  }

  // The buttons that apply to the experiment as last read: none but Archive once it ended.
  function drawActions(e) {
    const state = get(e, 'status.state') || '';
    const ended = ['COMPLETED', 'CANCELED', 'ERROR', 'DELETED'].includes(state) || state.startsWith('STOPPING_') ||
      get(e, 'spec.canceled') === true;
    const paused = get(e, 'spec.paused') === true;
    buttons.pause.hidden = ended || paused;
    buttons.activate.hidden = ended || !paused;
    buttons.cancel.hidden = ended;
    buttons.archive.hidden = false;
    buttons.archive.textContent = get(e, 'spec.archived') === true ? 'Unarchive' : 'Archive';
    for (const b of Object.values(buttons)) b.disabled = busy;
    ctx.main.dataset.busy = busy ? '1' : '';
  }

  async function action(verb) {
    if (busy) return;
    if (verb === 'cancel' && !confirm('Cancel experiment ' + name + '? Its trials stop and it cannot be activated again.')) return;
    busy = true;
    drawActions(exp);
    clear(said).append(h('span', { class: 'muted' }, verb + '…'));
    try {
      const j = await api(base + 'experiments/' + encodeURIComponent(name) + '/' + verb, { method: 'POST', signal: ac.signal });
      const done = { pause: 'Paused', activate: 'Activated', cancel: 'Canceled', archive: 'Archived', unarchive: 'Unarchived' }[verb];
      clear(said).append(h('span', { class: 'muted' }, done + ' experiment ' + name + '.'));
      if (j.experiment && j.experiment.spec) exp = Object.assign({}, exp, { spec: j.experiment.spec });
    } catch (e) {
      if (e instanceof Unauthorized) {
        ctx.fail(e);
        return;
      }
      if (ac.signal.aborted) return;
      clear(said).append(h('span', { class: 'error', role: 'alert' }, 'Could not ' + verb + ' experiment ' + name + ': ' + e.message));
    } finally {
      busy = false;
      drawActions(exp);
    }
    reload().catch(failed);
  }

  /* Redrawn on each poll that brought news and on a sort: the table stays where the user
   * scrolled it to. */
  function drawTrials() {
    const was = trialsBox.querySelector('.vscroll');
    const top = was ? was.scrollTop : 0;
    clear(trialsBox).append(trials.length
      ? virtualTable('Trials of experiment ' + name, cols, trials, tstate, drawTrials)
      : h('p', { class: 'muted' }, 'No trials yet.'));
    const box = trialsBox.querySelector('.vscroll');
    if (box && top > 0) box.scrollTop = top; /* its scroll event paints the rows in view */
  }

  // Every trial's series of a kind (a range of steps: {from, to}); a 404 (nothing stored) is none.
  function series(kind, range) {
    const q = 'metrics?kind=' + kind + '&max_points=' + MAX_POINTS + '&budget=' + BUDGET +
      (range ? '&from=' + range.from + '&to=' + range.to : '');
    return api(base + 'experiments/' + encodeURIComponent(name) + '/' + q, { signal: ac.signal })
      .catch((e) => (e.status === 404 ? { trials: [] } : Promise.reject(e)));
  }

  // A zoom: the steps in view of every trial of the kind, as finely as the budget allows.
  async function loadRange(kind, from, to) {
    const j = await series(kind, { from, to });
    const byTrial = new Map((j.trials || []).map((t) => [keyOf(t.trial_id), t.series]));
    return { from: j.from ?? from, to: j.to ?? to, trials: byTrial };
  }

  // Every trial's history in one request per kind, both kinds then one drawing: a chart of
  // 1,000 trials is not drawn twice.
  async function history() {
    const kinds = ['validation', 'training'];
    const answers = await Promise.all(kinds.map((k) => series(k)));
    answers.forEach((j, i) => {
      for (const t of j.trials || []) charts.addSeries(keyOf(t.trial_id), kinds[i], t.series);
    });
    charts.schedule();
  }

  async function load() {
    const got = api(base + 'experiments/' + encodeURIComponent(name), { signal: ac.signal, text: true });
    const first = histories === null;
    /* The first time, the history is asked at once, with the experiment, and drawn when it comes. */
    if (first) {
      histories = history();
      histories.catch(() => {}); /* awaited below once the experiment came; a failure is reported there */
    }
    const text = await got;
    if (text !== seen) {
      seen = text;
      const j = JSON.parse(text);
      trials = j.trials || [];
      byName = new Map(trials.map((t) => [t.name, t]));
      let named = false;
      for (const t of trials) {
        if (t.id !== undefined && nameOf.get(keyOf(t.id)) !== t.name) {
          nameOf.set(keyOf(t.id), t.name);
          named = true;
        }
      }
      exp = j.experiment || {};
      drawSummary(exp);
      drawActions(exp);
      drawTrials();
      hparamView(hpBox, trials, get(exp, 'spec.searcher.metric') || 'metric',
        get(exp, 'spec.searcher.smaller_is_better') !== false);
      if (named) charts.schedule(); /* names for the legends */
      if (!marked) performance.mark('kdet:trials'); /* first render, for bench/ui */
    }
    /* Trials new to the store are the reason to ask again (the stream brings the rest). */
    const fresh = trials.filter((t) => t.id !== undefined && !loaded.has(t.id));
    for (const t of fresh) loaded.add(t.id);
    if (fresh.length && !first) histories = history();
    await histories;
    for (const [n, batches] of early) { /* the overviews may not hold them yet */
      const t = byName.get(n);
      if (!t || t.id === undefined) continue;
      for (const [kind, rows] of batches) charts.addRows(keyOf(t.id), kind, rows);
      early.delete(n);
    }
    /* bench/ui's interactive: the frame after the one that drew the table and every trial's history */
    if (!marked) requestAnimationFrame(() => requestAnimationFrame(() => {
      ctx.main.dataset.ready = '1';
      performance.mark('kdet:ready');
    }));
    marked = true;
  }

  function onEvent(ev, data) {
    if (ev !== 'metrics') return;
    const b = JSON.parse(data);
    if (b.kind !== 'training' && b.kind !== 'validation') return undefined; /* profiling rows: the trial's page */
    const t = byName.get(b.trial);
    if (!t || t.id === undefined) { /* a new trial (or one new to the store): its id, then its history */
      if (!early.has(b.trial)) early.set(b.trial, []);
      const kept = early.get(b.trial);
      if (kept.length < EARLY_MAX) kept.push([b.kind, b.rows]);
      reload().catch(failed);
      return undefined;
    }
    charts.addRows(keyOf(t.id), b.kind, b.rows);
    return undefined;
  }

  // One load at a time: asked while one runs, one more follows it, not one per ask (a burst
  // of new trials' first batches would each read the experiment and every history again).
  let running = null, next = null;
  function reload() {
    if (next) return next;
    if (running) return (next = running.catch(() => {}).then(() => { next = null; return reload(); }));
    return (running = load().finally(() => { running = null; }));
  }
  const failed = (e) => { if (!ac.signal.aborted) ctx.fail(e); };

  // The stream first, so that no batch falls between the history and the stream.
  follow(base + 'experiments/' + encodeURIComponent(name) + '/metrics/stream', onEvent, {
    signal: ac.signal,
    onStatus: (s) => { live.textContent = s === 'live' ? '● live' : 'reconnecting…'; },
  }).catch(failed);
  reload().catch(failed);
  const timer = setInterval(() => reload().catch(failed), 5000);
  return () => {
    clearInterval(timer);
    ac.abort();
    charts.destroy();
  };
}
