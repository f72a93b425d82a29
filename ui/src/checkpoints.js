// A trial's checkpoints on its page (GET .../trials/{t}/checkpoints: uuid, batches, state,
// size, when, whether a model version keeps it), "Download" on each ACTIVE one (a tar archive
// through a one-minute link, download.js) and "Register" on each ACTIVE one: a form
// under the table takes an existing model (a list of the namespace's models to pick from)
// or a new name; a new one is made first (POST .../models), then the checkpoint becomes its
// next version (POST .../models/{m}/versions), as `det model create` and
// `det model register-version` do. The result, or the API's refusal, is said under the form.
import { api, ns as nsPath } from './api.js';
import { h, clear, fmtTime, fmtBytes, alertText } from './dom.js';
import { modelHash } from './models.js';
import { download } from './download.js';

export function checkpointsSection(ctx, ns, trial, signal) {
  const base = nsPath(ns);
  const box = h('div', { class: 'table-box', id: 'checkpoints' }, h('p', { class: 'muted' }, 'Loading…'));
  const models = h('datalist', { id: 'model-names' });
  const modelInput = h('input', { id: 'register-model', type: 'text', list: 'model-names', autocomplete: 'off',
    required: true, placeholder: 'an existing model or a new name', 'aria-describedby': 'register-help' });
  const what = h('span', { id: 'register-what' });
  const result = h('p', { id: 'register-result', role: 'status', 'aria-live': 'polite' });
  const submit = h('button', { type: 'submit' }, 'Register');
  let uuid = '';
  let known = new Set();
  const form = h('form', { id: 'register-form', class: 'register', hidden: true, onsubmit: (ev) => register(ev) },
    h('fieldset', {},
      h('legend', {}, 'Register checkpoint ', what, ' as a new model version'),
      h('label', { for: 'register-model' }, 'Model'), modelInput, models, ' ', submit, ' ',
      h('button', { type: 'button', onclick: () => { form.hidden = true; } }, 'Cancel'),
      h('p', { id: 'register-help', class: 'muted' }, 'Pick a model of ', ns, ' or type a new name (letters, digits, ',
        h('code', {}, '. _ -'), ', starting with a letter or digit): it is made first.')));
  const el = h('section', { id: 'checkpoints-section' }, h('h2', {}, 'Checkpoints'), box, form, result);
  let seen = '';

  async function loadModels() {
    try {
      const j = await api(base + 'models?limit=1000&sort=name&archived=all', { signal });
      known = new Set((j.models || []).map((m) => m.name));
      clear(models).append(...Array.from(known).map((n) => h('option', { value: n })));
    } catch (e) {
      if (!signal.aborted && e.status !== 404) throw e;
    }
  }

  function open(c) {
    uuid = c.uuid;
    what.textContent = c.uuid + ' (' + (c.steps_completed ?? '?') + ' batches)';
    form.hidden = false;
    clear(result);
    loadModels().catch((e) => { if (!signal.aborted) ctx.fail(e); });
    modelInput.focus();
  }

  async function register(ev) {
    ev.preventDefault();
    const model = modelInput.value.trim();
    if (!model || !uuid) return;
    submit.disabled = true;
    clear(result).append('Registering…');
    try {
      let made = false;
      if (!known.has(model)) {
        try {
          await api(base + 'models', { method: 'POST', body: { name: model }, signal });
          made = true;
        } catch (e) {
          if (e.status !== 409) throw e; /* made meanwhile by someone else: register into it */
        }
      }
      const r = await api(base + 'models/' + encodeURIComponent(model) + '/versions',
        { method: 'POST', body: { checkpoint_uuid: uuid }, signal });
      const v = r.version || {};
      clear(result).append(made ? 'Made model ' + model + '; registered' : 'Registered', ' checkpoint ', uuid,
        ' as ', h('a', { href: modelHash(ns, model), id: 'register-link' }, 'version ' + (v.version ?? '?') + ' of model ' + model), '.');
      form.hidden = true;
      seen = '';
      await reload();
    } catch (e) {
      if (signal.aborted) return;
      clear(result).append(alertText('Cannot register checkpoint ' + uuid + ' in model ' + model + ': ' + e.message));
    } finally {
      submit.disabled = false;
    }
  }

  function fetchIt(c, btn) {
    download(base + 'checkpoints/' + encodeURIComponent(c.uuid) + '/download-link', btn, 'checkpoint ' + c.uuid,
      (msg, err) => clear(result).append(err ? alertText(msg) : msg), signal)
      .catch((e) => { if (!signal.aborted) ctx.fail(e); });
  }

  function draw(list) {
    if (!list.length) {
      clear(box).append(h('p', { class: 'muted empty' }, 'No checkpoints yet.'));
      return;
    }
    clear(box).append(h('table', {},
      h('caption', { class: 'visually-hidden' }, 'Checkpoints of trial ' + trial),
      h('thead', {}, h('tr', {}, ['Checkpoint', 'Batches', 'State', 'Size', 'Reported', 'In a model', ''].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, list.map((c) => h('tr', { dataset: { uuid: c.uuid } },
        h('td', {}, h('code', { class: 'uuid' }, c.uuid)),
        h('td', {}, String(c.steps_completed ?? '—')),
        h('td', {}, c.state || '—'),
        h('td', {}, fmtBytes(c.size_bytes)),
        h('td', {}, fmtTime(c.reported_at)),
        h('td', {}, c.protected ? 'yes' : ''),
        h('td', { class: 'actions' }, c.state === 'ACTIVE'
          ? [h('button', { type: 'button', class: 'small', dataset: { uuid: c.uuid, action: 'download' },
            'aria-label': 'Download checkpoint ' + c.uuid + ' as a tar archive', onclick: (ev) => fetchIt(c, ev.currentTarget) }, 'Download'), ' ',
          h('button', { type: 'button', class: 'small', dataset: { uuid: c.uuid, action: 'register' },
            'aria-label': 'Register checkpoint ' + c.uuid + ' in a model', onclick: () => open(c) }, 'Register')]
          : ''))))));
  }

  // The checkpoints again (when the trial changed, or after a registration).
  async function reload() {
    const j = await api(base + 'trials/' + encodeURIComponent(trial) + '/checkpoints', { signal });
    const text = JSON.stringify(j.checkpoints || []);
    if (text === seen) return;
    seen = text;
    draw(j.checkpoints || []);
  }
  return { el, reload };
}
