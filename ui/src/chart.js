// Learning curves with uPlot: one chart per metric (validation metrics first), one line per
// trial, x = batches. Points arrive in any order (history, then the live stream) and are
// kept per trial as sorted step and value arrays, so a batch streamed twice is drawn once.
// With a few trials each is a uPlot series (a legend with its value under the cursor); with
// many (more than MANY) uPlot draws the axes, the zoom and the cursor over an invisible
// envelope (the lowest and highest value at each step, for its y range) and the trials'
// lines are drawn in one path per colour, one pixel wide: 1,000 uPlot series of 100 points
// each cost about 10 times as much. Drag to zoom on x (the page may then fetch the range at
// full resolution: ChartSet's loadRange), double-click (or "Reset zoom") to go back; the
// log scale is a toggle of the set. Each chart's element carries data-points (points
// drawn), data-series, data-mode (few | many) and, while zoomed, data-zoomed for tests and
// scripts.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { h, clear } from './dom.js';

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2',
  '#17becf', '#7f7f7f', '#bcbd22'];
export const colorOf = (i) => PALETTE[i % PALETTE.length];
const MANY = 30; // more trials than this: no legend, one path per colour
const MANY_GAP_MS = 1000; // with many trials the stream redraws at most once a second

// The first index of sorted array a whose value is >= x.
function lowerBound(a, x) {
  let lo = 0, hi = a.length;
  while (lo < hi) {
    const m = (lo + hi) >> 1;
    if (a[m] < x) lo = m + 1;
    else hi = m;
  }
  return lo;
}

// One trial's points of one metric: steps ascending, each once.
class Line {
  constructor() {
    this.s = [];
    this.v = [];
  }

  set(step, value) {
    const n = this.s.length;
    if (n === 0 || step > this.s[n - 1]) {
      this.s.push(step);
      this.v.push(value);
      return;
    }
    const i = lowerBound(this.s, step);
    if (this.s[i] === step) this.v[i] = value;
    else {
      this.s.splice(i, 0, step);
      this.v.splice(i, 0, value);
    }
  }

  // The points of steps from..to replaced by steps/values (ascending, all in from..to).
  replace(from, to, steps, values) {
    const a = lowerBound(this.s, from), b = lowerBound(this.s, to + 1);
    this.s.splice(a, b - a, ...steps);
    this.v.splice(a, b - a, ...values);
  }
}

class Curve {
  constructor(set, key) {
    this.set = set;
    this.key = key;
    this.trials = new Map(); // trial -> Line
    this.plot = null;
    this.shape = '';
    this.zoomSeq = 0; // the chart's latest zoom: an earlier one's answer comes too late
    const [kind, metric] = splitKey(key);
    this.kind = kind;
    this.title = metric + ' (' + kind + ')';
    this.box = h('div', { class: 'chart', role: 'img', 'aria-label': 'learning curves of ' + this.title,
      dataset: { metric, kind, points: '0' } });
    this.el = h('section', { class: 'curve' },
      h('h3', {}, this.title, ' ',
        h('button', { type: 'button', class: 'small', onclick: () => this.resetZoom() }, 'Reset zoom')),
      this.box);
  }

  line(trial) {
    let l = this.trials.get(trial);
    if (!l) this.trials.set(trial, (l = new Line()));
    return l;
  }

  add(trial, step, value) {
    this.line(trial).set(step, value);
  }

  // Whether the batches axis is zoomed: data-zoomed="1" on the chart's element while it is.
  get zoomed() {
    return this.box.dataset.zoomed === '1';
  }

  set zoomed(on) {
    if (on) this.box.dataset.zoomed = '1';
    else delete this.box.dataset.zoomed;
  }

  resetZoom() {
    this.zoomed = false;
    if (this.plot) this.plot.setData(this.data(), true);
  }

  // A value that can be drawn on the current scale.
  ok(v) {
    return typeof v === 'number' && isFinite(v) && (!this.set.log || v > 0);
  }

  // The union of every trial's steps, ascending.
  steps(lines) {
    const all = new Set();
    for (const l of lines) for (const s of l.s) all.add(s);
    return Float64Array.from(all).sort();
  }

