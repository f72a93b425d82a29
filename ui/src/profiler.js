// A trial's profiler (GET .../trials/{t}/profiler, docs/python.md, *Profiling*): the
// nodes' system samples (CPU, memory, network, disk, and GPU utilisation and memory when
// there are GPUs) against the time each was taken, and the Trainer's mean seconds per phase
// against batches, one small chart per group. Read page by page with after=, polled with
// the trial page while the trial has not ended (and once more when it is first seen ended).
import { api } from './api.js';
import { h, clear } from './dom.js';
import { SmallChart } from './chart.js';

const PAGE = 5000; // the route's most per request
const ENDED = new Set(['COMPLETED', 'CANCELED', 'ERROR']);
export const PHASES = ['dataloader_next', 'to_device', 'train_batch', 'step_lr_schedulers', 'from_device', 'reduce_metrics'];

function fmtBytes(v) {
  const a = Math.abs(v);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (i < units.length - 1 && a >= 1024 ** (i + 1)) i++;
  return Number((v / 1024 ** i).toPrecision(3)) + ' ' + units[i];
}
const fmtRate = (v) => fmtBytes(v) + '/s';
const fmtPct = (v) => Number(v.toPrecision(3)) + '%';
function fmtSecs(v) {
  const a = Math.abs(v);
  if (a === 0) return '0';
  if (a < 1e-3) return Number((v * 1e6).toPrecision(3)) + ' µs';
  if (a < 1) return Number((v * 1e3).toPrecision(3)) + ' ms';
  return Number(v.toPrecision(3)) + ' s';
}
const gpus = (m) => (Array.isArray(m.gpus) ? m.gpus : []);

// The system groups: each names the series of one sample ([label, value]).
export const SYSTEM = [
  { group: 'cpu', title: 'CPU utilisation', fmt: fmtPct, series: (m) => [['CPU', m.cpu_util_pct]] },
  { group: 'memory', title: 'Memory', fmt: fmtBytes,
    series: (m) => [['used', m.memory_used_bytes], ['total', m.memory_total_bytes]] },
  { group: 'network', title: 'Network', fmt: fmtRate,
    series: (m) => [['received', m.net_recv_bytes_per_s], ['sent', m.net_sent_bytes_per_s]] },
  { group: 'disk', title: 'Disk', fmt: fmtRate,
    series: (m) => [['read', m.disk_read_bytes_per_s], ['written', m.disk_write_bytes_per_s]] },
  { group: 'gpu-util', title: 'GPU utilisation', fmt: fmtPct,
    series: (m) => gpus(m).flatMap((g) => [['GPU ' + g.index, g.util_pct], ['GPU ' + g.index + ' memory', g.memory_util_pct]]) },
  { group: 'gpu-memory', title: 'GPU memory', fmt: fmtBytes,
    series: (m) => gpus(m).map((g) => ['GPU ' + g.index + ' used', g.memory_used_bytes]) },
];

// Group the samples into chart series: {group: {title, fmt, time, series: [{label, points}]}},
// only groups with at least one number. Several nodes (or ranks) name theirs in each label.
export function profilerSeries(samples) {
  const sys = samples.filter((s) => s.metrics && s.metrics.group === 'system');
  const tim = samples.filter((s) => s.metrics && s.metrics.group === 'timing');
  const nodes = new Set(sys.map((s) => s.metrics.node));
  const ranks = new Set(tim.map((s) => s.metrics.rank));
  const out = new Map();
  const put = (g, title, fmt, time, label, x, y) => {
    if (typeof y !== 'number' || !isFinite(y) || typeof x !== 'number' || !isFinite(x)) return;
    let e = out.get(g);
    if (!e) out.set(g, (e = { title, fmt, time, series: new Map() }));
    let pts = e.series.get(label);
    if (!pts) e.series.set(label, (pts = []));
    pts.push([x, y]);
  };
  // System samples against the time they were taken (else when stored).
  const when = (s) => (typeof s.metrics.time === 'number' ? s.metrics.time : Date.parse(s.reported_at) / 1000);
  for (const g of SYSTEM) {
    for (const s of sys) {
      const sfx = nodes.size > 1 ? ' (node ' + s.metrics.node + ')' : '';
      for (const [label, v] of g.series(s.metrics)) put(g.group, g.title, g.fmt, true, label + sfx, when(s), v);
    }
  }
  for (const s of tim) {
    const sfx = ranks.size > 1 ? ' (rank ' + s.metrics.rank + ')' : '';
    for (const p of PHASES) put('timing', 'Seconds per batch, by phase', fmtSecs, false, p + sfx, s.step, s.metrics[p]);
  }
  return out;
}

export function profilerSection(base, signal) {
  const box = h('div', { class: 'charts small', id: 'profiler', dataset: { samples: '0', charts: '0' } },
    h('p', { class: 'muted empty' }, 'Loading…'));
  const el = h('section', { id: 'profiler-section', 'aria-labelledby': 'profiler-title' },
    h('h2', { id: 'profiler-title' }, 'Profiler'),
    h('p', { class: 'muted' }, 'System metrics of the trial\'s nodes over time; the training loop\'s mean seconds per batch in each phase.'),
    box);
  const samples = [];
  const charts = new Map(); // group -> SmallChart
  let last = 0;
  let done = false; // read once more after the trial ended, then no more
  const ro = new ResizeObserver(() => { for (const c of charts.values()) c.resize(); });
  ro.observe(box);

  function draw() {
    const groups = profilerSeries(samples);
    box.dataset.samples = String(samples.length);
    box.dataset.charts = String(groups.size);
    if (!groups.size) {
      for (const c of charts.values()) c.destroy();
      charts.clear();
      clear(box).append(h('p', { class: 'muted empty' }, 'No profiler samples: set profiling.enabled in the experiment\'s config'));
      return;
    }
    box.querySelectorAll('.empty').forEach((e) => e.remove());
    const order = SYSTEM.map((g) => g.group).concat(['timing']).filter((g) => groups.has(g));
    order.forEach((g, i) => {
      const e = groups.get(g);
      let c = charts.get(g);
      if (!c) charts.set(g, (c = new SmallChart(g, e.title, { time: e.time, fmt: e.fmt })));
      if (box.children[i] !== c.el) box.insertBefore(c.el, box.children[i] || null);
      c.set(Array.from(e.series, ([label, points]) => ({ label, points })));
    });
  }

  // Read what is new; state: the trial's state (no more reads once it has ended).
  async function poll(state) {
    if (done) return;
    if (ENDED.has(state)) done = true;
    const first = last === 0 && !samples.length;
    let added = false;
    for (;;) {
      const j = await api(base + '/profiler?limit=' + PAGE + '&after=' + last, { signal });
      const got = j.samples || [];
      for (const s of got) {
        if (typeof s.id === 'number' && s.id > last) last = s.id;
        samples.push(s);
      }
      if (got.length) added = true;
      if (got.length < PAGE) break;
    }
    if (added || first) draw();
  }

  return { el, poll, destroy: () => { ro.disconnect(); for (const c of charts.values()) c.destroy(); } };
}
