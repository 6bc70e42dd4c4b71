// DOM and formatting helpers. Elements are built with the DOM API (never
// innerHTML), so label values from the cluster cannot inject markup.

/** Builds an element: h('a', {href: '#/'}, 'text', child, ...). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Link to a job's page. */
export function jobLink(id) {
  return h('a', { href: `#/job/${encodeURIComponent(id)}`, 'data-key': `job:${id}` }, id);
}

/** Link to a node's page. */
export function nodeLink(name) {
  return h('a', { href: `#/node/${encodeURIComponent(name)}`, 'data-key': `node:${name}` }, name);
}

/**
 * Replaces the children of `box` and, when keyboard focus was on an element
 * with a data-key inside it, moves focus to its successor, so a refresh
 * every 5 s does not throw a keyboard or screen-reader user out of a table.
 */
export function replaceKeepFocus(box, ...children) {
  const active = document.activeElement;
  const key = active && box.contains(active) ? active.dataset.key : undefined;
  box.replaceChildren(...children);
  if (key === undefined) return;
  const next = [...box.querySelectorAll('[data-key]')].find((e) => e.dataset.key === key);
  if (next) next.focus();
}

/** A number with sensible precision, or an en dash when unknown. */
export function num(v, digits = 1) {
  if (v === undefined || v === null || !Number.isFinite(v)) return '–';
  if (Math.abs(v) >= 100 || Number.isInteger(v)) return Math.round(v).toLocaleString('en');
  return v.toFixed(digits);
}

/** A ratio as a percentage. */
export function pct(v) {
  if (v === undefined || v === null || !Number.isFinite(v)) return '–';
  return `${v >= 0.1 || v === 0 ? Math.round(v * 100) : (v * 100).toFixed(1)}%`;
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** Bytes in binary units. */
export function bytes(v) {
  if (v === undefined || v === null || !Number.isFinite(v)) return '–';
  let i = 0;
  while (Math.abs(v) >= 1024 && i < UNITS.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${i === 0 ? Math.round(v) : v.toFixed(v >= 100 ? 0 : 1)} ${UNITS[i]}`;
}

/** Bytes per second. */
export function rate(v) {
  return v === undefined || v === null || !Number.isFinite(v) ? '–' : `${bytes(v)}/s`;
}

/** `used / allocated (percent)`, for one table cell. */
export function usedOf(used, alloc, fmt = num) {
  const r = alloc > 0 && Number.isFinite(used) ? ` (${pct(used / alloc)})` : '';
  return `${fmt(used)} / ${fmt(alloc)}${r}`;
}

/** HH:MM:SS of a Unix time in seconds, local time. */
export function clock(t) {
  const d = new Date(t * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((x) => String(x).padStart(2, '0')).join(':');
}

/** A labelled figure tile. */
export function tile(label, value, detail) {
  return h('div', { class: 'tile' },
    h('span', { class: 'tile-label' }, label),
    h('span', { class: 'tile-value' }, value),
    detail ? h('span', { class: 'tile-detail' }, detail) : null);
}