  data() {
    const names = this.set.trialOrder(this.trials);
    const lines = names.map((n) => this.trials.get(n));
    const xs = this.steps(lines);
    const at = new Map();
    xs.forEach((x, i) => at.set(x, i));
    this.names = names;
    this.many = names.length > MANY;
    let points = 0;
    let out;
    if (this.many) {
      // The envelope: for uPlot's y range (visible steps only, log scale included).
      const lo = new Array(xs.length).fill(null), hi = new Array(xs.length).fill(null);
      for (const l of lines) {
        for (let i = 0; i < l.s.length; i++) {
          const v = l.v[i];
          if (!this.ok(v)) continue;
          points++;
          const k = at.get(l.s[i]);
          if (lo[k] === null || v < lo[k]) lo[k] = v;
          if (hi[k] === null || v > hi[k]) hi[k] = v;
        }
      }
      out = [Array.from(xs), lo, hi];
    } else {
      out = [Array.from(xs), ...lines.map((l) => {
        const ys = new Array(xs.length).fill(null);
        for (let i = 0; i < l.s.length; i++) {
          if (!this.ok(l.v[i])) continue;
          ys[at.get(l.s[i])] = l.v[i];
          points++;
        }
        return ys;
      })];
    }
    this.box.dataset.points = String(points);
    this.box.dataset.series = String(names.length);
    this.box.dataset.mode = this.many ? 'many' : 'few';
    return out;
  }

  // Every trial's line, clipped to the plot, one path and one stroke per colour.
  drawMany(u) {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    const xmin = u.scales.x.min, xmax = u.scales.x.max;
    if (xmin === null || xmax === null || xmax <= xmin) return;
    const ymin = u.scales.y.min, ymax = u.scales.y.max;
    const log = this.set.log;
    const f = log ? Math.log10 : (v) => v;
    const y0 = f(ymin), ky = height / (f(ymax) - y0), kx = width / (xmax - xmin);
    const groups = new Map();
    for (const n of this.names) {
      const c = colorOf(this.set.index(n));
      if (!groups.has(c)) groups.set(c, []);
      groups.get(c).push(this.trials.get(n));
    }
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    ctx.lineWidth = Math.max(1, Math.round(uPlot.pxRatio));
    ctx.lineJoin = 'round';
    for (const [c, lines] of groups) {
      ctx.beginPath();
      for (const l of lines) {
        // one point either side of the visible steps, so lines reach the edges
        const a = Math.max(0, lowerBound(l.s, xmin) - 1), b = Math.min(l.s.length, lowerBound(l.s, xmax) + 1);
        let pen = false;
        for (let i = a; i < b; i++) {
          const v = l.v[i];
          if (!this.ok(v)) {
            pen = false;
            continue;
          }
          const x = left + (l.s[i] - xmin) * kx, y = top + height - (f(v) - y0) * ky;
          if (pen) ctx.lineTo(x, y);
          else ctx.moveTo(x, y);
          pen = true;
        }
      }
      ctx.strokeStyle = c;
      ctx.stroke();
    }
    ctx.restore();
  }

  render() {
    const data = this.data();
    const shape = (this.many ? 'many|' + this.names.length : this.names.map((n) => this.set.label(n)).join('\u0000')) +
      '|' + this.set.log;
    const width = Math.max(320, (this.box.clientWidth || this.set.root.clientWidth || 640) - 4);
    if (this.plot && shape === this.shape) {
      this.plot.setData(data, !this.zoomed);
      return;
    }
    if (this.plot) this.plot.destroy();
    clear(this.box);
    this.shape = shape;
    this.zoomed = false;
    const many = this.many;
    const hooks = {
      setSelect: [(u) => {
        if (u.select.width <= 0) return;
        this.zoomed = true;
        // the steps now in view, once uPlot has set the scale
        requestAnimationFrame(() => { if (this.plot === u) this.set.zoomedTo(this, u.scales.x.min, u.scales.x.max); });
      }],
    };
    if (many) hooks.draw = [(u) => this.drawMany(u)];
    const series = many
      ? [{}, { paths: () => null, points: { show: false } }, { paths: () => null, points: { show: false } }]
      : this.names.map((n) => ({
        label: this.set.label(n), stroke: colorOf(this.set.index(n)), width: 1.5, spanGaps: true,
        points: { show: data[0].length <= 60, size: 4 },
      }));
    this.plot = new uPlot({
      width, height: 240,
      scales: { x: { time: false }, y: { distr: this.set.log ? 3 : 1 } },
      axes: [{ label: 'batches' }, { size: 60 }],
      cursor: { drag: { x: true, y: false }, points: { show: !many } },
      legend: { show: !many, live: true }, // a legend of 1,000 rows helps nobody
      series: many ? series : [{ label: 'batches' }].concat(series),
      hooks,
    }, data, this.box);
    this.plot.over.addEventListener('dblclick', () => { this.zoomed = false; });
  }

