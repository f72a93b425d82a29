// The tasks of a namespace (docs/tasks.md): notebooks, commands, shells and TensorBoards from
// GET .../tasks, with their state (and how they ended), owner, slots and age; ended ones on
// request, as `det task list -a`. A task that serves HTTP through the controller's proxy
// (`proxy` in the listing: RUNNING with a reported address; shells serve ssh, not HTTP) gets
// "Open": the proxy's path /proxy/TASK/ needs the user's token, which a plain link cannot send,
// so the page asks for a one-minute sign-in link (POST .../tasks/{t}/proxy-ticket, as
// `det notebook open` does) and opens it in a new tab, where the proxy trades it for a
// session cookie. "Kill" asks first, then POST .../tasks/{t}/kill (as `det task kill`: the
// task's spec.killed). Refreshed every 5 s.
import { api, ns as nsPath, pageLink } from './api.js';
import { h, clear, stateBadge, fmtAge, fmtTime, alertText, sortableTable } from './dom.js';

const state = { sort: 'age', dir: 'asc', ended: false };

const serves = (t) => typeof t.proxy === 'string' && t.proxy !== '' && t.kind !== 'shell';
const ended = (t) => t.state === 'TERMINATED';

export function tasksPage(ctx, ns) {
  const ac = new AbortController();
  const base = nsPath(ns);
  const endedBox = h('input', { id: 'tasks-ended', type: 'checkbox', checked: state.ended,
    onchange: () => { state.ended = endedBox.checked; draw(); } });
  const status = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' }, 'Loading…');
  const box = h('div', { class: 'table-box', id: 'tasks' });
  let rows = null;
  let seen = '';
  clear(ctx.main).append(
    h('h1', {}, 'Tasks ', h('span', { class: 'muted' }, 'in ' + ns)),
    h('p', { class: 'muted' }, 'Notebooks, commands, shells and TensorBoards: start them with ',
      h('code', {}, 'det notebook start'), ', ', h('code', {}, 'det cmd run'), ', ', h('code', {}, 'det shell start'),
      ' or ', h('code', {}, 'det tensorboard start'), '.'),
    h('div', { class: 'toolbar' }, h('label', { class: 'check' }, endedBox, ' Show ended tasks')),
    box, status);
  ctx.main.dataset.page = 'tasks';

  const say = (msg, err) => {
    clear(status);
    if (err) status.append(alertText(msg));
    else status.textContent = msg;
  };

  async function open(ev, t) {
    ev.preventDefault();
    // The tab is opened now, in the click, so that no pop-up blocker refuses it; it goes
    // to the sign-in link once the API has made it.
    const w = window.open('about:blank', '_blank');
    try {
      const r = await api(base + 'tasks/' + encodeURIComponent(t.name) + '/proxy-ticket', { method: 'POST', body: {}, signal: ac.signal });
      const url = pageLink(r.url, 'proxy/');
      if (!url) throw new Error('the API answered no sign-in link');
      if (w) {
        w.opener = null;
        w.location.replace(new URL(url, document.baseURI).href);
      } else location.assign(url);
      say('Opened ' + t.name + ' in a new tab.');
    } catch (e) {
      if (w) w.close();
      if (!ac.signal.aborted) say('Cannot open ' + t.name + ': ' + e.message, true);
    }
  }

  async function kill(t) {
    if (!window.confirm('Kill ' + t.kind + ' ' + t.name + '? Whatever it holds in memory is lost.')) return;
    say('Killing ' + t.name + '…');
    try {
      await api(base + 'tasks/' + encodeURIComponent(t.name) + '/kill', { method: 'POST', body: {}, signal: ac.signal });
      say('Asked to kill ' + t.name + '.');
    } catch (e) {
      if (!ac.signal.aborted) say('Cannot kill ' + t.name + ': ' + e.message, true);
      return;
    }
    seen = '';
    await load().catch(failed);
  }

  const cols = [
    { key: 'name', label: 'Task', value: (t) => t.name,
      cell: (t) => h('span', {}, t.name, t.description ? h('span', { class: 'muted' }, ' ' + t.description) : null) },
    { key: 'kind', label: 'Kind', value: (t) => t.kind || '', cell: (t) => t.kind || '—' },
    { key: 'state', label: 'State', value: (t) => t.state || '',
      cell: (t) => h('span', { title: t.message || null }, stateBadge(t.state),
        t.end_reason ? ' ' + t.end_reason : '', typeof t.exit_code === 'number' ? ' (exit ' + t.exit_code + ')' : '') },
    { key: 'owner', label: 'Owner', value: (t) => t.owner || '', cell: (t) => t.owner || '—' },
    { key: 'slots', label: 'Slots', value: (t) => t.slots ?? 1, cell: (t) => String(t.slots ?? 1) },
    { key: 'age', label: 'Age', value: (t) => -(Date.parse(t.submitted) || 0),
      cell: (t) => h('span', { title: fmtTime(t.submitted), dataset: { submitted: t.submitted || '' } }, fmtAge(t.submitted)) },
    { key: 'actions', label: 'Actions', value: () => '',
      cell: (t) => h('span', { class: 'actions' },
        serves(t) ? h('a', { href: t.proxy.replace(/^\//, ''), class: 'open', target: '_blank', rel: 'noopener noreferrer',
          dataset: { task: t.name }, 'aria-label': 'Open ' + t.name, onclick: (ev) => open(ev, t) }, 'Open') : null,
        serves(t) ? ' ' : null,
        !ended(t) ? h('button', { type: 'button', class: 'small danger', dataset: { task: t.name, action: 'kill' },
          'aria-label': 'Kill ' + t.name, onclick: () => kill(t) }, 'Kill') : null) },
  ];

  function draw() {
    if (rows === null) return;
    const shown = rows.filter((t) => state.ended || !ended(t));
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null;
    if (!shown.length) {
      clear(box).append(h('p', { class: 'muted empty' }, rows.length
        ? 'No running or queued tasks in ' + ns + ' (' + rows.length + ' ended: "Show ended tasks").'
        : 'No tasks in ' + ns + '.'));
    } else {
      clear(box).append(sortableTable('Tasks of namespace ' + ns, cols, shown, state, draw,
        (t) => ({ dataset: { task: t.name, state: t.state || '' } })));
    }
    if (focused) {
      const b = box.querySelector('button[data-key="' + focused + '"]');
      if (b) b.focus();
    }
  }

  async function load() {
    const j = await api(base + 'tasks', { signal: ac.signal });
    if (status.textContent === 'Loading…') status.textContent = '';
    const text = JSON.stringify(j.tasks || []);
    if (text === seen) { /* unchanged: keep the table (and the focus); only the ages move */
      for (const el of box.querySelectorAll('[data-submitted]')) el.textContent = fmtAge(el.dataset.submitted);
      return;
    }
    seen = text;
    rows = j.tasks || [];
    draw();
  }
  const failed = (e) => { if (!ac.signal.aborted) ctx.fail(e); };
  load().catch(failed);
  const timer = setInterval(() => load().catch(failed), 5000);
  return () => {
    clearInterval(timer);
    ac.abort();
  };
}
