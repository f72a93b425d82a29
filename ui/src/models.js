// The model registry (docs/models.md): the models of a namespace (GET .../models: name,
// description, labels, versions, owner, last change; a filter box and sortable columns,
// archived ones on request; refreshed every 10 s) and one model (GET .../models/{m}: its
// fields and its versions, each with its checkpoint, the experiment and trial it came from
// (linked), batches, the validation metrics captured at registration, and "Download" (the
// det command that restores the same files is said under the table and in the button's title).
// The model's page also edits it: its description, labels and metadata (PATCH
// .../models/{m} with the fields changed), archived or not (PATCH {"archived"}), each
// version's name, comment and labels (PATCH .../models/{m}/versions/{v}), deleting the model
// (DELETE .../models/{m}) or one version (DELETE .../models/{m}/versions/{v}), each deletion
// after a confirm(); a refusal is shown as the API words it (e.g. "400: labels[1]: ...").
import { api, ns as nsPath } from './api.js';
import { h, clear, fmtTime, metricsText, sortableTable, alertText } from './dom.js';
import { download } from './download.js';

const LIST_LIMIT = 1000; // the API's most per request

const state = { sort: 'name', dir: 'asc', filter: '' };
const vstate = { sort: 'version', dir: 'desc' };

const labelsOf = (x) => (Array.isArray(x && x.labels) ? x.labels.map(String) : []);
// A labels field: comma-separated, blanks around each dropped, empty ones left out.
const parseLabels = (text) => text.split(',').map((l) => l.trim()).filter((l) => l !== '');
const sameList = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const labelList = (x) => labelsOf(x).map((l) => h('span', { class: 'label' }, l));
export const modelHash = (ns, name) => '#/ns/' + encodeURIComponent(ns) + '/models/' + encodeURIComponent(name);

export function modelsPage(ctx, ns) {
  const ac = new AbortController();
  const filter = h('input', { id: 'model-filter', type: 'search', value: state.filter,
    placeholder: 'name, description, label, owner…', oninput: () => { state.filter = filter.value; draw(); } });
  const archived = h('input', { id: 'model-archived', type: 'checkbox', onchange: () => { seen = ''; load(); } });
  const status = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' }, 'Loading…');
  const box = h('div', { class: 'table-box', id: 'models' });
  let rows = null;
  let seen = '';
  clear(ctx.main).append(
    h('h1', {}, 'Models ', h('span', { class: 'muted' }, 'in ' + ns)),
    h('p', { class: 'muted' }, 'Register a checkpoint from its trial\'s page (Checkpoints, "Register"), or with ',
      h('code', {}, 'det model register-version'), '.'),
    h('div', { class: 'toolbar' },
      h('label', { for: 'model-filter' }, 'Filter'), filter,
      h('label', { class: 'check' }, archived, ' Show archived')),
    box, status);
  ctx.main.dataset.page = 'models';

  const cols = [
    { key: 'name', label: 'Name', value: (m) => m.name,
      cell: (m) => h('a', { href: modelHash(ns, m.name) }, m.name, m.archived ? h('span', { class: 'muted' }, ' (archived)') : null) },
    { key: 'description', label: 'Description', value: (m) => m.description || '', cell: (m) => m.description || '' },
    { key: 'labels', label: 'Labels', value: (m) => labelsOf(m).join(','), cell: labelList },
    { key: 'versions', label: 'Versions', value: (m) => m.versions ?? 0, cell: (m) => String(m.versions ?? 0) },
    { key: 'latest', label: 'Latest', value: (m) => m.latest_version ?? 0,
      cell: (m) => (m.latest_version ? String(m.latest_version) : '—') },
    { key: 'owner', label: 'Owner', value: (m) => m.owner || '', cell: (m) => m.owner || '—' },
    { key: 'updated', label: 'Last updated', value: (m) => m.updated_at || '', cell: (m) => fmtTime(m.updated_at) },
  ];

  function matches(m) {
    const f = state.filter.trim().toLowerCase();
    if (!f) return true;
    const text = [m.name, m.description, m.owner, ...labelsOf(m)].join(' ').toLowerCase();
    return f.split(/\s+/).every((w) => text.includes(w));
  }

  function draw() {
    if (rows === null) return;
    const shown = rows.filter(matches);
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null;
    clear(box).append(rows.length
      ? sortableTable('Models of namespace ' + ns, cols, shown, state, draw, (m) => ({ dataset: { model: m.name } }))
      : h('p', { class: 'muted empty' }, 'No models in ' + ns + ' yet.'));
    if (focused) {
      const b = box.querySelector('button[data-key="' + focused + '"]');
      if (b) b.focus();
    }
    status.textContent = rows.length === 0 ? ''
      : shown.length + ' of ' + rows.length + ' models shown.' + (rows.length >= LIST_LIMIT ? ' (The first ' + LIST_LIMIT + ' by name.)' : '');
  }

  async function load() {
    try {
      const j = await api(nsPath(ns) + 'models?limit=' + LIST_LIMIT + '&sort=name' + (archived.checked ? '&archived=all' : ''),
        { signal: ac.signal });
      const text = JSON.stringify(j.models || []);
      if (text === seen) return; /* unchanged: keep the table (and the focus) as it is */
      seen = text;
      rows = j.models || [];
      draw();
    } catch (e) {
      if (!ac.signal.aborted) ctx.fail(e);
    }
  }
  load();
  const timer = setInterval(load, 10000);
  return () => {
    clearInterval(timer);
    ac.abort();
  };
}