  resize() {
    const w = Math.max(320, this.box.clientWidth - 4);
    if (this.plot && w !== this.plot.width) this.plot.setSize({ width: w, height: 240 });
  }

  destroy() {
    if (this.plot) this.plot.destroy();
    this.plot = null;
  }
}

function splitKey(key) {
  const i = key.indexOf(':');
  return [key.slice(0, i), key.slice(i + 1)];
}

// The charts of a page; add() points, then they are drawn once per animation frame (with
// many trials, at most once a second while the stream delivers). Trials are keys (a name, or
// whatever the page chooses) shown as label(key) (default: the key). loadRange(kind, from,
// to), when given, is called after a zoom with the steps in view; it returns (a promise of)
// {from, to, trials: Map(key -> series)} of GET .../experiments/{e}/metrics for that range,
// whose points replace those there.
export class ChartSet {
  constructor(root, { loadRange, label } = {}) {
    this.label = label || ((k) => k);
    this.root = root;
    this.curves = new Map();
    this.log = false;
    this.order = []; // trial names in the order first seen (colours stay put)
    this.pos = new Map(); // name -> its index in order
    this.pending = false;
    this.drawn = 0;
    this.loadRange = loadRange;
    this.ro = new ResizeObserver(() => { for (const c of this.curves.values()) c.resize(); });
    this.ro.observe(root);
  }

  index(name) {
    let i = this.pos.get(name);
    if (i === undefined) this.pos.set(name, (i = this.order.push(name) - 1));
    return i;
  }

  trialOrder(trials) {
    for (const n of trials.keys()) this.index(n);
    return this.order.filter((n) => trials.has(n));
  }

  curve(kind, metric) {
    const key = kind + ':' + metric;
    let c = this.curves.get(key);
    if (!c) this.curves.set(key, (c = new Curve(this, key)));
    return c;
  }

  // Rows of a metrics batch or of GET .../metrics: [{batches|step, metrics}].
  addRows(trial, kind, rows) {
    for (const r of rows || []) {
      const step = typeof r.batches === 'number' ? r.batches : r.step;
      if (typeof step !== 'number') continue;
      for (const [m, v] of Object.entries(r.metrics || {})) {
        if (typeof v !== 'number') continue;
        this.curve(kind, m).add(trial, step, v);
      }
    }
    this.schedule(true);
  }

  // One trial's series of GET .../experiments/{e}/metrics: {name: {steps: [], values: []}}.
  addSeries(trial, kind, series) {
    for (const [m, sv] of Object.entries(series || {})) {
      const steps = sv.steps || [], vals = sv.values || [];
      const l = this.curve(kind, m).line(trial);
      for (let i = 0; i < steps.length; i++) if (typeof vals[i] === 'number') l.set(steps[i], vals[i]);
    }
    this.schedule();
  }

  // The series of a range (from..to) of every trial of a kind ({trial: {name: {steps,
  // values}}}) replace the points there, up to each series' last step: points streamed since
  // the range was read stay, and a trial without points there keeps what it had.
  replaceRange(kind, from, to, byTrial) {
    for (const [trial, series] of byTrial) {
      for (const [m, sv] of Object.entries(series || {})) {
        const steps = sv.steps || [];
        if (!steps.length) continue;
        this.curve(kind, m).line(trial).replace(from, Math.min(to, steps[steps.length - 1]), steps, sv.values || []);
      }
    }
    this.schedule();
  }

  async zoomedTo(curve, min, max) {
    if (!this.loadRange) return;
    const from = Math.max(0, Math.floor(min)), to = Math.ceil(max);
    const seq = ++curve.zoomSeq;
    curve.box.dataset.loading = '1';
    try {
      const got = await this.loadRange(curve.kind, from, to);
      if (seq !== curve.zoomSeq || !got) return; // a later zoom of this chart wins
      this.replaceRange(curve.kind, got.from, got.to, got.trials);
      curve.box.dataset.refined = got.from + '-' + got.to;
    } finally {
      if (seq === curve.zoomSeq) delete curve.box.dataset.loading;
    }
  }

