// Learning curves with uPlot: one chart per metric (validation metrics first), one line per
// trial, x = batches. Points arrive in any order (history, then the live stream) and are
// kept per trial and step, so a batch streamed twice is drawn once. Drag to zoom on x,
// double-click (or "Reset zoom") to go back; the log scale is a toggle of the set.
// Each chart's element carries data-points (points drawn) for tests and scripts.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { h, clear } from './dom.js';

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2',
  '#17becf', '#7f7f7f', '#bcbd22'];
export const colorOf = (i) => PALETTE[i % PALETTE.length];

class Curve {
  constructor(set, key) {
    this.set = set;
    this.key = key;
    this.trials = new Map(); // trial -> Map(step -> value)
    this.plot = null;
    this.shape = '';
    this.zoomed = false;
    const [kind, metric] = splitKey(key);
    this.title = metric + ' (' + kind + ')';
    this.box = h('div', { class: 'chart', role: 'img', 'aria-label': 'learning curves of ' + this.title,
      dataset: { metric, kind, points: '0' } });
    this.el = h('section', { class: 'curve' },
      h('h3', {}, this.title, ' ',
        h('button', { type: 'button', class: 'small', onclick: () => this.resetZoom() }, 'Reset zoom')),
      this.box);
  }

  add(trial, step, value) {
    let m = this.trials.get(trial);
    if (!m) this.trials.set(trial, (m = new Map()));
    m.set(step, value);
  }

  resetZoom() {
    this.zoomed = false;
    if (this.plot) this.plot.setData(this.data(), true);
  }

  data() {
    const names = this.set.trialOrder(this.trials);
    const steps = new Set();
    for (const m of this.trials.values()) for (const s of m.keys()) steps.add(s);
    const xs = Array.from(steps).sort((a, b) => a - b);
    const log = this.set.log;
    let points = 0;
    const ys = names.map((n) => {
      const m = this.trials.get(n);
      return xs.map((x) => {
        const v = m.get(x);
        if (typeof v !== 'number' || !isFinite(v) || (log && v <= 0)) return null;
        points++;
        return v;
      });
    });
    this.box.dataset.points = String(points);
    this.box.dataset.series = String(names.length);
    this.names = names;
    return [xs, ...ys];
  }

  render() {
    const data = this.data();
    const shape = this.names.join('\u0000') + '|' + this.set.log;
    const width = Math.max(320, (this.box.clientWidth || this.set.root.clientWidth || 640) - 4);
    if (this.plot && shape === this.shape) {
      this.plot.setData(data, !this.zoomed);
      return;
    }
    if (this.plot) this.plot.destroy();
    clear(this.box);
    this.shape = shape;
    this.zoomed = false;
    const many = data[0].length > 60;
    this.plot = new uPlot({
      width, height: 240,
      scales: { x: { time: false }, y: { distr: this.set.log ? 3 : 1 } },
      axes: [{ label: 'batches' }, { size: 60 }],
      cursor: { drag: { x: true, y: false } },
      legend: { show: this.names.length <= 30, live: true }, // a legend of 1,000 rows helps nobody
      series: [{ label: 'batches' }].concat(this.names.map((n) => ({
        label: n, stroke: colorOf(this.set.index(n)), width: 1.5, spanGaps: true,
        points: { show: !many, size: 4 },
      }))),
      hooks: { setSelect: [(u) => { if (u.select.width > 0) this.zoomed = true; }] },
    }, data, this.box);
    this.plot.over.addEventListener('dblclick', () => { this.zoomed = false; });
  }

  resize() {
    if (this.plot) this.plot.setSize({ width: Math.max(320, this.box.clientWidth - 4), height: 240 });
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

// The charts of a page; add() points, then they are drawn once per animation frame.
export class ChartSet {
  constructor(root) {
    this.root = root;
    this.curves = new Map();
    this.log = false;
    this.order = []; // trial names in the order first seen (colours stay put)
    this.pos = new Map(); // name -> its index in order
    this.pending = false;
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

  // Rows of a metrics batch or of GET .../metrics: [{batches|step, metrics}].
  addRows(trial, kind, rows) {
    for (const r of rows || []) {
      const step = typeof r.batches === 'number' ? r.batches : r.step;
      if (typeof step !== 'number') continue;
      for (const [m, v] of Object.entries(r.metrics || {})) {
        if (typeof v !== 'number') continue;
        const key = kind + ':' + m;
        let c = this.curves.get(key);
        if (!c) this.curves.set(key, (c = new Curve(this, key)));
        c.add(trial, step, v);
      }
    }
    this.schedule();
  }

  // One trial's series of GET .../experiments/{e}/metrics: {name: {steps: [], values: []}}.
  addSeries(trial, kind, series) {
    for (const [m, sv] of Object.entries(series || {})) {
      const key = kind + ':' + m;
      let c = this.curves.get(key);
      if (!c) this.curves.set(key, (c = new Curve(this, key)));
      const steps = sv.steps || [], vals = sv.values || [];
      for (let i = 0; i < steps.length; i++) if (typeof vals[i] === 'number') c.add(trial, steps[i], vals[i]);
    }
    this.schedule();
  }

  setLog(on) {
    this.log = on;
    this.schedule();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.draw();
    });
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
