// The hyperparameter view of an experiment: one scatter per hyperparameter against the
// searcher's metric (each trial's best validation value), and a parallel-coordinates chart
// of all hyperparameters and the metric; points and lines coloured by the metric (dark
// blue best, yellow worst). Plain SVG built with createElementNS, text as text nodes.
// Categorical values are placed evenly on their axis, in the order first seen.
import { h, clear, get, fmtNumber, hparamsText } from './dom.js';

const NS = 'http://www.w3.org/2000/svg';
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const k of kids) el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return el;
}

// t in [0, 1], 0 best: dark blue -> teal -> yellow.
function colour(t) {
  const stops = [[33, 49, 140], [32, 144, 140], [253, 231, 37]];
  const x = Math.max(0, Math.min(1, t)) * 2, i = Math.min(1, Math.floor(x)), f = x - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
  return 'rgb(' + c.join(',') + ')';
}

// An axis over the values of one hyperparameter (or the metric): value -> [0, 1].
function axis(name, values) {
  const nums = values.filter((v) => typeof v === 'number' && isFinite(v));
  if (nums.length === values.length) {
    let lo = Math.min(...nums), hi = Math.max(...nums);
    const log = lo > 0 && hi / lo >= 100;
    const f = log ? Math.log10 : (v) => v;
    if (hi === lo) { lo -= 1; hi += 1; }
    const a = f(lo), b = f(hi);
    return { name, pos: (v) => (f(v) - a) / (b - a), ticks: [lo, hi].map((v) => [fmtNumber(v), (f(v) - a) / (b - a)]), log };
  }
  const cats = [];
  for (const v of values) { const k = JSON.stringify(v); if (!cats.includes(k)) cats.push(k); }
  const p = (k) => (cats.length === 1 ? 0.5 : cats.indexOf(k) / (cats.length - 1));
  return { name, pos: (v) => p(JSON.stringify(v)), ticks: cats.map((k) => [k.replace(/^"|"$/g, ''), p(k)]), log: false };
}

export function hparamView(box, trials, metric, smallerIsBetter) {
  const rows = trials.map((t) => ({ name: t.name, hp: get(t, 'spec.hparams') || {}, m: get(t, 'status.bestValidation.value') }))
    .filter((r) => typeof r.m === 'number' && isFinite(r.m));
  const names = Array.from(new Set(rows.flatMap((r) => Object.keys(r.hp)))).sort()
    .filter((n) => rows.every((r) => r.hp[n] !== undefined && (typeof r.hp[n] !== 'object' || r.hp[n] === null)));
  box.dataset.trials = String(rows.length);
  if (!rows.length || !names.length) {
    clear(box).append(h('p', { class: 'muted' }, rows.length ? 'No hyperparameters to compare.' : 'No trial has a validation ' + (metric || 'metric') + ' yet.'));
    return;
  }
  const mAxis = axis(metric, rows.map((r) => r.m));
  for (const r of rows) { // what every chart needs of a trial, once
    r.mp = mAxis.pos(r.m);
    r.rank = smallerIsBetter ? r.mp : 1 - r.mp;
    r.colour = colour(r.rank);
    r.mText = fmtNumber(r.m);
  }
  const hpAxes = names.map((n) => axis(n, rows.map((r) => r.hp[n])));
  const W = 260, H = 180, P = 34;
  const scatters = names.map((n, k) => {
    const ax = hpAxes[k];
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', class: 'scatter',
      'aria-label': metric + ' against ' + n + ', one point per trial', 'data-hparam': n, 'data-points': rows.length });
    svg.append(s('line', { x1: P, y1: H - P, x2: W - 8, y2: H - P, class: 'axis' }), s('line', { x1: P, y1: 8, x2: P, y2: H - P, class: 'axis' }),
      s('text', { x: (W + P) / 2, y: H - 6, 'text-anchor': 'middle' }, n + (ax.log ? ' (log)' : '')),
      s('text', { x: 10, y: (H - P) / 2, transform: `rotate(-90 10 ${(H - P) / 2})`, 'text-anchor': 'middle' }, metric));
    for (const [label, p] of ax.ticks.slice(0, 6)) svg.append(s('text', { x: P + p * (W - P - 16), y: H - P + 12, 'text-anchor': 'middle', class: 'tick' }, label));
    const dots = document.createDocumentFragment(); // one insertion for 1,000 points
    for (const r of rows) {
      dots.append(s('circle', { cx: P + ax.pos(r.hp[n]) * (W - P - 16), cy: 8 + (1 - r.mp) * (H - P - 16), r: 3.5, fill: r.colour },
        s('title', {}, r.name + ': ' + n + '=' + hparamsText({ v: r.hp[n] }).slice(2) + ', ' + metric + '=' + r.mText)));
    }
    svg.append(dots);
    return svg;
  });
  const axes = hpAxes.concat([mAxis]);
  const PW = Math.max(480, 140 * axes.length), PH = 260, top = 24, bottom = 30;
  const x = (i) => 40 + (i * (PW - 80)) / (axes.length - 1 || 1);
  const y = (p) => top + (1 - p) * (PH - top - bottom);
  const par = s('svg', { viewBox: `0 0 ${PW} ${PH}`, width: '100%', height: PH, role: 'img', class: 'parallel', id: 'parallel',
    'aria-label': 'parallel coordinates of ' + names.join(', ') + ' and ' + metric + ', one line per trial', 'data-lines': rows.length });
  const lines = document.createDocumentFragment();
  for (const r of rows.slice().sort((a, b) => b.rank - a.rank)) { // the best drawn last, on top
    const pts = axes.map((a, i) => x(i) + ',' + y(i === axes.length - 1 ? r.mp : a.pos(r.hp[a.name]))).join(' ');
    lines.append(s('polyline', { points: pts, fill: 'none', stroke: r.colour, 'stroke-width': 1.5, 'stroke-opacity': 0.8 },
      s('title', {}, r.name + ': ' + hparamsText(r.hp) + ', ' + metric + '=' + r.mText)));
  }
  par.append(lines);
  axes.forEach((a, i) => {
    par.append(s('line', { x1: x(i), y1: y(0), x2: x(i), y2: y(1), class: 'axis' }),
      s('text', { x: x(i), y: 14, 'text-anchor': 'middle' }, a.name + (a.log ? ' (log)' : '')));
    for (const [label, p] of a.ticks.slice(0, 8)) par.append(s('text', { x: x(i) + 4, y: y(p) + 4, class: 'tick' }, label));
  });
  clear(box).append(
    h('p', { class: 'muted' }, 'Each trial\'s best ' + metric + ' (' + (smallerIsBetter ? 'smaller' : 'larger') + ' is better): dark blue best, yellow worst. Hover a point or line for the trial.'),
    h('div', { class: 'scatters' }, scatters),
    h('h3', {}, 'Parallel coordinates'), par);
}
