// The job queue of a namespace (GET api/v1/jobs?namespace=NS): one row per experiment in
// queue order (priority, then position), with its trials' states, resource pool and the
// GPUs (slots) its running trials hold; then the tasks. Each experiment can be moved one
// place up or down (ahead of the job before it, behind the job after it) and given a
// priority, through PATCH .../jobs/{j}, the same change `det job update` makes.
// Refreshed every 5 s.
import { api, ns as nsPath } from './api.js';
import { h, clear, stateBadge } from './dom.js';

const LIVE = new Set(['RUNNING', 'ACTIVE', 'PULLING', 'STARTING']);

// Trial rows of one experiment -> one job row; the order of first appearance is the queue's.
function group(rows) {
  const jobs = new Map();
  const tasks = [];
  for (const r of rows) {
    if (!r.experiment) {
      tasks.push(r);
      continue;
    }
    let j = jobs.get(r.experiment);
    if (!j) jobs.set(r.experiment, (j = { name: r.experiment, priority: r.priority, pool: r.resource_pool,
      states: {}, trials: 0, slots: 0, gpus: 0, position: null }));
    j.trials++;
    j.states[r.state] = (j.states[r.state] || 0) + 1;
    j.slots += r.slots || 0;
    if (LIVE.has(r.state)) j.gpus += r.slots || 0;
    if (typeof r.queue_position === 'number' && (j.position === null || r.queue_position < j.position)) j.position = r.queue_position;
  }
  return { jobs: Array.from(jobs.values()), tasks };
}

export function jobsPage(ctx, ns) {
  const ac = new AbortController();
  const base = nsPath(ns);
  const status = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' }, 'Loading…');
  const box = h('div', { class: 'table-box', id: 'jobs' });
  const tbox = h('div', { class: 'table-box', id: 'tasks-queue' });
  clear(ctx.main).append(h('h1', {}, 'Job queue'),
    h('p', { class: 'muted' }, 'Ordered by priority (1 first; 42 when unset), then by position. ',
      'Moving a job puts it ahead of or behind its neighbour, as det job update --ahead-of / --behind-of does.'),
    status, box, h('h2', {}, 'Tasks'), tbox);
  ctx.main.dataset.page = 'jobs';

  async function change(job, body, what) {
    status.textContent = 'Moving ' + job + '…';
    try {
      const r = await api(base + 'jobs/' + encodeURIComponent(job), { method: 'PATCH', body, signal: ac.signal });
      status.textContent = 'job ' + job + ': ' + (r.change || what);
    } catch (e) {
      if (ac.signal.aborted) return;
      status.textContent = '';
      status.append(h('span', { class: 'error', role: 'alert' }, 'job ' + job + ': ' + e.message));
      return;
    }
    await load().catch(ctx.fail);
  }

  function draw(rows) {
    const { jobs, tasks } = group(rows);
    const head = h('tr', {}, ['#', 'Job', 'State', 'Priority', 'Pool', 'GPUs in use', 'Trials', 'Move'].map((c) => h('th', { scope: 'col' }, c)));
    const body = jobs.map((j, i) => {
      const prio = h('input', { type: 'number', min: '1', max: '99', value: String(j.priority), class: 'prio',
        'aria-label': 'priority of ' + j.name, onkeydown: (ev) => { if (ev.key === 'Enter') setPrio(); } });
      const setPrio = () => change(j.name, { priority: Number(prio.value) }, 'priority ' + prio.value);
      const up = i > 0 ? h('button', { type: 'button', class: 'small', 'aria-label': 'Move ' + j.name + ' ahead of ' + jobs[i - 1].name,
        dataset: { job: j.name, move: 'up' }, onclick: () => change(j.name, { ahead_of: jobs[i - 1].name }, 'ahead of ' + jobs[i - 1].name) }, '▲ Up') : null;
      const down = i < jobs.length - 1 ? h('button', { type: 'button', class: 'small', 'aria-label': 'Move ' + j.name + ' behind ' + jobs[i + 1].name,
        dataset: { job: j.name, move: 'down' }, onclick: () => change(j.name, { behind_of: jobs[i + 1].name }, 'behind ' + jobs[i + 1].name) }, '▼ Down') : null;
      return h('tr', { dataset: { job: j.name } },
        h('td', {}, j.position !== null ? String(j.position) : '—'),
        h('th', { scope: 'row' }, h('a', { href: '#/ns/' + encodeURIComponent(ns) + '/experiments/' + encodeURIComponent(j.name) }, j.name)),
        h('td', {}, Object.entries(j.states).map(([s, n]) => h('span', {}, stateBadge(s), n > 1 ? ' ×' + n + ' ' : ' '))),
        h('td', {}, prio, ' ', h('button', { type: 'button', class: 'small', onclick: setPrio, 'aria-label': 'Set the priority of ' + j.name }, 'Set')),
        h('td', {}, j.pool || 'default'),
        h('td', {}, String(j.gpus) + ' of ' + String(j.slots)),
        h('td', {}, String(j.trials)),
        h('td', {}, up, ' ', down));
    });
    clear(box).append(jobs.length
      ? h('table', {}, h('caption', { class: 'visually-hidden' }, 'Job queue of namespace ' + ns), h('thead', {}, head), h('tbody', {}, body))
      : h('p', { class: 'muted' }, 'No jobs in namespace ' + ns + '.'));
    clear(tbox).append(tasks.length
      ? h('table', {}, h('caption', { class: 'visually-hidden' }, 'Tasks in the queue'),
        h('thead', {}, h('tr', {}, ['#', 'Task', 'Kind', 'State', 'Priority', 'Pool', 'Slots'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, tasks.map((t) => h('tr', {}, h('td', {}, t.queue_position ?? '—'), h('td', {}, t.task || t.name || ''),
          h('td', {}, t.kind || ''), h('td', {}, stateBadge(t.state)), h('td', {}, String(t.priority ?? '')),
          h('td', {}, t.resource_pool || 'default'), h('td', {}, String(t.slots ?? 0))))))
      : h('p', { class: 'muted' }, 'No tasks.'));
  }

  async function load() {
    const j = await api('api/v1/jobs?namespace=' + encodeURIComponent(ns), { signal: ac.signal });
    draw(j.jobs || []);
    if (status.textContent === 'Loading…') status.textContent = '';
  }
  load().catch((e) => { if (!ac.signal.aborted) ctx.fail(e); });
  const timer = setInterval(() => load().catch((e) => { if (!ac.signal.aborted) ctx.fail(e); }), 5000);
  return () => {
    clearInterval(timer);
    ac.abort();
  };
}