  setLog(on) {
    this.log = on;
    this.schedule();
  }

  // streamed: new points from the live stream (with many trials, drawn at most once a second)
  schedule(streamed = false) {
    if (this.pending) return;
    this.pending = true;
    const many = Array.from(this.curves.values()).some((c) => c.many);
    const wait = streamed && many ? Math.max(0, this.drawn + MANY_GAP_MS - performance.now()) : 0;
    const go = () => requestAnimationFrame(() => {
      this.pending = false;
      this.drawn = performance.now();
      this.draw();
    });
    if (wait > 0) setTimeout(go, wait);
    else go();
  }

  draw() {
    const keys = Array.from(this.curves.keys()).sort((a, b) =>
      (a.startsWith('validation:') ? 0 : 1) - (b.startsWith('validation:') ? 0 : 1) || a.localeCompare(b));
    keys.forEach((k, i) => {
      const c = this.curves.get(k);
      if (this.root.children[i] !== c.el) this.root.insertBefore(c.el, this.root.children[i] || null);
      c.render();
    });
    if (!keys.length && !this.root.querySelector('.empty'))
      this.root.append(h('p', { class: 'muted empty' }, 'No metrics reported yet.'));
    else if (keys.length) this.root.querySelectorAll('.empty').forEach((e) => e.remove());
    this.root.dataset.points = String(keys.reduce((s, k) => s + Number(this.curves.get(k).box.dataset.points), 0));
  }

  destroy() {
    this.ro.disconnect();
    for (const c of this.curves.values()) c.destroy();
  }
}

// A small chart of a few named series against one x axis, time (seconds since the epoch) or
// batches, for the profiler. set() takes every series at once ([{label, points: [[x, y]]}]);
// the chart is made again only when the series' names change. Its element carries
// data-group, data-series and data-points for tests and scripts.
export class SmallChart {
  constructor(group, title, { time = false, fmt = String } = {}) {
    this.time = time;
    this.fmt = fmt;
    this.plot = null;
    this.shape = '';
    this.box = h('div', { class: 'chart', role: 'img', 'aria-label': title, dataset: { group, points: '0', series: '0' } });
    this.el = h('section', { class: 'curve small-chart' }, h('h3', {}, title), this.box);
  }

  set(series) {
    const xs = Array.from(new Set(series.flatMap((s) => s.points.map((p) => p[0])))).sort((a, b) => a - b);
    const at = new Map(xs.map((x, i) => [x, i]));
    let points = 0;
    const ys = series.map((s) => {
      const col = new Array(xs.length).fill(null);
      for (const [x, y] of s.points) {
        if (typeof y === 'number' && isFinite(y)) {
          if (col[at.get(x)] === null) points++;
          col[at.get(x)] = y;
        }
      }
      return col;
    });
    this.box.dataset.points = String(points);
    this.box.dataset.series = String(series.length);
    const data = [xs, ...ys];
    const shape = series.map((s) => s.label).join('\u0000');
    if (this.plot && shape === this.shape) {
      this.plot.setData(data);
      return;
    }
    if (this.plot) this.plot.destroy();
    clear(this.box);
    this.shape = shape;
    const fmt = this.fmt;
    this.plot = new uPlot({
      width: this.width(), height: 180,
      scales: { x: { time: this.time } },
      axes: [{ label: this.time ? '' : 'batches' }, { size: 84, values: (u, vs) => vs.map((v) => (v === null ? '' : fmt(v))) }],
      legend: { show: true, live: true },
      series: [{ label: this.time ? 'time' : 'batches' }].concat(series.map((s, i) => ({
        label: s.label, stroke: colorOf(i), width: 1.5, spanGaps: true, value: (u, v) => (v === null || v === undefined ? '—' : fmt(v)),
        points: { show: xs.length <= 60, size: 4 },
      }))),
    }, data, this.box);
  }

  width() {
    return Math.max(280, (this.box.clientWidth || 480) - 4);
  }

  resize() {
    if (this.plot) this.plot.setSize({ width: this.width(), height: 180 });
  }

  destroy() {
    if (this.plot) this.plot.destroy();
    this.plot = null;
  }
}
