// bench/ui's browser part: opens the experiment page of EXP in headless Chromium with the
// token already in sessionStorage, and reports from the navigation's start: first render
// (the page's mark kdet:trials: the trials table drawn), interactive, the bytes the page
// received (Chrome's encodedDataLength, so gzip counts as sent), the requests, and the table
// rows in the DOM. Interactive is when the main content is drawn and the page answers input:
// the page's mark kdet:ready (set in the frame after the one that drew the table and every
// trial's curves, so that frame was painted), moved past any long task (over 50 ms, from
// Chrome's longtask entries) that starts within 500 ms of it, until 500 ms pass without one;
// then a real mouse move over a chart is timed from the event to its handler (input delay).
// Then, in the same page, the anchor: the first slice's way of reading the history (two
// requests per trial, up to 1,000 points each), timed and summed without drawing, and the
// ratio of interactive to it.
// Usage: node bench.mjs URL TOKEN EXP N CHROMIUM
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const [url, token, exp, n, chromium] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../../ui/package.json'));
const puppeteer = require('puppeteer-core');

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  defaultViewport: { width: 1280, height: 900 },
});
let rc = 0;
try {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.evaluateOnNewDocument((t) => {
    sessionStorage.setItem('kdet.token', t);
    window.kdLong = [];
    new PerformanceObserver((l) => {
      for (const e of l.getEntries()) window.kdLong.push([e.startTime, e.startTime + e.duration]);
    }).observe({ type: 'longtask', buffered: true });
    window.kdInput = [];
    document.addEventListener('pointermove', (e) => window.kdInput.push(performance.now() - e.timeStamp), { capture: true, passive: true });
  }, token);
  const cdp = await page.createCDPSession();
  await cdp.send('Network.enable');
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
  let bytes = 0, reqs = 0;
  const started = new Map(), timeline = [];
  cdp.on('Network.requestWillBeSent', (e) => started.set(e.requestId, { url: e.request.url, t: e.timestamp }));
  cdp.on('Network.loadingFinished', (e) => {
    bytes += e.encodedDataLength;
    reqs++;
    const s = started.get(e.requestId);
    if (s) timeline.push({ url: s.url.replace(/^https?:\/\/[^/]+\//, '/').slice(0, 90), t0: s.t, t1: e.timestamp, kb: e.encodedDataLength / 1024 });
  });
  const target = url.replace(/\/$/, '') + '/#/ns/default/experiments/' + encodeURIComponent(exp);
  await page.goto(target, { waitUntil: 'domcontentloaded' });
  await page.waitForFunction(() => document.querySelector('#trials tr.vrow'), { timeout: 120000, polling: 'raf' });
  const first = await page.evaluate(() => performance.getEntriesByName('kdet:trials')[0]?.startTime ?? performance.now());
  await page.waitForFunction(() => document.querySelector('main[data-ready="1"]') &&
    document.querySelectorAll('#charts .chart canvas').length >= document.querySelectorAll('#charts .chart').length &&
    document.querySelectorAll('#charts .chart').length > 0, { timeout: 300000, polling: 'raf' });
  const mark = await page.evaluate(() => performance.getEntriesByName('kdet:ready')[0]?.startTime ?? performance.now());
  const bytesReady = bytes, reqsReady = reqs;
  // A quiet window of 500 ms after the mark: long tasks starting in it move interactive to their end.
  const QUIET = 500;
  let ready = mark, longs = [];
  for (;;) {
    const wait = ready + QUIET - await page.evaluate(() => performance.now());
    if (wait > 0) await new Promise((r) => setTimeout(r, wait + 20));
    longs = await page.evaluate(() => window.kdLong);
    const next = longs.filter(([a, b]) => b > ready && a < ready + QUIET).reduce((m, [, b]) => Math.max(m, b), ready);
    if (next === ready) break;
    ready = next;
  }
  const after = longs.filter(([a]) => a >= mark).map(([a, b]) => (b - a).toFixed(0));
  // A real input: the mouse over the first chart (uPlot follows it with its cursor).
  const over = await page.$('#charts .chart .u-over');
  await page.$eval('#charts .chart', (c) => c.scrollIntoView({ block: 'center' }));
  const ob = await over.boundingBox();
  for (let i = 0; i < 5; i++) await page.mouse.move(ob.x + ob.width * (0.2 + 0.15 * i), ob.y + ob.height / 2);
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
  const input = await page.evaluate(() => window.kdInput.slice());
  const dom = await page.evaluate(() => ({
    rows: document.querySelectorAll('#trials tr.vrow').length,
    all: Number(document.querySelector('#trials .vscroll')?.dataset.rows || 0),
    points: Number(document.querySelector('#charts')?.dataset.points || 0),
    charts: document.querySelectorAll('#charts .chart').length,
  }));
  if (process.env.KDU_BENCH_VERBOSE && timeline.length) {
    const z = Math.min(...timeline.map((x) => x.t0));
    for (const x of timeline.sort((a, b) => a.t0 - b.t0))
      console.log(`  ${((x.t0 - z) * 1000).toFixed(0).padStart(6)} .. ${((x.t1 - z) * 1000).toFixed(0).padStart(6)} ms ${x.kb.toFixed(0).padStart(6)} KiB ${x.url}`);
  }
  // Scroll to the end of the table: still only the rows in view.
  await page.evaluate(() => { const b = document.querySelector('#trials .vscroll'); b.scrollTop = b.scrollHeight; });
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r()))));
  const end = await page.evaluate(() => ({
    rows: document.querySelectorAll('#trials tr.vrow').length,
    last: document.querySelector('#trials tr.vrow:last-child td')?.textContent || '',
  }));
  console.log(`page: first render ${first.toFixed(0)} ms, interactive ${ready.toFixed(0)} ms (goal < 1000 ms), ` +
    `${(bytesReady / 1024).toFixed(0)} KiB in ${reqsReady} requests`);
  console.log(`page: drawn at ${mark.toFixed(0)} ms (kdet:ready), long tasks from then: ${after.length ? after.join(', ') + ' ms' : 'none'}; ` +
    `input delay of a mouse move over a chart: ${input.length ? Math.max(...input).toFixed(0) + ' ms at most of ' + input.length : 'no event seen'}`);
  console.log(`page: ${dom.all} trials, ${dom.rows} rows in the DOM (${end.rows} after scrolling to the end, last ${end.last}), ` +
    `${dom.charts} charts, ${dom.points} points drawn`);
  if (errors.length) { console.log('page errors: ' + errors.join('; ')); rc = 1; }
  if (dom.all !== Number(n)) { console.log(`expected ${n} trials in the table, found ${dom.all}`); rc = 1; }
  if (process.env.KDU_BENCH_ANCHOR === '0') throw Object.assign(new Error('anchor skipped'), { skip: true });
  // The anchor: what the first slice fetched, 2 requests per trial, 6 at a time (HTTP/1.1's limit).
  const anchor = await page.evaluate(async (exp) => {
    const t = sessionStorage.getItem('kdet.token');
    const base = 'api/v1/namespaces/default/';
    const get = (p) => fetch(p, { headers: { Authorization: 'Bearer ' + t }, cache: 'no-store' });
    const j = await (await get(base + 'experiments/' + exp)).json();
    const names = j.trials.map((x) => x.name);
    const t0 = performance.now();
    const jobs = [];
    for (const nm of names) for (const k of ['validation', 'training']) jobs.push(base + 'trials/' + nm + '/metrics?kind=' + k + '&max_points=1000');
    let size = 0, i = 0;
    await Promise.all(Array.from({ length: 6 }, async () => {
      while (i < jobs.length) {
        const r = await get(jobs[i++]);
        size += (await r.arrayBuffer()).byteLength;
      }
    }));
    return { ms: performance.now() - t0, size, requests: jobs.length };
  }, exp);
  console.log(`anchor (first slice: 2 requests per trial): ${anchor.requests} requests, ${(anchor.size / 1024).toFixed(0)} KiB, ` +
    `${anchor.ms.toFixed(0)} ms to fetch them (no drawing)`);
  console.log(`ratio: interactive / anchor = ${(ready / anchor.ms).toFixed(3)}`);
} catch (e) {
  if (e && e.skip) console.log('anchor: skipped (KDU_BENCH_ANCHOR=0)');
  else {
  console.log('bench ui failed: ' + (e && e.stack ? e.stack : e));
  rc = 1;
  }
} finally {
  await browser.close();
}
process.exit(rc);
