// kdet's web UI: a hash router over its pages (login, experiments, experiment, trial, jobs).
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
    if (!me) me = (await api('api/v1/me')).user;
    document.getElementById('who').textContent = me.name + (me.admin ? ' (admin)' : '');
    if (parts[0] !== 'ns' || !parts[1]) {
      go('#/ns/' + encodeURIComponent(await defaultNamespace()));
      return;
    }
    const ns = parts[1];
    document.getElementById('nav-experiments').setAttribute('href', '#/ns/' + encodeURIComponent(ns));
    document.getElementById('nav-jobs').setAttribute('href', '#/ns/' + encodeURIComponent(ns) + '/jobs');
    if (parts[2] === 'experiments' && parts[3]) cleanup = experimentPage(ctx, ns, parts[3]);
    else if (parts[2] === 'trials' && parts[3]) cleanup = trialPage(ctx, ns, parts[3]);
    else if (parts[2] === 'jobs') cleanup = jobsPage(ctx, ns);
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
