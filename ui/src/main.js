// kdet's web UI: a hash router over its pages (login, experiments, experiment, trial, jobs,
// models, model, tasks).
// Each page renders into <main> and returns a cleanup that stops its streams and timers.
// A 401 anywhere ends the session: back to the login page, saying why.
import './app.css';
import { api, token, clearToken, Unauthorized } from './api.js';
import { h, clear } from './dom.js';
import { loginPage } from './login.js';
import { experimentsPage } from './experiments.js';
import { experimentPage } from './experiment.js';
import { trialPage } from './trial.js';
import { jobsPage } from './jobs.js';
import { modelsPage, modelPage } from './models.js';
import { tasksPage } from './tasks.js';

const main = document.getElementById('main');
const top = document.getElementById('top');
let cleanup = null;
let me = null;
let loginMessage = '';

export function go(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

// The namespace shown when the URL names none: the controller's own, else the user's first.
async function defaultNamespace() {
  if (!me) me = (await api('api/v1/me')).user;
  let n = '';
  try {
    n = (await api('api/v1/info')).namespace || '';
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
  }
  const mine = (me.namespaces || []).filter((x) => x !== '*');
  if (n && (me.admin || mine.includes(n) || (me.namespaces || []).includes('*'))) return n;
  return mine[0] || n || 'default';
}

export function unauthorized(msg) {
  clearToken();
  me = null;
  loginMessage = msg || 'Your token was refused by the API (401 Unauthorized). Log in again.';
  go('#/login');
}

function fail(e) {
  if (e instanceof Unauthorized) return unauthorized(e.message);
  clear(main).append(h('h1', {}, 'Something went wrong'),
    h('p', { class: 'error', role: 'alert' }, String(e && e.message ? e.message : e)),
    h('p', {}, h('a', { href: '#/' }, 'Back to the experiments')));
}

async function render() {
  if (cleanup) cleanup();
  cleanup = null;
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  if (parts[0] === 'login' || !token()) {
    top.hidden = true;
    const msg = loginMessage || (parts[0] === 'login' ? '' : '');
    loginMessage = '';
    cleanup = loginPage(main, msg, async () => {
      me = null;
      go('#/');
    });
    return;
  }
  top.hidden = false;
  const ctx = { main, go, fail, unauthorized };
  try {
    const who = () => { document.getElementById('who').textContent = me.name + (me.admin ? ' (admin)' : ''); };
    if (me) who();
    else {
      /* A page of a namespace does not wait for the user's name: it asks its own data meanwhile. */
      const asked = api('api/v1/me').then((j) => { me = j.user; who(); });
      if (parts[0] === 'ns' && parts[1]) asked.catch(fail);
      else await asked;
    }
    if (parts[0] !== 'ns' || !parts[1]) {
      // #/models, #/models/NAME, #/tasks, #/jobs: the same page in the default namespace.
      const rest = ['models', 'tasks', 'jobs'].includes(parts[0]) ? '/' + parts.map(encodeURIComponent).join('/') : '';
      go('#/ns/' + encodeURIComponent(await defaultNamespace()) + rest);
      return;
    }
    const ns = parts[1];
    const nsHash = '#/ns/' + encodeURIComponent(ns);
    const nav = { experiments: '', jobs: '/jobs', models: '/models', tasks: '/tasks' };
    for (const [k, v] of Object.entries(nav)) {
      const a = document.getElementById('nav-' + k);
      a.setAttribute('href', nsHash + v);
      const on = k === 'experiments' ? !['jobs', 'models', 'tasks'].includes(parts[2]) : parts[2] === k;
      if (on) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    if (parts[2] === 'experiments' && parts[3]) cleanup = experimentPage(ctx, ns, parts[3]);
    else if (parts[2] === 'trials' && parts[3]) cleanup = trialPage(ctx, ns, parts[3]);
    else if (parts[2] === 'jobs') cleanup = jobsPage(ctx, ns);
    else if (parts[2] === 'models' && parts[3]) cleanup = modelPage(ctx, ns, parts[3]);
    else if (parts[2] === 'models') cleanup = modelsPage(ctx, ns);
    else if (parts[2] === 'tasks') cleanup = tasksPage(ctx, ns);
    else cleanup = experimentsPage(ctx, ns);
  } catch (e) {
    fail(e);
  }
}

document.getElementById('logout').addEventListener('click', () => {
  clearToken();
  me = null;
  loginMessage = 'Logged out.';
  go('#/login');
});
window.addEventListener('hashchange', render);
window.addEventListener('unhandledrejection', (ev) => {
  if (ev.reason instanceof Unauthorized) {
    ev.preventDefault();
    unauthorized(ev.reason.message);
  }
});
render();
