// Canopy's live dashboard: hash routing, a 5 s refresh loop, one snapshot
// of instant queries shared by every view, and range queries per view.

import { INSTANT, RANGE, bind } from './queries.js';
import { instant, range, thresholds, AuthError, setToken, refreshAccess } from './api.js';
import { h, clock } from './ui.js';
import { judge, applyThresholds, LIMITS } from './verdict.js';
import { align } from './chart.js';
import * as overview from './overview.js';
import * as jobView from './job.js';
import * as nodeView from './node.js';

const REFRESH_MS = 5000;
const WINDOW_S = 15 * 60;
const STEP_S = 5;

const $ = (id) => document.getElementById(id);
const view = $('view');
const status = $('status');
const banner = $('banner');
const pauseBtn = $('pause');

let current = null;
let snap = null;
let refreshes = 0;
let timer = 0;
let busy = false;
let paused = false;
let routed = false;

function val(r) {
  const v = parseFloat(r.value[1]);
  return Number.isFinite(v) ? v : NaN;
}

/** Runs every instant query and joins them into jobs and nodes. */
async function snapshot() {
  const names = Object.keys(INSTANT);
  const results = await Promise.all(names.map((n) => instant(INSTANT[n])));
  const q = Object.fromEntries(names.map((n, i) => [n, results[i]]));
  let t = 0;
  for (const rs of results) for (const r of rs) t = Math.max(t, r.value[0]);
  if (!t) t = Date.now() / 1000;

  const jobs = new Map();
  const job = (m) => {
    const id = m.job_id;
    if (!jobs.has(id)) {
      jobs.set(id, { id, user: '', account: '', partition: '', nodes: [], cpus: 0, cpuUsed: NaN, mem: NaN,
        memAlloc: 0, gpus: 0, gpusBusy: NaN, ioRead: NaN, ioWrite: NaN, share: NaN, observed: NaN });
    }
    return jobs.get(id);
  };
  for (const r of q.job_cpus_allocated) {
    const j = job(r.metric);
    Object.assign(j, { user: r.metric.user || '', account: r.metric.account || '',
      partition: r.metric.partition || '', cpus: val(r) });
  }
  // A job is running while its allocation is reported; rates of a job
  // that just ended linger for one window and are left out.
  const put = (name, key) => {
    for (const r of q[name]) if (jobs.has(r.metric.job_id)) jobs.get(r.metric.job_id)[key] = val(r);
  };
  put('job_cpu_used', 'cpuUsed');
  put('job_observed_seconds', 'observed');
  put('job_memory', 'mem');
  put('job_memory_allocated', 'memAlloc');
  put('job_gpus_allocated', 'gpus');
  put('job_gpus_busy', 'gpusBusy');
  put('job_io_read', 'ioRead');
  put('job_io_write', 'ioWrite');
  for (const r of q.job_nodes) if (jobs.has(r.metric.job_id)) jobs.get(r.metric.job_id).nodes.push(r.metric.node || '');

  const nodes = new Map();
  const node = (name) => {
    if (!nodes.has(name)) {
      nodes.set(name, { name, up: NaN, cpus: NaN, cpuBusy: NaN, memTotal: NaN, memAvail: NaN, jobs: 0 });
    }
    return nodes.get(name);
  };
  const putN = (name, key) => {
    for (const r of q[name]) if (r.metric.node !== undefined) node(r.metric.node)[key] = val(r);
  };
  putN('node_up', 'up');
  putN('node_cpus', 'cpus');
  putN('node_cpu_busy', 'cpuBusy');
  putN('node_memory_total', 'memTotal');
  putN('node_memory_available', 'memAvail');

  // Shares of cluster I/O: each job's bytes/s over all jobs' bytes/s.
  let reads = 0;
  let writes = 0;
  for (const j of jobs.values()) {
    reads += j.ioRead || 0;
    writes += j.ioWrite || 0;
  }
  const share = (x, total) => (Number.isFinite(x) ? (total > 0 ? x / total : 0) : NaN);
  for (const j of jobs.values()) {
    j.nodes.sort();
    for (const n of j.nodes) if (n) node(n).jobs += 1;
    j.readShare = share(j.ioRead, reads);
    j.writeShare = share(j.ioWrite, writes);
    j.share = share((j.ioRead || 0) + (j.ioWrite || 0), reads + writes);
    j.verdict = judge(j);
  }
  return { t, jobs, nodes };
}

