// Time-series charts on uPlot (vendored, MIT). Each chart keeps its uPlot
// instance across refreshes and only swaps the data. A caption under every
// chart states the latest values in words, for screen readers and for
// anyone who would rather read than squint at a line.

import { h, num, bytes, rate, pct } from './ui.js';

const uPlot = globalThis.uPlot;
const PALETTE = ['#0b6bcb', '#b35c00', '#1a7f37', '#8250df', '#cf222e', '#1b7c83', '#6e7781', '#bf3989'];
const FORMAT = { cores: num, gpus: num, bytes, rate, ratio: pct };

/** Aligns range-query results on the grid start..end by step. */
export function align(results, start, end, step) {
  const xs = [];
  for (let t = start; t <= end + 1e-9; t += step) xs.push(Math.round(t * 1000) / 1000);
  const index = new Map(xs.map((t, i) => [t, i]));
  const ys = results.map((r) => {
    const y = new Array(xs.length).fill(null);
    for (const [t, v] of r.values) {
      const i = index.get(Math.round(t * 1000) / 1000);
      const f = parseFloat(v);
      if (i !== undefined && Number.isFinite(f)) y[i] = f;
    }
    return y;
  });
  return { xs, ys };
}

function last(y) {
  for (let i = y.length - 1; i >= 0; i -= 1) if (y[i] !== null) return y[i];
  return null;
}

/** One chart: a figure with a title, the plot, and a caption of latest values. */
export class Chart {
  /** `unit` is one of cores, gpus, bytes, rate, ratio. */
  constructor(parent, title, unit) {
    this.title = title;
    this.fmt = FORMAT[unit] || num;
    this.plotEl = h('div', { class: 'plot', role: 'img', 'aria-label': `${title}: no data yet` });
    this.caption = h('figcaption', {}, 'Waiting for data…');
    this.el = h('figure', { class: 'chart' }, h('h3', {}, title), this.plotEl, this.caption);
    parent.append(this.el);
    this.u = null;
    this.labels = [];
    this.resize = new ResizeObserver(() => {
      if (this.u) this.u.setSize(this.size());
    });
    this.resize.observe(this.el);
  }

  size() {
    return { width: Math.max(200, this.plotEl.clientWidth), height: 180 };
  }

  /** Draws `series`: [{label, ys}] over the time grid `xs` (Unix seconds). */
  update(xs, series) {
    const labels = series.map((s) => s.label);
    const data = [xs, ...series.map((s) => s.ys)];
    if (!uPlot) {
      this.plotEl.textContent = 'Chart library missing.';
    } else if (this.u && labels.join('\u0000') === this.labels.join('\u0000')) {
      this.u.setData(data);
    } else {
      if (this.u) this.u.destroy();
      this.labels = labels;
      const fmt = this.fmt;
      // Canvas has no currentColor: read the text colour (light or dark).
      const fg = getComputedStyle(this.el).color || '#1f2328';
      this.u = new uPlot({
        ...this.size(),
        legend: { show: series.length > 0, live: false },
        cursor: { drag: { x: false, y: false } },
        scales: { y: { range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1] } },
        axes: [
          { stroke: fg, grid: { stroke: 'rgba(128,128,128,0.2)' } },
          {
            stroke: fg,
            size: (u, values) => (values ? Math.max(4, ...values.map((v) => v.length)) * 7.5 + 18 : 50),
            grid: { stroke: 'rgba(128,128,128,0.2)' },
            values: (u, ticks) => ticks.map((t) => fmt(t)),
          },
        ],
        series: [
          {},
          ...series.map((s, i) => ({
            label: s.label,
            stroke: PALETTE[i % PALETTE.length],
            width: 2,
            dash: s.dash,
            value: (u, v) => fmt(v),
            spanGaps: false,
          })),
        ],
      }, data, this.plotEl);
    }
    const now = series.map((s) => `${s.label} ${this.fmt(last(s.ys))}`);
    const text = series.length ? `Latest: ${now.join(', ')}.` : 'No samples in this window.';
    this.caption.textContent = text;
    this.plotEl.setAttribute('aria-label', `${this.title}. ${text}`);
  }

  /** Frees the plot. */
  destroy() {
    this.resize.disconnect();
    if (this.u) this.u.destroy();
  }
}