// experiment name -> Map(trial uid -> trial name), from GET .../experiments/{e} (its trials'
// summaries carry their uid); an experiment that is gone maps to null. known is the answer
// for the versions as last read: an experiment in it is read again only when a version's
// trial is not there (a trial keeps its name; a running experiment may have a new one).
async function trialNames(ns, versions, signal, known) {
  const out = new Map();
  const exps = Array.from(new Set(versions.map((v) => v.experiment).filter((e) => typeof e === 'string' && e)));
  await Promise.all(exps.map(async (e) => {
    const had = known.get(e);
    if (had === null || (had && versions.every((v) => v.experiment !== e || !v.trial_uid || had.has(v.trial_uid)))) {
      out.set(e, had);
      return;
    }
    const m = new Map();
    out.set(e, m);
    try {
      const j = await api(nsPath(ns) + 'experiments/' + encodeURIComponent(e), { signal });
      for (const t of j.trials || []) if (t.uid && t.name) m.set(t.uid, t.name);
    } catch (err) {
      if (err.status !== 404) throw err; /* deleted since: no links, the captured fields stay */
      out.set(e, null);
    }
  }));
  return out;
}

export function modelPage(ctx, ns, name) {
  const ac = new AbortController();
  const summary = h('dl', { class: 'summary', id: 'model-summary' });
  const box = h('div', { class: 'table-box', id: 'versions' });
  const status = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' }, 'Loading…');
  const title = h('h1', {}, 'Model ', name);
  const cli = h('p', { class: 'muted', id: 'versions-cli' }, '"Download" saves a version\'s checkpoint as a tar archive; ',
    h('code', { class: 'cmd' }, 'det model download ' + name + ':VERSION'), ' restores the same files into a directory.');
  const mpath = nsPath(ns) + 'models/' + encodeURIComponent(name);
  const listHash = '#/ns/' + encodeURIComponent(ns) + '/models';
  const said = h('p', { id: 'model-said', role: 'status', 'aria-live': 'polite' });
  const desc = h('textarea', { id: 'model-desc', rows: '3', cols: '60', maxlength: '4096' });
  const labelsIn = h('input', { id: 'model-labels', type: 'text', autocomplete: 'off', 'aria-describedby': 'model-labels-help' });
  const meta = h('textarea', { id: 'model-metadata', rows: '4', cols: '60', spellcheck: 'false', 'aria-describedby': 'model-metadata-help' });
  const editForm = h('form', { id: 'model-edit-form', class: 'edit', hidden: true,
    onsubmit: (ev) => { ev.preventDefault(); guarded(saveModel()); } },
    h('label', { for: 'model-desc' }, 'Description'), h('br'), desc, h('br'),
    h('label', { for: 'model-labels' }, 'Labels'), h('br'), labelsIn,
    h('span', { id: 'model-labels-help', class: 'muted' }, ' comma-separated'), h('br'),
    h('label', { for: 'model-metadata' }, 'Metadata'), h('br'), meta,
    h('span', { id: 'model-metadata-help', class: 'muted' }, ' a JSON object'), h('br'),
    h('button', { type: 'submit', id: 'model-desc-save' }, 'Save'), ' ',
    h('button', { type: 'button', id: 'model-desc-cancel', onclick: () => { editForm.hidden = true; editBtn.focus(); } }, 'Cancel'));
  const metaText = (m) => JSON.stringify(m && typeof m === 'object' ? m : {}, null, 2);
  const editBtn = h('button', { type: 'button', id: 'model-edit', onclick: () => {
    desc.value = model.description || '';
    labelsIn.value = labelsOf(model).join(', ');
    meta.value = metaText(model.metadata);
    editForm.hidden = false;
    desc.focus();
  } }, 'Edit');
  // A version's name, comment and labels, in a form under the versions.
  let editing = 0;
  const vwhat = h('span', { id: 'version-edit-what' });
  const vname = h('input', { id: 'version-name', type: 'text', autocomplete: 'off', maxlength: '256' });
  const vcomment = h('textarea', { id: 'version-comment', rows: '2', cols: '60', maxlength: '4096' });
  const vlabels = h('input', { id: 'version-labels', type: 'text', autocomplete: 'off', 'aria-describedby': 'version-labels-help' });
  const vform = h('form', { id: 'version-edit-form', class: 'edit', hidden: true,
    onsubmit: (ev) => { ev.preventDefault(); guarded(saveVersion()); } },
    h('fieldset', {}, h('legend', {}, vwhat),
      h('label', { for: 'version-name' }, 'Name'), h('br'), vname, h('br'),
      h('label', { for: 'version-comment' }, 'Comment'), h('br'), vcomment, h('br'),
      h('label', { for: 'version-labels' }, 'Labels'), h('br'), vlabels,
      h('span', { id: 'version-labels-help', class: 'muted' }, ' comma-separated'), h('br'),
      h('button', { type: 'submit', id: 'version-save' }, 'Save'), ' ',
      h('button', { type: 'button', id: 'version-cancel', onclick: () => { vform.hidden = true; editing = 0; } }, 'Cancel')));
  const archiveBtn = h('button', { type: 'button', id: 'model-archive', onclick: () => guarded(setArchived(!model.archived)) }, 'Archive');
  const deleteBtn = h('button', { type: 'button', id: 'model-delete', class: 'danger', onclick: () => guarded(deleteModel()) }, 'Delete model');
  const actions = h('div', { class: 'toolbar', id: 'model-actions', hidden: true }, editBtn, archiveBtn, deleteBtn);
  clear(ctx.main).append(
    h('p', { class: 'crumbs' }, h('a', { href: listHash }, 'Models'), ' / ', name),
    title, summary, actions, editForm, said, h('h2', {}, 'Versions'), box, cli, vform, status);
  ctx.main.dataset.page = 'model';
  let seen = '';
  let versions = [];
  let model = {};
  let names = new Map();
  const nsHash = '#/ns/' + encodeURIComponent(ns);

  function tell(msg, error) {
    clear(said).append(error ? alertText(msg) : msg);
  }
  // One change through the API; true when it was made, else the refusal is shown.
  async function change(what, method, path, body) {
    try {
      await api(path, { method, body, signal: ac.signal });
      return true;
    } catch (e) {
      if (ac.signal.aborted) return false;
      if (e.status === undefined) throw e; /* 401 and the like: the page's own handling */
      tell('Cannot ' + what + ': ' + e.message, true);
      return false;
    }
  }
  async function refresh() {
    seen = '';
    await load();
  }
  // PATCH path with body, the fields of which (words) that changed, then close form; true when
  // saved. Only what changed goes to the API, so that a field someone else changed meanwhile
  // stays; nothing changed, nothing is sent.
  async function saveChanged(which, path, body, form) {
    const what = Object.keys(body).join(', ');
    if (!what) {
      form.hidden = true;
      tell('Nothing changed in ' + which + '.');
      return false;
    }
    if (!(await change('change the ' + what + ' of ' + which, 'PATCH', path, body))) return false;
    form.hidden = true;
    tell('Saved the ' + what + ' of ' + which + '.');
    await refresh();
    return true;
  }
  async function saveModel() {
    const body = {};
    if (desc.value !== (model.description || '')) body.description = desc.value;
    const labels = parseLabels(labelsIn.value);
    if (!sameList(labels, labelsOf(model))) body.labels = labels;
    if (meta.value.trim() !== metaText(model.metadata).trim()) {
      try {
        body.metadata = JSON.parse(meta.value.trim() === '' ? '{}' : meta.value);
      } catch (e) {
        tell('Cannot change model ' + name + ': metadata: not JSON (' + e.message + ')', true);
        meta.focus();
        return;
      }
    }
    await saveChanged('model ' + name, mpath, body, editForm);
  }
  function editVersion(v) {
    editing = v.version;
    vwhat.textContent = 'Version ' + v.version + ' of model ' + name;
    vname.value = v.name || '';
    vcomment.value = v.comment || '';
    vlabels.value = labelsOf(v).join(', ');
    clear(said);
    vform.hidden = false;
    vname.focus();
  }
  async function saveVersion() {
    const v = versions.find((x) => x.version === editing);
    if (!v) return;
    const body = {};
    if (vname.value !== (v.name || '')) body.name = vname.value;
    if (vcomment.value !== (v.comment || '')) body.comment = vcomment.value;
    const labels = parseLabels(vlabels.value);
    if (!sameList(labels, labelsOf(v))) body.labels = labels;
    const path = mpath + '/versions/' + encodeURIComponent(String(v.version));
    if (await saveChanged('version ' + v.version + ' of model ' + name, path, body, vform)) editing = 0;
  }
  const downloadVersion = (v, btn) => download(mpath + '/versions/' + encodeURIComponent(String(v)) + '/download-link', btn,
    'version ' + v + ' of model ' + name, tell, ac.signal);
  async function setArchived(on) {
    if (await change((on ? 'archive' : 'unarchive') + ' model ' + name, 'PATCH', mpath, { archived: on })) {
      tell((on ? 'Archived' : 'Unarchived') + ' model ' + name + '.');
      await refresh();
    }
  }
  async function deleteModel() {
    const n = versions.length;
    if (!window.confirm('Delete model ' + name + (n ? ' and its ' + n + ' version' + (n === 1 ? '' : 's') : '') +
      '? Their checkpoints are no longer kept from checkpoint GC.')) return;
    if (await change('delete model ' + name, 'DELETE', mpath)) ctx.go(listHash);
  }
  async function deleteVersion(v) {
    if (!window.confirm('Delete version ' + v + ' of model ' + name + '? Its checkpoint is no longer kept from checkpoint GC by it.')) return;
    if (await change('delete version ' + v + ' of model ' + name, 'DELETE', mpath + '/versions/' + encodeURIComponent(String(v)))) {
      tell('Deleted version ' + v + ' of model ' + name + '.');
      await refresh();
    }
  }
  const guarded = (p) => p.catch((e) => { if (!ac.signal.aborted) ctx.fail(e); });
  /* the API's name for a version's archive (controller/api/check.c, api_download_stem) */
  const dlName = (v) => name.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\./, '_') + '-v' + v + '.tar';

  const cols = [
    { key: 'version', label: 'Version', value: (v) => v.version, cell: (v) => String(v.version) },
    { key: 'name', label: 'Name', value: (v) => v.name || '', cell: (v) => v.name || '' },
    { key: 'checkpoint', label: 'Checkpoint', value: (v) => v.checkpoint_uuid,
      cell: (v) => h('span', {}, h('code', { class: 'uuid' }, v.checkpoint_uuid || ''),
        v.checkpoint_state && v.checkpoint_state !== 'ACTIVE' ? h('span', { class: 'muted' }, ' ' + v.checkpoint_state) : null,
        v.checkpoint_state === null ? h('span', { class: 'muted' }, ' (no longer in the registry)') : null) },
    { key: 'experiment', label: 'Experiment', value: (v) => v.experiment || '',
      cell: (v) => (v.experiment
        ? h('a', { href: nsHash + '/experiments/' + encodeURIComponent(v.experiment) }, v.experiment)
        : '—') },
    { key: 'trial', label: 'Trial', value: (v) => v.trial_id ?? '',
      cell: (v) => {
        const t = names.get(v.experiment) && names.get(v.experiment).get(v.trial_uid);
        if (t) return h('a', { href: nsHash + '/trials/' + encodeURIComponent(t), class: 'trial-link' }, t);
        return v.trial_id !== undefined && v.trial_id !== null ? '#' + v.trial_id : '—';
      } },
    { key: 'batches', label: 'Batches', value: (v) => v.steps_completed ?? '', cell: (v) => String(v.steps_completed ?? '—') },
    { key: 'metrics', label: 'Metrics', value: (v) => metricsText(v.metrics), cell: (v) => h('code', {}, metricsText(v.metrics)) },
    { key: 'labels', label: 'Labels', value: (v) => labelsOf(v).join(','), cell: labelList },
    { key: 'comment', label: 'Comment', value: (v) => v.comment || '', cell: (v) => v.comment || '' },
    { key: 'created', label: 'Created', value: (v) => v.created_at || '', cell: (v) => fmtTime(v.created_at) },
    { key: 'actions', label: 'Actions', value: () => '',
      cell: (v) => h('span', { class: 'actions' },
        v.checkpoint_state === 'ACTIVE'
          ? [h('button', { type: 'button', class: 'small', dataset: { action: 'download', version: String(v.version) },
            title: 'Save ' + dlName(v.version) + '; det model download ' + name + ':' + v.version + ' restores the same files',
            'aria-label': 'Download version ' + v.version + ' of model ' + name + ' as a tar archive',
            onclick: (ev) => guarded(downloadVersion(v.version, ev.currentTarget)) }, 'Download'), ' ']
          : null,
        h('button', { type: 'button', class: 'small', dataset: { action: 'edit-version', version: String(v.version) },
          'aria-label': 'Edit the name, comment and labels of version ' + v.version + ' of model ' + name, onclick: () => editVersion(v) }, 'Edit'), ' ',
        h('button', { type: 'button', class: 'small danger', dataset: { action: 'delete-version', version: String(v.version) },
          'aria-label': 'Delete version ' + v.version + ' of model ' + name, onclick: () => guarded(deleteVersion(v.version)) }, 'Delete')) },
  ];

  function drawSummary(m) {
    model = m;
    actions.hidden = false;
    archiveBtn.textContent = m.archived ? 'Unarchive' : 'Archive';
    const md = m.metadata && typeof m.metadata === 'object' && Object.keys(m.metadata).length ? JSON.stringify(m.metadata) : '';
    const items = [
      ['Description', m.description || ''],
      ['Labels', labelsOf(m).length ? labelList(m) : ''],
      ['Versions', String(m.versions ?? versions.length)],
      ['Owner', m.owner || ''],
      ['Archived', m.archived ? 'yes' : ''],
      ['Created', fmtTime(m.created_at)],
      ['Last updated', fmtTime(m.updated_at)],
      ['Metadata', md ? h('code', {}, md) : ''],
    ];
    clear(summary).append(...items.filter(([, v]) => v !== '').map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v))));
  }

  // Name, labels and comment are optional: a column none of the versions uses is left out.
  const used = (c) => !['name', 'labels', 'comment'].includes(c.key) ||
    versions.some((v) => (c.key === 'labels' ? labelsOf(v).length > 0 : !!v[c.key]));

  function draw() {
    clear(box).append(versions.length
      ? sortableTable('Versions of model ' + name, cols.filter(used), versions, vstate, draw, (v) => ({ dataset: { version: String(v.version) } }))
      : h('p', { class: 'muted empty' }, 'No versions yet: register a checkpoint from its trial\'s page.'));
  }

  async function load() {
    const j = await api(mpath, { signal: ac.signal });
    const text = JSON.stringify(j);
    if (text === seen) return;
    seen = text;
    versions = j.versions || [];
    names = await trialNames(ns, versions, ac.signal, names);
    drawSummary(j.model || {});
    draw();
    status.textContent = '';
  }
  load().catch((e) => {
    if (ac.signal.aborted) return;
    if (e.status === 404) {
      clear(summary);
      clear(box).append(h('p', { class: 'error', role: 'alert' }, 'No model ' + name + ' in ' + ns + ' (' + e.message + ').'));
      status.textContent = '';
      return;
    }
    ctx.fail(e);
  });
  const timer = setInterval(() => load().catch((e) => { if (!ac.signal.aborted && e.status !== 404) ctx.fail(e); }), 10000);
  return () => {
    clearInterval(timer);
    ac.abort();
  };
}
