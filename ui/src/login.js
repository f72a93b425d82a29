// The login page: a user token (as `det` uses: `det user create`, `det token create`, or
// the file `det deploy local up` writes), checked with GET /api/v1/me before it is kept
// in sessionStorage for this tab.
import { setToken, clearToken, Unauthorized } from './api.js';
import { h, clear } from './dom.js';

export function loginPage(main, message, done) {
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'current-password',
    required: true, spellcheck: 'false', 'aria-describedby': 'token-help' });
  const status = h('p', { id: 'login-error', class: 'error', role: 'alert' }, message || '');
  const button = h('button', { type: 'submit' }, 'Log in');
  const form = h('form', { class: 'login', onsubmit: submit },
    h('h1', {}, 'Log in to kdet'),
    h('label', { for: 'token' }, 'API token'),
    input,
    h('p', { id: 'token-help', class: 'muted' },
      'A user token, as det uses (KDET_API_TOKEN; det deploy local up writes one to its data folder). ',
      'It is kept for this browser tab only.'),
    button, status);
  clear(main).append(form);
  main.dataset.page = 'login';

  async function submit(ev) {
    ev.preventDefault();
    const t = input.value.trim();
    if (!t) {
      status.textContent = 'Enter a token.';
      return;
    }
    button.disabled = true;
    status.textContent = '';
    setToken(t);
    try {
      const r = await fetch('api/v1/me', { headers: { Authorization: 'Bearer ' + t }, cache: 'no-store' });
      if (r.status === 401) throw new Unauthorized('The API refused this token (401 Unauthorized). Check it and try again.');
      if (!r.ok) throw new Error('The API answered ' + r.status + ' ' + r.statusText);
      done();
    } catch (e) {
      clearToken();
      status.textContent = e instanceof Unauthorized ? e.message : 'Cannot log in: ' + e.message;
      button.disabled = false;
      input.focus();
      input.select();
    }
  }
  return () => {};
}