/** Range queries by name over the last 15 minutes, aligned on one grid. */
async function ranges(names, vars) {
  const end = Math.floor((snap ? snap.t : Date.now() / 1000) / STEP_S) * STEP_S;
  const start = end - WINDOW_S;
  const results = await Promise.all(names.map((n) => range(bind(RANGE[n], vars), start, end, STEP_S)));
  const out = {};
  names.forEach((n, i) => {
    out[n] = align(results[i], start, end, STEP_S);
    out[n].results = results[i];
  });
  return out;
}

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, qs] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(qs || '') };
}

/** Replaces the hash's query part without re-mounting the view. */
function setParams(params) {
  const { parts } = parseHash();
  const qs = params.toString();
  const path = '#/' + parts.map(encodeURIComponent).join('/');
  history.replaceState(null, '', qs ? `${path}?${qs}` : path);
}

/**
 * `#token=SECRET` (also `#/job/1?token=…`): remembers the token for this tab
 * (sessionStorage) and takes it out of the address bar and the history.
 */
function takeTokenFromHash() {
  const m = location.hash.match(/[#?&]token=([^&]*)/);
  if (!m) return;
  setToken(decodeURIComponent(m[1]));
  const rest = location.hash.replace(/([#?&])token=[^&]*&?/, '$1').replace(/[?&]$/, '');
  history.replaceState(null, '', rest === '#' || rest === '' ? '#/' : rest);
}

function route() {
  takeTokenFromHash();
  if (current) current.destroy();
  view.replaceChildren();
  const { parts, params } = parseHash();
  const ctx = { params, setParams, ranges, root: view };
  if (parts[0] === 'job' && parts[1]) current = jobView.mount(ctx, parts[1]);
  else if (parts[0] === 'node' && parts[1]) current = nodeView.mount(ctx, parts[1]);
  else current = overview.mount(ctx);
  const heading = view.querySelector('h1');
  if (heading) {
    document.title = `${heading.textContent} · Canopy`;
    if (routed) heading.focus();
  }
  routed = true;
  // Paint the new view from the last snapshot at once; the loop goes on.
  if (snap) current.update(snap).catch(showError);
  else tick();
}
function showError(e) {
  if (e instanceof AuthError) {
    const input = h('input', { type: 'password', id: 'token', autocomplete: 'off' });
    banner.replaceChildren(h('form', {
      onsubmit: (ev) => {
        ev.preventDefault();
        setToken(input.value.trim());
        tick();
      },
    }, h('label', { for: 'token' }, 'The gateway asks for an access token: '), input, ' ', h('button', {}, 'Use token')));
  } else {
    banner.replaceChildren(`Cannot update: ${e.message}. Retrying every ${REFRESH_MS / 1000} s.`);
  }
  banner.hidden = false;
}

async function tick() {
  clearTimeout(timer);
  if (busy) return;
  if (paused) return;
  busy = true;
  const t0 = performance.now();
  try {
    // A new token may mean a new scope: rebuild the view with its labels.
    if (await refreshAccess()) route();
    // The gateway's own verdict lines, once (they change only when it
    // restarts); an older gateway without them: the defaults, quietly.
    if (!status.dataset.limits) {
      try {
        applyThresholds(await thresholds());
        status.dataset.limits = 'gateway';
      } catch (e) {
        if (e instanceof AuthError) throw e;
        status.dataset.limits = 'defaults';
      }
      status.dataset.cpuUnder = String(LIMITS.cpuUnder);
    }
    snap = await snapshot();
    refreshes += 1;
    await current.update(snap);
    banner.hidden = true;
    status.dataset.refreshes = String(refreshes);
    status.dataset.updated = String(snap.t);
    status.dataset.ms = String(Math.round(performance.now() - t0));
    status.textContent = `Updated ${clock(snap.t)} · refresh ${refreshes} · every ${REFRESH_MS / 1000} s`;
  } catch (e) {
    showError(e);
  } finally {
    busy = false;
    if (!paused) timer = setTimeout(tick, REFRESH_MS);
  }
}

pauseBtn.addEventListener('click', () => {
  paused = !paused;
  pauseBtn.setAttribute('aria-pressed', String(paused));
  pauseBtn.textContent = paused ? 'Resume updates' : 'Pause updates';
  if (paused) {
    clearTimeout(timer);
    status.textContent = `Paused at ${snap ? clock(snap.t) : '–'}`;
  } else {
    tick();
  }
});

window.addEventListener('hashchange', route);
route();
