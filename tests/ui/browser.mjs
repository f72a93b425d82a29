// The web UI's pages in headless Chromium (puppeteer-core from ui/node_modules), against the
// controller that tests/ui/browser.sh started with experiment ui-exp running. Prints
// "ok - ..." / "FAIL - ..." per check and "# browser done" at the end.
// Usage: node browser.mjs URL TOKEN ARTIFACT_DIR CHROMIUM CHECKPOINT_UUID TASK
// (CHECKPOINT_UUID: the checkpoint of the finished trial ui-reg-1; TASK: a running command
// task that serves HTTP through the proxy.) Downloads go to ARTIFACT_DIR/downloads, which
// browser.sh compares with what the checkpoint's worker uploaded.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const [url, token, art, chromium, ckptUuid, taskName] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../../ui/package.json'));
const puppeteer = require('puppeteer-core');

let failed = 0;
function check(what, cond, detail) {
  if (cond) console.log('ok - ' + what);
  else {
    failed++;
    console.log('FAIL - ' + what + (detail !== undefined ? ': ' + detail : ''));
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitTrue(page, fn, timeout, ...args) {
  try {
    await page.waitForFunction(fn, { timeout, polling: 200 }, ...args);
    return true;
  } catch (e) {
    return false;
  }
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  defaultViewport: { width: 1280, height: 900 },
});
const downloads = path.join(art, 'downloads');
fs.mkdirSync(downloads, { recursive: true });
// A download is whole once its file is there and Chromium's .crdownload is gone.
async function downloaded(name, timeout) {
  const file = path.join(downloads, name);
  for (let t = 0; t < timeout; t += 200) {
    if (fs.existsSync(file) && !fs.readdirSync(downloads).some((f) => f.endsWith('.crdownload'))) return fs.statSync(file).size;
    await sleep(200);
  }
  return -1;
}
try {
  const page = await browser.newPage();
  // The pages redraw their tables on each poll (every 5 s), so an element found by a selector
  // can be replaced before Puppeteer acts on it ("Node is detached from document"). Such an
  // action is tried again on the element the selector finds then; any other error is real.
  const again = async (act) => {
    for (let i = 0; ; i++) {
      try {
        return await act();
      } catch (e) {
        if (i >= 10 || !/detached/i.test(e.message)) throw e;
        await sleep(100);
      }
    }
  };
  const click = (sel, opts) => again(() => page.click(sel, opts));
  const focus = (sel) => again(() => page.focus(sel));
  const type = (sel, text) => again(() => page.type(sel, text));
  const shot = (sel, file) => again(async () => (await page.$(sel)).screenshot({ path: path.join(art, file) }));
  const cdp = await page.createCDPSession();
  await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: downloads });
  const errors = [];
  page.on('pageerror', (e) => errors.push('pageerror: ' + e.message));
  page.on('console', (m) => {
    // A refused request (the 401s this test provokes) is logged by Chromium; anything else is a bug.
    if (m.type() === 'error' && !/status of 401|Failed to load resource/.test(m.text())) errors.push(m.text());
  });

  // ---- no token: the login page, and the API refuses
  await page.goto(url + '/', { waitUntil: 'load' });
  check('no token: the login page', await waitTrue(page, () => document.querySelector('main[data-page=login] #token'), 10000));
  const me401 = await page.evaluate(async () => (await fetch('api/v1/me')).status);
  check('no token: the API answers 401 (' + me401 + ')', me401 === 401);
  check('the token input has a label', await page.evaluate(() => {
    const l = document.querySelector('label[for=token]');
    return !!l && l.textContent.trim().length > 0;
  }));
  check('the login page has a heading', await page.evaluate(() => !!document.querySelector('h1')));
  await page.screenshot({ path: path.join(art, 'login.png') });

  // ---- keyboard: Tab focuses the input first, Enter submits; a wrong token is refused
  await page.keyboard.press('Tab');
  check('Tab focuses the token input first', await page.evaluate(() => document.activeElement && document.activeElement.id === 'token'),
    await page.evaluate(() => document.activeElement && document.activeElement.outerHTML.slice(0, 80)));
  await page.keyboard.type('kdet_1_not-a-real-token');
  await page.keyboard.press('Enter');
  check('a wrong token: an error message naming the 401', await waitTrue(page,
    () => /401/.test(document.getElementById('login-error')?.textContent || ''), 10000),
  await page.evaluate(() => document.getElementById('login-error')?.textContent));
  check('a wrong token is not kept', await page.evaluate(() => sessionStorage.getItem('kdet.token') === null));
  check('still on the login page', await page.evaluate(() => document.querySelector('main').dataset.page === 'login'));

  // ---- the right token, typed and submitted with the keyboard
  await page.evaluate(() => { document.getElementById('token').value = ''; });
  await focus('#token');
  await page.keyboard.type(token);
  await page.keyboard.press('Enter');
  check('a valid token: the experiments list', await waitTrue(page, () => document.querySelector('main[data-page=experiments] table'), 15000));
  check('the token is kept in sessionStorage', await page.evaluate((t) => sessionStorage.getItem('kdet.token') === t, token));
  check('the experiment is listed', await waitTrue(page, () => [...document.querySelectorAll('tbody a')].some((a) => a.textContent.startsWith('ui-exp')), 10000));
  const heads = await page.evaluate(() => [...document.querySelectorAll('thead th')].map((t) => t.textContent.replace(/[▲▼]/g, '').trim()));
  check('the columns: ' + heads.join(', '), ['ID', 'Name', 'State', 'Progress', 'Best metric', 'Searcher', 'Owner', 'Labels'].every((c) => heads.includes(c)));
  const row = await page.evaluate(() => [...[...document.querySelectorAll('tbody tr')]
    .find((tr) => [...tr.querySelectorAll('a')].some((a) => a.textContent === 'ui-exp')).children].map((td) => td.textContent));
  check('its row shows the searcher and the labels (' + row.join(' | ') + ')', row.includes('grid') && row.some((c) => c.includes('ui-test') && c.includes('browser')));
  check('its state is ACTIVE', row.includes('ACTIVE'));
  await type('#filter', 'no-such-experiment');
  check('the filter hides what does not match', await waitTrue(page, () => document.querySelectorAll('tbody tr').length === 0, 3000));
  await page.evaluate(() => { const f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input')); });
  await type('#filter', 'ui-test');
  check('the filter finds it by label', await waitTrue(page, () => document.querySelectorAll('tbody tr').length === 1, 3000));
  await click('button.sort[data-key=name]');
  check('a column header sorts (aria-sort)', await page.evaluate(() =>
    document.querySelector('button.sort[data-key=name]').closest('th').getAttribute('aria-sort') !== 'none'));
  await page.screenshot({ path: path.join(art, 'experiments.png'), fullPage: true });

  // ---- the experiment page: trials and live curves
  await click('#experiments tbody a');
  check('the experiment page', await waitTrue(page, () => document.querySelector('main[data-page=experiment]'), 10000));
  check('its trials table lists both trials', await waitTrue(page, () => document.querySelectorAll('#trials tbody tr').length === 2, 15000));
  check('trial rows show hyperparameters', await page.evaluate(() => /lr=/.test(document.querySelector('#trials tbody').textContent)));
  const sel = '.chart[data-kind=training][data-metric=loss]';
  check('a learning curve of loss is drawn', await waitTrue(page, (s) => {
    const c = document.querySelector(s);
    return c && c.querySelector('canvas') && Number(c.dataset.points) > 2 && Number(c.dataset.series) === 2;
  }, 20000, sel));
  check('a curve of validation_loss too', await waitTrue(page, () => document.querySelector('.chart[data-metric=validation_loss] canvas'), 10000));
  check('the stream is live', await waitTrue(page, () => /live/.test(document.querySelector('.live').textContent), 10000));
  await page.evaluate(() => { window.kdNoReload = 1; });
  const before = await page.$eval(sel, (c) => Number(c.dataset.points));
  const grew = await waitTrue(page, (s, n) => Number(document.querySelector(s).dataset.points) > n, 20000, sel, before);
  const after = await page.$eval(sel, (c) => Number(c.dataset.points));
  check('new points appear without a reload (' + before + ' -> ' + after + ')', grew && after > before);
  check('... the page was not reloaded', await page.evaluate(() => window.kdNoReload === 1));
  check('the hyperparameter view: a scatter of lr against validation_loss with both trials', await waitTrue(page, () => {
    const sc = document.querySelector('#hparams svg.scatter[data-hparam=lr]');
    return sc && sc.querySelectorAll('circle').length === 2 && /validation_loss against lr/.test(sc.getAttribute('aria-label'));
  }, 30000), await page.evaluate(() => document.getElementById('hparams')?.textContent.slice(0, 200)));
  check('... and parallel coordinates, one line per trial, coloured by the metric', await page.evaluate(() => {
    const ls = document.querySelectorAll('#parallel polyline');
    return ls.length === 2 && ls[0].getAttribute('stroke') !== ls[1].getAttribute('stroke');
  }));
  check('... under a heading', await page.evaluate(() => Array.from(document.querySelectorAll('h2')).some((e) => e.textContent === 'Hyperparameters')));
  await shot('#hparams', 'hparams.png');
  await click('#logscale');
  check('log scale: the curves are redrawn', await waitTrue(page, (s) => document.querySelector(s + ' canvas') && Number(document.querySelector(s).dataset.points) > 0, 5000, sel));
  await click('#logscale');
  await sleep(300);
  await page.screenshot({ path: path.join(art, 'experiment.png'), fullPage: true });

  // ---- zoom: dragging across a chart asks the steps in view again, in detail
  // Drag across the middle half of a chart's plot area; the range the page read back.
  const dragZoom = async (s) => {
    await page.$eval(s, (c) => c.scrollIntoView({ block: 'center' }));
    const box = await (await page.$(s + ' .u-over')).boundingBox();
    const y = box.y + box.height / 2;
    await page.mouse.move(box.x + box.width * 0.25, y);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.75, y, { steps: 8 });
    await page.mouse.up();
    return waitTrue(page, (q) => document.querySelector(q).dataset.refined && !document.querySelector(q).dataset.loading, 20000, s);
  };
  check('a zoom reads the steps in view again (' + await page.$eval(sel, (c) => c.dataset.points) + ' points)',
    await dragZoom(sel), await page.$eval(sel, (c) => JSON.stringify(c.dataset)));
  check('... zoomed', await page.$eval(sel, (c) => c.dataset.zoomed === '1'));
  await click('.curve:has(' + sel + ') button');
  check('... and "Reset zoom" draws them all again', await waitTrue(page, (q) =>
    !document.querySelector(q).dataset.zoomed && Number(document.querySelector(q).dataset.points) > 2, 5000, sel));

  // ---- forty trials: no legend, one path per colour; a zoom reads the range in detail
  await page.evaluate(() => { location.hash = '#/ns/default/experiments/ui-many'; });
  const many = '.chart[data-kind=training][data-metric=loss]';
  check('ui-many: 40 trials in the table', await waitTrue(page, () => document.querySelector('#trials .vscroll')?.dataset.rows === '40', 20000));
  // A redraw (a sort here; a poll's news while trials run) keeps the table where it was scrolled,
  // and paints the rows in view there: ten rows of margin above row 20 make a 340 px spacer.
  const kept = await page.evaluate(async () => {
    const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    const box = document.querySelector('#trials .vscroll');
    box.scrollTop = 700;
    await frame();
    document.querySelector('#trials button.sort[data-key=state]').click();
    await frame();
    const now = document.querySelector('#trials .vscroll');
    return { same: now === box, top: now.scrollTop, pad: now.querySelector('tr.vpad td')?.style.height };
  });
  check('ui-many: a redraw of the trials table keeps its scroll position (' + JSON.stringify(kept) + ')',
    !kept.same && kept.top === 700 && kept.pad === '340px');
  await page.$eval('#trials .vscroll', (b) => { b.scrollTop = 0; });
  check('ui-many: the loss chart draws 40 trials without a legend', await waitTrue(page, (q) => {
    const c = document.querySelector(q);
    return c && c.dataset.mode === 'many' && c.dataset.series === '40' && c.querySelector('canvas') && !c.querySelector('.u-legend') &&
      Number(c.dataset.points) > 40 * 2;
  }, 20000, many), await page.evaluate((q) => JSON.stringify(document.querySelector(q)?.dataset), many));
  const p0 = await page.$eval(many, (c) => Number(c.dataset.points));
  check('... its overview keeps fewer than the 80,000 points, at least two a bucket (' + p0 + ')', p0 < 80000 && p0 >= 40 * 250 * 2);
  check('... and its validation_loss chart every validation (40 x 20)', await waitTrue(page, () =>
    document.querySelector('.chart[data-metric=validation_loss]')?.dataset.points === '800', 10000));
  check('ui-many: a zoom reads the steps in view again', await dragZoom(many));
  const p1 = await page.$eval(many, (c) => Number(c.dataset.points));
  check('... with more points than the overview had there (' + p0 + ' -> ' + p1 + ')', p1 > p0);
  const refined = await page.$eval(many, (c) => c.dataset.refined.split('-').map(Number));
  check('... a range of steps inside 1..2000 (' + refined.join('-') + ')', refined[0] > 0 && refined[1] < 2000 && refined[0] < refined[1]);
  await click('.curve:has(' + many + ') button');
  check('... and "Reset zoom" zooms out', await waitTrue(page, (q) => !document.querySelector(q).dataset.zoomed, 5000, many));
  await page.screenshot({ path: path.join(art, 'many.png'), fullPage: true });
  await page.evaluate(() => { location.hash = '#/ns/default/experiments/ui-exp'; });
  check('back to ui-exp', await waitTrue(page, () => document.querySelectorAll('#trials tbody tr.vrow').length === 2, 15000));

  // ---- a trial page: metrics and live logs
  await click('#trials tbody a');
  check('the trial page', await waitTrue(page, () => document.querySelector('main[data-page=trial]'), 10000));
  check('its metrics chart', await waitTrue(page, () => {
    const c = document.querySelector('.chart[data-metric=loss]');
    return c && Number(c.dataset.points) > 2;
  }, 15000));
  check('its logs are shown', await waitTrue(page, () => /step \d+ loss/.test(document.getElementById('logs').textContent), 20000));
  const n0 = await page.$eval('#logs', (p) => Number(p.dataset.lines));
  check('new log lines arrive while the page is open', await waitTrue(page, (n) => Number(document.getElementById('logs').dataset.lines) > n, 15000, n0));
  await type('#log-search', 'step 20 loss');
  check('the search box keeps the matching lines only', await waitTrue(page, () => {
    const t = document.getElementById('logs').textContent;
    return t.length > 0 && t.split('\n').every((l) => l.includes('step 20 loss'));
  }, 5000), await page.$eval('#logs', (p) => p.textContent.slice(0, 200)));
  await page.evaluate(() => { const f = document.getElementById('log-search'); f.value = ''; f.dispatchEvent(new Event('input')); });
  check('follow is on', await page.$eval('#log-follow', (c) => c.checked));
  check('the search box has a label', await page.evaluate(() => !!document.querySelector('label[for=log-search]')));
  await sleep(500);
  await page.screenshot({ path: path.join(art, 'trial.png'), fullPage: true });

  // ---- the model registry: register the finished trial ui-reg-1's checkpoint from its page
  // (browser.sh checks det model describe after), then the models list and the model's page
  await page.evaluate(() => { location.hash = '#/ns/default/trials/ui-reg-1'; });
  const reg = 'button[data-action=register][data-uuid="' + ckptUuid + '"]';
  check('the finished trial\'s page lists its checkpoint with a Register button', await waitTrue(page,
    (s) => document.querySelector('main[data-page=trial]') && document.querySelector(s), 15000, reg),
  await page.evaluate(() => document.getElementById('checkpoints')?.textContent.slice(0, 200)));
  check('... with its batches and state', await page.evaluate((u) => {
    const r = document.querySelector('#checkpoints tr[data-uuid="' + u + '"]');
    return !!r && r.children[1].textContent === '10' && r.children[2].textContent === 'ACTIVE';
  }, ckptUuid));
  // ---- the finished trial's history: what the store recorded about it, oldest first (the
  // searcher's close when it reached max_length; the searcher's first decisions, made as the
  // experiment starts, are not recorded as events)
  const histRows = () => page.$$eval('#history tbody tr', (rs) => rs.map((r) => ({ id: Number(r.dataset.id), at: r.dataset.at,
    kind: r.dataset.kind, decision: r.dataset.decision, reason: r.querySelector('.col-reason').textContent,
    time: r.querySelector('.col-at').textContent })));
  const inOrder = (hs) => hs.every((e, i) => i === 0 || (e.id > hs[i - 1].id && Date.parse(e.at) >= Date.parse(hs[i - 1].at)));
  const timed = (hs) => hs.every((e) => /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/.test(e.time));
  check('the finished trial\'s history lists its events', await waitTrue(page, () =>
    Number(document.getElementById('history')?.dataset.events) >= 1, 15000),
  await page.evaluate(() => document.getElementById('history')?.textContent.slice(0, 300)));
  const hist = await histRows();
  const decisions = hist.map((e) => e.kind + '/' + e.decision);
  check('... the searcher\'s close, with its reason (' + JSON.stringify(hist) + ')',
    hist.some((e) => e.kind === 'searcher' && e.decision === 'close' && /max_length/.test(e.reason)));
  check('... oldest first, each with its time', inOrder(hist) && timed(hist), JSON.stringify(hist));
  const states = hist.filter((e) => e.kind === 'trial').map((e) => e.decision);
  // QUEUED is left out when the scheduler admitted the trial before its first status was written
  // (a loaded machine): its first state is then ACTIVE, from (new).
  check('... its state changes: [QUEUED,] ACTIVE, COMPLETED (' + states.join(' ') + ')', /^(QUEUED )?ACTIVE COMPLETED$/.test(states.join(' ')));
  check('... each saying from what to what', hist.some((e) => e.kind === 'trial' && e.decision === 'ACTIVE' &&
      (states[0] === 'QUEUED' ? /QUEUED -> ACTIVE/ : /\(new\) -> ACTIVE/).test(e.reason)) &&
    hist.some((e) => e.kind === 'trial' && e.decision === 'COMPLETED' && /ACTIVE -> COMPLETED/.test(e.reason)));
  check('... the close before the end', hist.findIndex((e) => e.decision === 'close') < hist.findIndex((e) => e.decision === 'COMPLETED'));
  check('... and no experiment-wide shutdown', !decisions.includes('searcher/shutdown'));
  check('the history has a heading', await page.evaluate(() => /History/.test(document.getElementById('history-title')?.textContent || '')));
  await shot('#history-section', 'history.png');

  // ---- "Download" on the checkpoint: a one-minute link, followed by the browser's download
  // manager (the archive is compared with the uploaded files by browser.sh)
  const dlc = 'button[data-action=download][data-uuid="' + ckptUuid + '"]';
  check('the checkpoint has a Download button', await page.evaluate((s) => !!document.querySelector(s), dlc));
  await click(dlc);
  check('... which says what it downloads', await waitTrue(page, (u) =>
    new RegExp('Downloading checkpoint ' + u + ' as ' + u + '\\.tar \\([0-9.]+ KB, 2 files\\)').test(document.getElementById('register-result').textContent), 10000, ckptUuid),
  await page.evaluate(() => document.getElementById('register-result').textContent));
  const csize = await downloaded(ckptUuid + '.tar', 20000);
  check('... and the browser saves ' + ckptUuid + '.tar (' + csize + ' bytes)', csize > 70000);

  await click(reg);
  check('Register opens the form naming the checkpoint, its model field focused', await waitTrue(page, (u) =>
    !document.getElementById('register-form').hidden && document.getElementById('register-what').textContent.includes(u) &&
    document.activeElement && document.activeElement.id === 'register-model', 5000, ckptUuid));
  check('the model field has a label', await page.evaluate(() => !!document.querySelector('label[for=register-model]')));
  await page.keyboard.type('bad name!');
  await page.keyboard.press('Enter');
  check('an invalid model name: the API\'s refusal is shown (400, naming name)', await waitTrue(page, () => {
    const e = document.querySelector('#register-result [role=alert]');
    return e && /400/.test(e.textContent) && /\bname\b/.test(e.textContent);
  }, 10000), await page.evaluate(() => document.getElementById('register-result').textContent));
  await page.$eval('#register-model', (i) => { i.value = ''; });
  await type('#register-model', 'ui-model');
  await click('#register-form button[type=submit]');
  check('a new model name: the model is made and the checkpoint is its version 1', await waitTrue(page, () =>
    /Made model ui-model; registered checkpoint .* as version 1 of model ui-model/.test(document.getElementById('register-result').textContent), 10000),
  await page.evaluate(() => document.getElementById('register-result').textContent));
  check('... and the checkpoint shows as kept by a model', await waitTrue(page, (u) =>
    /yes/.test(document.querySelector('#checkpoints tr[data-uuid="' + u + '"]')?.textContent || ''), 10000, ckptUuid));
  await click(reg);
  check('the existing model is offered in the list', await waitTrue(page, () =>
    Array.from(document.querySelectorAll('#model-names option')).some((o) => o.value === 'ui-model'), 5000));
  await page.$eval('#register-model', (i) => { i.value = ''; });
  await type('#register-model', 'ui-model');
  await page.keyboard.press('Enter');
  check('an existing model: the checkpoint becomes its version 2', await waitTrue(page, () =>
    /^Registered checkpoint .* as version 2 of model ui-model/.test(document.getElementById('register-result').textContent), 10000),
  await page.evaluate(() => document.getElementById('register-result').textContent));
  await shot('#checkpoints-section', 'checkpoints.png');

  await click('#register-link');
  check('the link goes to the model\'s page', await waitTrue(page, () =>
    document.querySelector('main[data-page=model]') && document.querySelectorAll('#versions tbody tr').length === 2, 10000));
  const v1 = await page.evaluate(() => {
    const r = document.querySelector('#versions tr[data-version="1"]');
    if (!r) return null;
    const t = r.querySelector('.col-trial a');
    const e = r.querySelector('.col-experiment a');
    return { uuid: r.querySelector('.col-checkpoint').textContent, trial: t && t.getAttribute('href'), exp: e && e.getAttribute('href'),
      batches: r.querySelector('.col-batches').textContent, metrics: r.querySelector('.col-metrics').textContent,
      dl: r.querySelector('.col-actions button[data-action=download]')?.title,
      cli: document.getElementById('versions-cli').textContent };
  });
  check('version 1: its checkpoint uuid', v1 && v1.uuid.includes(ckptUuid), JSON.stringify(v1));
  check('... the trial it came from, linked (' + (v1 && v1.trial) + ')', v1 && v1.trial === '#/ns/default/trials/ui-reg-1');
  check('... its experiment, linked', v1 && v1.exp === '#/ns/default/experiments/ui-reg');
  check('... batches 10 and the validation captured at registration', v1 && v1.batches === '10' && /validation_loss=0\.25/.test(v1.metrics));
  check('... and how to download it: a button, and the det command in its title and under the table',
    v1 && v1.dl === 'Save ui-model-v1.tar; det model download ui-model:1 restores the same files' &&
    /det model download ui-model:VERSION restores the same files/.test(v1.cli), v1 && v1.dl);
  await click('#versions tr[data-version="1"] button[data-action=download]');
  check('"Download" on version 1 says what it downloads', await waitTrue(page, () =>
    /Downloading version 1 of model ui-model as ui-model-v1\.tar \([0-9.]+ KB, 2 files\)/.test(document.getElementById('model-said').textContent), 10000),
  await page.evaluate(() => document.getElementById('model-said').textContent));
  const vsize = await downloaded('ui-model-v1.tar', 20000);
  check('... and the browser saves ui-model-v1.tar (' + vsize + ' bytes)', vsize > 70000);

  // ---- editing ui-model from its page: labels and metadata, version 2's name, comment and
  // labels (browser.sh checks them with det model describe); the API's refusals shown
  const apiJson = (p) => page.evaluate(async (q) => {
    const r = await fetch('api/v1/namespaces/default/' + q, { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('kdet.token') } });
    return r.json();
  }, p);
  const saidText = () => page.evaluate(() => document.getElementById('model-said').textContent);
  const setField = (sel, v) => page.$eval(sel, (el, x) => { el.removeAttribute('maxlength'); el.value = x; }, v);
  await click('#model-edit');
  check('"Edit": description, labels and metadata, each labelled', await waitTrue(page, () =>
    !document.getElementById('model-edit-form').hidden && ['model-desc', 'model-labels', 'model-metadata']
      .every((id) => document.getElementById(id) && document.querySelector('label[for=' + id + ']')), 3000));
  check('... the metadata shown as JSON', await page.$eval('#model-metadata', (t) => JSON.stringify(JSON.parse(t.value)) === '{}'));
  await setField('#model-labels', 'vision, ' + 'x'.repeat(200));
  await click('#model-desc-save');
  check('a label too long: the API\'s 400 naming labels[1], the form stays open', await waitTrue(page, () =>
    /400: labels\[1\]/.test(document.querySelector('#model-said [role=alert]')?.textContent || '') &&
    !document.getElementById('model-edit-form').hidden, 10000), await saidText());
  await setField('#model-labels', 'vision, prod');
  await setField('#model-metadata', '{"framework": "torch",');
  await click('#model-desc-save');
  check('metadata that is not JSON: said, naming metadata, nothing sent', await waitTrue(page, () =>
    /metadata: not JSON/.test(document.querySelector('#model-said [role=alert]')?.textContent || ''), 5000), await saidText());
  await setField('#model-metadata', '[1, 2]');
  await click('#model-desc-save');
  check('metadata that is not an object: the API\'s 400 naming metadata', await waitTrue(page, () =>
    /400: metadata/.test(document.querySelector('#model-said [role=alert]')?.textContent || ''), 10000), await saidText());
  const unchanged = await apiJson('models/ui-model');
  check('... nothing was changed by the refusals', JSON.stringify(unchanged.model.labels || []) === '[]' &&
    JSON.stringify(unchanged.model.metadata || {}) === '{}', JSON.stringify(unchanged.model));
  await setField('#model-metadata', '{"framework": "torch", "layers": 3}');
  await click('#model-desc-save');
  check('Save: the labels and the metadata (only what changed is sent)', await waitTrue(page, () =>
    /Saved the labels, metadata of model ui-model/.test(document.getElementById('model-said').textContent) &&
    document.getElementById('model-edit-form').hidden, 10000), await saidText());
  check('... shown on the page', await waitTrue(page, () => {
    const t = document.getElementById('model-summary').textContent;
    return /Labels\s*visionprod/.test(t) && /"framework":"torch"/.test(t) && /"layers":3/.test(t);
  }, 10000), await page.evaluate(() => document.getElementById('model-summary').textContent));
  const changed = await apiJson('models/ui-model');
  check('... and by the API', JSON.stringify(changed.model.labels) === '["vision","prod"]' && changed.model.metadata.layers === 3,
    JSON.stringify(changed.model));
  await click('#versions tr[data-version="2"] button[data-action=edit-version]');
  check('a version\'s "Edit": its name, comment and labels, labelled, the name focused', await waitTrue(page, () =>
    !document.getElementById('version-edit-form').hidden && document.activeElement?.id === 'version-name' &&
    /Version 2 of model ui-model/.test(document.getElementById('version-edit-what').textContent) &&
    ['version-name', 'version-comment', 'version-labels'].every((id) => document.querySelector('label[for=' + id + ']')), 3000));
  await setField('#version-name', 'n'.repeat(300));
  await click('#version-save');
  check('a name too long: the API\'s 400 naming name', await waitTrue(page, () =>
    /400: name/.test(document.querySelector('#model-said [role=alert]')?.textContent || '') &&
    !document.getElementById('version-edit-form').hidden, 10000), await saidText());
  await setField('#version-name', 'best');
  await setField('#version-comment', 'the one to ship');
  await setField('#version-labels', ' candidate ,');
  await click('#version-save');
  check('Save: version 2\'s name, comment and labels', await waitTrue(page, () =>
    /Saved the name, comment, labels of version 2 of model ui-model/.test(document.getElementById('model-said').textContent) &&
    document.getElementById('version-edit-form').hidden, 10000), await saidText());
  check('... shown in its row (name, labels and comment columns appear)', await waitTrue(page, () => {
    const r = document.querySelector('#versions tr[data-version="2"]');
    return r && r.querySelector('.col-name')?.textContent === 'best' && r.querySelector('.col-comment')?.textContent === 'the one to ship' &&
      r.querySelector('.col-labels')?.textContent === 'candidate';
  }, 10000));
  const v2 = await apiJson('models/ui-model/versions/2');
  check('... and by the API', v2.version.name === 'best' && v2.version.comment === 'the one to ship' &&
    JSON.stringify(v2.version.labels) === '["candidate"]', JSON.stringify(v2.version));
  await click('#versions tr[data-version="1"] button[data-action=edit-version]');
  await page.waitForFunction(() => document.activeElement?.id === 'version-name', { timeout: 3000 });
  await shot('#version-edit-form', 'version-edit.png');
  await click('#version-cancel');
  check('Cancel closes the version\'s form', await page.evaluate(() => document.getElementById('version-edit-form').hidden));
  check('the model\'s owner and version count', await page.evaluate(() =>
    /Versions\s*2/.test(document.getElementById('model-summary').textContent)));
  await page.$eval('#versions', (b) => { b.scrollLeft = 0; }); /* the edits scrolled it to their buttons */
  await page.screenshot({ path: path.join(art, 'model.png'), fullPage: true });
  await click('#versions tr[data-version="1"] .col-trial a');
  check('the version\'s trial link opens the trial\'s page', await waitTrue(page, () =>
    document.querySelector('main[data-page=trial]') && /ui-reg-1/.test(document.querySelector('h1').textContent), 10000));

  await click('#nav-models');
  check('"Models" in the navigation: the models list', await waitTrue(page, () =>
    document.querySelector('main[data-page=models]') && document.querySelector('#models tr[data-model=ui-model]'), 10000));
  check('... marked as the current page', await page.$eval('#nav-models', (a) => a.getAttribute('aria-current') === 'page'));
  const mrow = await page.$eval('#models tr[data-model=ui-model]', (r) => [...r.children].map((td) => td.textContent));
  check('its row: name, 2 versions, latest 2 (' + mrow.join(' | ') + ')', mrow[0] === 'ui-model' && mrow[3] === '2' && mrow[4] === '2');
  check('the invalid name made no model', await page.evaluate(() => document.querySelectorAll('#models tbody tr').length === 1));
  await type('#model-filter', 'no-such-model');
  check('a filter that excludes it hides it', await waitTrue(page, () => !document.querySelector('#models tr[data-model=ui-model]') &&
    /0 of 1/.test(document.querySelector('main [role=status]').textContent), 3000));
  await page.evaluate(() => { const f = document.getElementById('model-filter'); f.value = ''; f.dispatchEvent(new Event('input')); });
  await type('#model-filter', 'UI-MOD');
  check('a filter that matches it (any case) shows it', await waitTrue(page, () => !!document.querySelector('#models tr[data-model=ui-model]'), 3000));
  await page.screenshot({ path: path.join(art, 'models.png'), fullPage: true });
  await page.evaluate(() => { location.hash = '#/models/no-such-model'; });
  check('#/models/NAME goes to the default namespace; an unknown model says so', await waitTrue(page, () =>
    location.hash === '#/ns/default/models/no-such-model' && /404/.test(document.querySelector('#versions [role=alert]')?.textContent || ''), 10000),
  await page.evaluate(() => location.hash + ' ' + document.getElementById('main').textContent.slice(0, 200)));

  // ---- editing a model on its page: a second model ui-edit, made through the API with two
  // versions of the same checkpoint (ui-model stays as it is for det model describe)
  let asked = '';
  const made = await page.evaluate(async (u) => {
    const hd = { Authorization: 'Bearer ' + sessionStorage.getItem('kdet.token'), 'Content-Type': 'application/json' };
    const post = (p, b) => fetch('api/v1/namespaces/default/' + p, { method: 'POST', headers: hd, body: JSON.stringify(b) }).then((r) => r.status);
    return [await post('models', { name: 'ui-edit', description: 'first words' }),
      await post('models/ui-edit/versions', { checkpoint_uuid: u }), await post('models/ui-edit/versions', { checkpoint_uuid: u })];
  }, ckptUuid);
  check('a model ui-edit with two versions made through the API (' + made.join(' ') + ')', made.join(' ') === '201 201 201');
  await page.evaluate(() => { location.hash = '#/ns/default/models/ui-edit'; });
  const descOf = () => page.evaluate(() => Array.from(document.querySelectorAll('#model-summary div'))
    .filter((d) => d.querySelector('dt').textContent === 'Description').map((d) => d.querySelector('dd').textContent)[0] ?? '');
  check('the model page offers its edits', await waitTrue(page, () => document.querySelector('main[data-page=model]') &&
    !document.getElementById('model-actions').hidden && document.querySelectorAll('#versions tbody tr').length === 2, 10000));
  check('... its description', (await descOf()) === 'first words', await descOf());
  await click('#model-edit');
  check('"Edit": the form, holding the description, focused', await waitTrue(page, () =>
    !document.getElementById('model-edit-form').hidden && document.activeElement?.id === 'model-desc' &&
    document.getElementById('model-desc').value === 'first words', 3000));
  check('... its field has a label', await page.evaluate(() => !!document.querySelector('label[for=model-desc]')));
  await page.keyboard.type(' never saved');
  await click('#model-desc-cancel');
  await sleep(500);
  check('Cancel: the form closes, the description unchanged', await page.evaluate(() => document.getElementById('model-edit-form').hidden) &&
    (await descOf()) === 'first words', await descOf());
  await click('#model-edit');
  await page.$eval('#model-desc', (t) => { t.removeAttribute('maxlength'); t.value = 'x'.repeat(5000); });
  await click('#model-desc-save');
  check('a description too long: the API\'s refusal is shown (400, naming description)', await waitTrue(page, () =>
    /400/.test(document.querySelector('#model-said [role=alert]')?.textContent || '') &&
    /description/.test(document.querySelector('#model-said [role=alert]').textContent), 10000),
  await page.evaluate(() => document.getElementById('model-said').textContent));
  check('... the form stays open, the description unchanged', await page.evaluate(() => !document.getElementById('model-edit-form').hidden) &&
    (await descOf()) === 'first words');
  await page.$eval('#model-desc', (t) => { t.value = ''; });
  await type('#model-desc', 'a <b>new</b> description');
  await click('#model-desc-save');
  check('Save: the new description is shown (as text)', await waitTrue(page, () =>
    document.getElementById('model-edit-form').hidden && Array.from(document.querySelectorAll('#model-summary dd'))
      .some((d) => d.textContent === 'a <b>new</b> description' && !d.querySelector('b')), 10000), await descOf());
  await page.reload({ waitUntil: 'load' });
  check('... and after a reload', await waitTrue(page, () => Array.from(document.querySelectorAll('#model-summary dd'))
    .some((d) => d.textContent === 'a <b>new</b> description'), 10000), await descOf());
  await page.waitForSelector('#model-archive');
  await click('#model-archive');
  check('"Archive": the model shows as archived, the button says "Unarchive"', await waitTrue(page, () =>
    /Archived\s*yes/.test(document.getElementById('model-summary').textContent) &&
    document.getElementById('model-archive').textContent === 'Unarchive', 10000));
  await click('#nav-models');
  check('an archived model is left out of the models list', await waitTrue(page, () =>
    document.querySelector('main[data-page=models]') && document.querySelector('#models tr[data-model=ui-model]') &&
    !document.querySelector('#models tr[data-model=ui-edit]'), 10000));
  await click('#model-archived');
  check('... and listed, marked archived, with "Show archived"', await waitTrue(page, () =>
    /\(archived\)/.test(document.querySelector('#models tr[data-model=ui-edit]')?.textContent || ''), 10000));
  await click('#models tr[data-model=ui-edit] a');
  await page.waitForFunction(() => document.querySelector('main[data-page=model]') &&
    document.getElementById('model-archive')?.textContent === 'Unarchive', { timeout: 10000 });
  await click('#model-archive');
  check('"Unarchive": no longer archived', await waitTrue(page, () =>
    !/Archived/.test(document.getElementById('model-summary').textContent) &&
    document.getElementById('model-archive').textContent === 'Archive', 10000));
  await click('#nav-models');
  check('... and in the default models list again', await waitTrue(page, () =>
    document.querySelector('main[data-page=models]') && !document.getElementById('model-archived').checked &&
    document.querySelector('#models tr[data-model=ui-edit]'), 10000));
  await click('#models tr[data-model=ui-edit] a');
  const delv = '#versions tr[data-version="1"] button[data-action=delete-version]';
  await page.waitForSelector(delv, { timeout: 10000 });
  page.once('dialog', (d) => d.dismiss());
  await click(delv);
  await sleep(1500);
  check('"Delete" on a version asks first; dismissed, both versions stay', await page.evaluate(() =>
    document.querySelectorAll('#versions tbody tr').length === 2));
  asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.accept(); });
  await click(delv);
  check('... accepted, version 1 is gone and version 2 stays', await waitTrue(page, () =>
    !document.querySelector('#versions tr[data-version="1"]') && !!document.querySelector('#versions tr[data-version="2"]'), 10000),
  await page.evaluate(() => document.getElementById('model-said').textContent));
  check('... the question named the version (' + asked + ')', /version 1 of model ui-edit/.test(asked));
  const v1gone = await page.evaluate(async () => (await fetch('api/v1/namespaces/default/models/ui-edit/versions/1',
    { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('kdet.token') } })).status);
  check('... and the API answers 404 for it (' + v1gone + ')', v1gone === 404);
  await page.screenshot({ path: path.join(art, 'model-edit.png'), fullPage: true });
  page.once('dialog', (d) => d.dismiss());
  await click('#model-delete');
  await sleep(1500);
  check('"Delete model" asks first; dismissed, the page stays', await page.evaluate(() =>
    location.hash === '#/ns/default/models/ui-edit' && document.querySelectorAll('#versions tbody tr').length === 1));
  asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.accept(); });
  await click('#model-delete');
  check('... accepted, the models list without it', await waitTrue(page, () =>
    location.hash === '#/ns/default/models' && document.querySelector('main[data-page=models]') &&
    document.querySelector('#models tr[data-model=ui-model]') && !document.querySelector('#models tr[data-model=ui-edit]'), 10000),
  await page.evaluate(() => location.hash));
  check('... the question named the model (' + asked + ')', /model ui-edit/.test(asked));
  await click('#model-archived');
  check('... not even among the archived ones', await waitTrue(page, () => document.getElementById('model-archived').checked &&
    document.querySelector('#models tr[data-model=ui-model]') && !document.querySelector('#models tr[data-model=ui-edit]'), 10000));
  await click('#model-archived');

  // ---- the job queue: reorder and priority from the page (browser.sh checks det job list after)
  await page.evaluate(() => { location.hash = '#/ns/default/jobs'; });
  check('the job queue page', await waitTrue(page, () => document.querySelector('main[data-page=jobs]'), 10000));
  check('it lists the queued experiments jq-a and jq-b', await waitTrue(page,
    () => document.querySelector('#jobs tr[data-job=jq-a]') && document.querySelector('#jobs tr[data-job=jq-b]'), 15000));
  const order = () => page.evaluate(() => Array.from(document.querySelectorAll('#jobs tbody tr')).map((r) => r.dataset.job)
    .filter((n) => n === 'jq-a' || n === 'jq-b').join(' '));
  check('jq-a before jq-b (submission order)', (await order()) === 'jq-a jq-b', await order());
  check('the running experiment shows its GPUs in use', await page.evaluate(() =>
    /2 of 2/.test(document.querySelector('#jobs tr[data-job=ui-exp]')?.textContent || '')));
  check('the queue has a heading and labelled priority fields', await page.evaluate(() =>
    /Job queue/.test(document.querySelector('h1').textContent) && !!document.querySelector('input[aria-label="priority of jq-a"]')));
  const up = 'button[data-job=jq-b][data-move=up]';
  check('jq-b has a button to move it ahead of jq-a', await page.$eval(up, (b) => b.getAttribute('aria-label')) === 'Move jq-b ahead of jq-a');
  await focus(up);
  await page.keyboard.press('Enter');
  check('after "Up" (keyboard), jq-b comes before jq-a', await waitTrue(page, () => {
    const n = Array.from(document.querySelectorAll('#jobs tbody tr')).map((r) => r.dataset.job);
    return n.indexOf('jq-b') >= 0 && n.indexOf('jq-b') < n.indexOf('jq-a');
  }, 10000), await order());
  check('... and the page says what changed', /ahead of jq-a/.test(await page.$eval('main [role=status]', (e) => e.textContent)));
  await page.$eval('input[aria-label="priority of jq-a"]', (i) => { i.value = ''; });
  await type('input[aria-label="priority of jq-a"]', '60');
  await page.keyboard.press('Enter');
  check('a priority set from the page (jq-a: 60)', await waitTrue(page,
    () => document.querySelector('input[aria-label="priority of jq-a"]')?.value === '60' && /priority 60/.test(document.querySelector('main [role=status]').textContent), 10000));
  await sleep(300);
  await page.screenshot({ path: path.join(art, 'jobs.png'), fullPage: true });

  // ---- the tasks page: the command task, "Open" through the proxy, "Kill" after a confirm()
  // (browser.sh checks the task's end after)
  await click('#nav-tasks');
  const trow = '#tasks tr[data-task="' + taskName + '"]';
  check('"Tasks" in the navigation: the task is listed, RUNNING', await waitTrue(page, (s) =>
    document.querySelector('main[data-page=tasks]') && document.querySelector(s)?.dataset.state === 'RUNNING', 15000, trow),
  await page.evaluate(() => document.getElementById('tasks')?.textContent.slice(0, 300)));
  const tcells = await page.$eval(trow, (r) => Object.fromEntries([...r.children].map((td) => [td.className.replace('col-', ''), td.textContent])));
  check('its kind, owner, slots and age (' + JSON.stringify(tcells) + ')', tcells.kind === 'command' && tcells.slots === '0' &&
    /ui test server/.test(tcells.name) && /^\d+[smhd]$/.test(tcells.age) && tcells.owner !== '');
  check('it serves HTTP: an "Open" link to its proxy path', await page.$eval(trow + ' a.open', (a) => a.getAttribute('href')) === 'proxy/' + taskName + '/');
  const opened = new Promise((res) => browser.once('targetcreated', (t) => res(t)));
  await click(trow + ' a.open');
  let tab = null;
  try {
    tab = await (await Promise.race([opened, sleep(10000).then(() => null)]))?.page();
  } catch (e) { /* checked below */ }
  check('"Open" opens a new tab', !!tab);
  if (tab) {
    check('... which reaches the task through the proxy (signed in by the ticket\'s cookie)', await waitTrue(tab, (n) =>
      location.pathname === '/proxy/' + n + '/' && !location.search && /hello from task/.test(document.body?.textContent || ''), 15000, taskName),
    await tab.evaluate(() => location.href + ' ' + (document.body?.textContent || '').slice(0, 200)).catch((e) => e.message));
    await tab.close();
  }
  await page.screenshot({ path: path.join(art, 'tasks.png'), fullPage: true });
  page.once('dialog', (d) => d.dismiss());
  await click(trow + ' button[data-action=kill]');
  await sleep(1500);
  check('"Kill" asks first; dismissed, the task keeps running', await page.evaluate((s) =>
    document.querySelector(s)?.dataset.state === 'RUNNING', trow));
  asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.accept(); });
  await click(trow + ' button[data-action=kill]');
  check('... accepted, the task is killed and leaves the list of live ones', await waitTrue(page, (s) => !document.querySelector(s), 30000, trow),
    await page.evaluate(() => document.querySelector('main [role=status]').textContent));
  check('... the question named the task (' + asked + ')', asked.includes(taskName));
  await click('#tasks-ended');
  check('"Show ended tasks": it is TERMINATED, Killed', await waitTrue(page, (s) =>
    document.querySelector(s)?.dataset.state === 'TERMINATED' && /Killed/.test(document.querySelector(s).textContent), 10000, trow));

  // ---- a live trial's history while its page is open: ui-exp-2's state changes so far
  // (QUEUED, ACTIVE); killed through the API, its early_exit event (recorded with the trial's
  // id) and the end of its state show up, by the page's polling
  await page.evaluate(() => { location.hash = '#/ns/default/trials/ui-exp-2'; });
  check('a running trial\'s page: its history drawn', await waitTrue(page, () =>
    document.querySelector('main[data-page=trial]') && /ui-exp-2/.test(document.querySelector('h1').textContent) &&
    !/Loading/.test(document.getElementById('history').textContent), 15000));
  const hBefore = await histRows();
  check('... "No events yet" exactly when it has none (' + hBefore.length + ')', await page.evaluate((n) =>
    (n === 0) === /No events yet/.test(document.getElementById('history').textContent), hBefore.length));
  const killed = await page.evaluate(async () => (await fetch('api/v1/namespaces/default/trials/ui-exp-2/kill',
    { method: 'POST', headers: { Authorization: 'Bearer ' + sessionStorage.getItem('kdet.token') } })).status);
  check('ui-exp-2 killed through the API (' + killed + ')', killed === 200);
  check('... its early_exit appears in the open page\'s history, with the reason', await waitTrue(page, () =>
    Array.from(document.querySelectorAll('#history tbody tr')).some((r) => r.dataset.kind === 'trial' &&
      r.dataset.decision === 'early_exit' && /killed by the user/.test(r.textContent)), 20000),
  await page.evaluate(() => document.getElementById('history').textContent.slice(0, 300)));
  await sleep(6000); /* what the searcher decides after it, if anything, by the next poll */
  const hAfter = await histRows();
  check('... after the events it had, oldest first (' + hAfter.map((e) => e.kind + '/' + e.decision).join(' ') + ')',
    hAfter.length > hBefore.length && inOrder(hAfter) && timed(hAfter) &&
    JSON.stringify(hAfter.slice(0, hBefore.length)) === JSON.stringify(hBefore), JSON.stringify(hAfter));
  check('... each event once', new Set(hAfter.map((e) => e.id)).size === hAfter.length);
  check('... its states before the kill: [QUEUED,] ACTIVE (' + hBefore.map((e) => e.decision).join(' ') + ')',
    /^(QUEUED )?ACTIVE$/.test(hBefore.filter((e) => e.kind === 'trial').map((e) => e.decision).join(' ')));
  check('... and after it, a state it ended in', await waitTrue(page, () =>
    Array.from(document.querySelectorAll('#history tbody tr')).some((r) => r.dataset.kind === 'trial' &&
      /^(CANCELED|ERROR|COMPLETED)$/.test(r.dataset.decision) && r.querySelector('.state')), 20000),
  await page.evaluate(() => document.getElementById('history').textContent.slice(0, 600)));

  // ---- the profiler: ui-act-1's worker posted system samples and timings (browser.sh); the
  // page draws one chart per group that has numbers, compared with what the API returns
  const apiGet = (p) => page.evaluate(async (q) => {
    const r = await fetch('api/v1/namespaces/default/' + q, { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('kdet.token') } });
    return r.json();
  }, p);
  const prof = (await apiGet('trials/ui-act-1/profiler')).samples || [];
  const num = (v) => typeof v === 'number' && isFinite(v);
  const sysS = prof.filter((x) => x.metrics.group === 'system').map((x) => x.metrics);
  const timS = prof.filter((x) => x.metrics.group === 'timing').map((x) => x.metrics);
  const phases = ['dataloader_next', 'to_device', 'train_batch', 'step_lr_schedulers', 'from_device', 'reduce_metrics']
    .filter((p) => timS.some((m) => num(m[p])));
  const want = [
    ['cpu', sysS.some((m) => num(m.cpu_util_pct))],
    ['memory', sysS.some((m) => num(m.memory_used_bytes) || num(m.memory_total_bytes))],
    ['network', sysS.some((m) => num(m.net_recv_bytes_per_s) || num(m.net_sent_bytes_per_s))],
    ['disk', sysS.some((m) => num(m.disk_read_bytes_per_s) || num(m.disk_write_bytes_per_s))],
    ['gpu-util', sysS.some((m) => (m.gpus || []).some((g) => num(g.util_pct) || num(g.memory_util_pct)))],
    ['gpu-memory', sysS.some((m) => (m.gpus || []).some((g) => num(g.memory_used_bytes)))],
    ['timing', phases.length > 0],
  ].filter(([, on]) => on).map(([g]) => g);
  check('the API has ui-act-1\'s profiler rows (' + sysS.length + ' system, ' + timS.length + ' timing; groups ' + want.join(' ') + ')',
    sysS.length > 0 && timS.length > 0 && want.length >= 2);
  await page.evaluate(() => { location.hash = '#/ns/default/trials/ui-act-1'; });
  check('the trial page draws a profiler chart per group, as many as the API\'s data has', await waitTrue(page, (n, w) => {
    const b = document.getElementById('profiler');
    return b && Number(b.dataset.samples) === n && b.querySelectorAll('canvas').length >= w.length &&
      Array.from(b.querySelectorAll('.chart')).map((c) => c.dataset.group).join(' ') === w.join(' ');
  }, 20000, prof.length, want), await page.evaluate(() => {
    const b = document.getElementById('profiler');
    return b && b.dataset.samples + ' samples; ' + Array.from(b.querySelectorAll('.chart')).map((c) => c.dataset.group + ':' + c.querySelectorAll('canvas').length).join(' ');
  }));
  const tchart = await page.evaluate(() => {
    const c = document.querySelector('#profiler .chart[data-group=timing]');
    return c && { series: Number(c.dataset.series), points: Number(c.dataset.points), legend: c.textContent };
  });
  const tpoints = timS.reduce((n, m) => n + phases.filter((p) => num(m[p])).length, 0);
  check('... the timings: one series per phase reported (' + phases.length + '), ' + tpoints + ' points against batches',
    !!tchart && tchart.series === phases.length && tchart.points === tpoints && phases.every((p) => tchart.legend.includes(p)) &&
    /batches/.test(tchart.legend), JSON.stringify(tchart));
  const cpuPts = await page.evaluate(() => Number(document.querySelector('#profiler .chart[data-group=cpu]')?.dataset.points));
  check('... the CPU chart: one point per system sample (' + cpuPts + ')', cpuPts === sysS.filter((m) => num(m.cpu_util_pct)).length);
  check('... no empty state', await page.evaluate(() => !/No profiler samples/.test(document.getElementById('profiler').textContent)));
  await shot('#profiler-section', 'profiler.png');
  const none = (await apiGet('trials/ui-reg-1/profiler')).samples || [];
  await page.evaluate(() => { location.hash = '#/ns/default/trials/ui-reg-1'; });
  check('a trial without profiler samples (the API has ' + none.length + '): the empty state, no chart', none.length === 0 &&
    await waitTrue(page, () => /ui-reg-1/.test(document.querySelector('h1')?.textContent || '') &&
      /No profiler samples: set profiling\.enabled in the experiment's config/.test(document.getElementById('profiler')?.textContent || '') &&
      !document.querySelector('#profiler canvas') && document.getElementById('profiler').dataset.charts === '0', 15000),
  await page.evaluate(() => document.getElementById('profiler')?.textContent));

  // ---- the experiment's actions on ui-act: Pause, Activate, a dismissed Cancel, Archive, Unarchive
  const expOf = async () => (await apiGet('experiments/ui-act')).experiment || {};
  await page.evaluate(() => { location.hash = '#/ns/default/experiments/ui-act'; });
  check('the running experiment offers Pause, Cancel and Archive, not Activate', await waitTrue(page, () =>
    document.querySelector('main[data-page=experiment]') && /ui-act/.test(document.querySelector('h1').textContent) &&
    !document.getElementById('exp-pause').hidden && document.getElementById('exp-activate').hidden &&
    !document.getElementById('exp-cancel').hidden && document.getElementById('exp-archive').textContent === 'Archive', 15000));
  check('Pause: the buttons are disabled while the request is in flight', await page.evaluate(() => {
    document.getElementById('exp-pause').click();
    return ['exp-pause', 'exp-activate', 'exp-cancel', 'exp-archive'].every((id) => document.getElementById(id).disabled);
  }));
  check('... the page says it paused it and offers Activate', await waitTrue(page, () =>
    /Paused experiment ui-act/.test(document.getElementById('exp-said').textContent) &&
    !document.getElementById('exp-activate').hidden && document.getElementById('exp-pause').hidden &&
    !document.getElementById('exp-activate').disabled, 10000), await page.evaluate(() => document.getElementById('exp-said').textContent));
  let st = '';
  for (let i = 0; i < 120 && st !== 'PAUSED'; i++) {
    const e = await expOf();
    st = (e.status && e.status.state) + '/' + (e.spec && e.spec.paused);
    if (st === 'PAUSED/true') st = 'PAUSED';
    else await sleep(500);
  }
  check('... the API: ui-act is PAUSED (' + st + ')', st === 'PAUSED');
  check('... and so does the page, by its next poll', await waitTrue(page, () =>
    /State\s*PAUSED/.test(document.querySelector('main .summary').textContent), 15000));
  await click('#exp-activate');
  st = '';
  for (let i = 0; i < 120 && st !== 'ACTIVE'; i++) {
    const e = await expOf();
    st = (e.status && e.status.state) + '/' + (e.spec && e.spec.paused);
    if (st === 'ACTIVE/false') st = 'ACTIVE';
    else await sleep(500);
  }
  check('Activate: the API says ACTIVE again (' + st + ')', st === 'ACTIVE');
  check('... the page too, offering Pause', await waitTrue(page, () =>
    /State\s*ACTIVE/.test(document.querySelector('main .summary').textContent) && !document.getElementById('exp-pause').hidden &&
    /Activated experiment ui-act/.test(document.getElementById('exp-said').textContent), 15000));
  check('... its learning curves leave out the profiler\'s rows', await page.evaluate(() =>
    !document.querySelector('#charts .chart[data-kind=profiling]')));
  asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
  await click('#exp-cancel');
  await sleep(1500);
  const afterCancel = await expOf();
  check('Cancel asks first (' + asked + '); dismissed, nothing changes', /Cancel experiment ui-act/.test(asked) &&
    afterCancel.spec.canceled !== true && afterCancel.status.state === 'ACTIVE' &&
    await page.evaluate(() => !document.getElementById('exp-cancel').hidden), JSON.stringify(afterCancel.spec));
  await click('#exp-archive');
  check('Archive: the button says Unarchive', await waitTrue(page, () => document.getElementById('exp-archive').textContent === 'Unarchive' &&
    !document.getElementById('exp-archive').disabled, 10000));
  check('... the API: archived', (await expOf()).spec.archived === true);
  await page.screenshot({ path: path.join(art, 'experiment-actions.png') });
  await click('#exp-archive');
  check('Unarchive: the button says Archive again', await waitTrue(page, () => document.getElementById('exp-archive').textContent === 'Archive' &&
    !document.getElementById('exp-archive').disabled, 10000));
  check('... the API: not archived', (await expOf()).spec.archived !== true);

  // ---- a token refused later (revoked while the page is open): the page's next request
  // gets 401 and the login page comes back, saying why
  await page.evaluate(() => sessionStorage.setItem('kdet.token', 'kdet_9_revoked-token'));
  check('a refused token: back to the login page', await waitTrue(page, () => document.querySelector('main[data-page=login]'), 15000));
  check('... with a message naming the 401', await waitTrue(page, () => /401/.test(document.getElementById('login-error')?.textContent || ''), 5000),
    await page.evaluate(() => document.getElementById('login-error')?.textContent));
  check('... and the refused token is dropped', await page.evaluate(() => sessionStorage.getItem('kdet.token') === null));

  check('no script errors in the page', errors.length === 0, errors.join(' | '));
} catch (e) {
  check('the browser script', false, e.stack);
} finally {
  await browser.close();
}
console.log('# browser done, ' + failed + ' failed');
