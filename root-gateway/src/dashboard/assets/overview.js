// The cluster overview (#/): tiles, cluster charts, top jobs by CPU, GPU and
// I/O, the filterable job table and the node table.

import { h, jobLink, nodeLink, num, pct, bytes, rate, usedOf, tile, replaceKeepFocus } from './ui.js';
import { light, FILTERS } from './verdict.js';
import { Chart } from './chart.js';
import { ioShareLabel } from './api.js';

const MAX_ROWS = 500;

const SORTS = {
  cpu: { label: 'Cores', key: (j) => j.cpuUsed },
  mem: { label: 'Memory', key: (j) => j.mem },
  gpu: { label: 'GPUs', key: (j) => j.gpusBusy },
  io: { label: 'I/O share', key: (j) => j.share },
  waste: { label: 'Idle cores', key: (j) => j.cpus - j.cpuUsed },
  job: { label: 'Job', key: (j) => -Number(j.id) },
};

function sorted(jobs, sort) {
  const k = (SORTS[sort] || SORTS.cpu).key;
  const v = (j) => (Number.isFinite(k(j)) ? k(j) : -Infinity);
  return [...jobs].sort((a, b) => v(b) - v(a) || a.id.localeCompare(b.id, 'en', { numeric: true }));
}

function nodesCell(nodes) {
  const shown = nodes.slice(0, 3).flatMap((n, i) => (i ? [', ', nodeLink(n)] : [nodeLink(n)]));
  return nodes.length > 3 ? [...shown, ` +${nodes.length - 3}`] : shown;
}

/** The job table; `onSort(key)` is called when a sortable header is chosen. */
export function jobTable(jobs, sort, onSort, caption) {
  const th = (label, key) => {
    if (!key) return h('th', { scope: 'col' }, label);
    const active = (sort || 'cpu') === key;
    return h('th', { scope: 'col', 'aria-sort': active ? 'descending' : null },
      h('button', { class: 'sort', type: 'button', 'data-key': `sort:${key}`, onclick: () => onSort(key) }, label, active ? ' ▼' : ''));
  };
  const rows = sorted(jobs, sort).slice(0, MAX_ROWS).map((j) => h('tr', { 'data-job': j.id },
    h('td', {}, light(j.verdict)),
    h('th', { scope: 'row' }, jobLink(j.id)),
    h('td', {}, j.user), h('td', {}, j.account), h('td', {}, j.partition),
    h('td', {}, nodesCell(j.nodes)),
    h('td', { class: 'n' }, usedOf(j.cpuUsed, j.cpus)),
    h('td', { class: 'n' }, usedOf(j.mem, j.memAlloc, bytes)),
    h('td', { class: 'n' }, j.gpus > 0 ? usedOf(j.gpusBusy, j.gpus) : '–'),
    h('td', { class: 'n' }, `${rate(j.ioRead)} / ${rate(j.ioWrite)}`),
    h('td', { class: 'n' }, pct(j.share))));
  return h('div', { class: 'scroll' }, h('table', {},
    h('caption', {}, caption),
    h('thead', {}, h('tr', {},
      th('Status'), th('Job', 'job'), th('User'), th('Account'), th('Partition'), th('Nodes'),
      th('Cores used / allocated', 'cpu'), th('Memory used / allocated', 'mem'),
      th('GPUs busy / allocated', 'gpu'), th('I/O read / write'), th(ioShareLabel(), 'io'))),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 11 }, 'No jobs match.')))));
}

function topList(title, jobs, key, fmt) {
  const top = jobs.filter((j) => Number.isFinite(key(j)) && key(j) > 0)
    .sort((a, b) => key(b) - key(a)).slice(0, 5);
  return h('section', { class: 'top' }, h('h3', {}, title),
    top.length
      ? h('ol', {}, top.map((j) => h('li', {}, jobLink(j.id), ` ${j.user} `, h('span', { class: 'n' }, fmt(j)))))
      : h('p', {}, 'None.'));
}

/** Mounts the overview into ctx.root. */
export function mount(ctx) {
  const params = ctx.params;
  let filter = FILTERS[params.get('filter')] ? params.get('filter') : 'all';
  let search = params.get('q') || '';
  let sort = SORTS[params.get('sort')] ? params.get('sort') : 'cpu';
  let last = null;

  const save = () => {
    const p = new URLSearchParams();
    if (filter !== 'all') p.set('filter', filter);
    if (search) p.set('q', search);
    if (sort !== 'cpu') p.set('sort', sort);
    ctx.setParams(p);
  };

  const tiles = h('div', { class: 'tiles' });
  const charts = h('div', { class: 'charts' });
  const cpuChart = new Chart(charts, 'Cluster cores', 'cores');
  const ioChart = new Chart(charts, 'Cluster job I/O', 'rate');
  const tops = h('div', { class: 'tops' });
  const jobsBox = h('div', {});
  const nodesBox = h('div', {});
  const filterBtns = Object.entries(FILTERS).map(([id, f]) => h('button', {
    type: 'button', class: 'filter', 'aria-pressed': String(id === filter), title: f.hint,
    onclick: () => { filter = id; save(); paint(); },
  }, f.label));
  const searchInput = h('input', {
    type: 'search', id: 'job-search', value: search, placeholder: 'job, user, account, partition',
    oninput: (e) => { search = e.target.value.trim(); save(); paint(); },
  });

  ctx.root.append(
    h('h1', { tabindex: '-1' }, 'Cluster overview'),
    tiles,
    h('section', { 'aria-labelledby': 'h-trend' }, h('h2', { id: 'h-trend' }, 'Last 15 minutes'), charts),
    h('section', { 'aria-labelledby': 'h-top' }, h('h2', { id: 'h-top' }, 'Top jobs'), tops),
    h('section', { 'aria-labelledby': 'h-jobs' },
      h('h2', { id: 'h-jobs' }, 'Jobs'),
      h('div', { class: 'toolbar', role: 'group', 'aria-label': 'Quick filters' }, filterBtns),
      h('p', { class: 'search' }, h('label', { for: 'job-search' }, 'Search '), searchInput),
      jobsBox),
    h('section', { 'aria-labelledby': 'h-nodes' }, h('h2', { id: 'h-nodes' }, 'Nodes'), nodesBox));

  function paint() {
    filterBtns.forEach((b, i) => b.setAttribute('aria-pressed', String(Object.keys(FILTERS)[i] === filter)));
    if (!last) return;
    const all = [...last.jobs.values()];
    const needle = search.toLowerCase();
    const shown = all.filter(FILTERS[filter].test).filter((j) => !needle
      || [j.id, j.user, j.account, j.partition].some((s) => s.toLowerCase().includes(needle)));
    const what = filter === 'all' ? '' : ` (${FILTERS[filter].label.toLowerCase()})`;
    const more = shown.length > MAX_ROWS ? `; the first ${MAX_ROWS} are listed` : '';
    replaceKeepFocus(jobsBox, jobTable(shown, sort, (k) => { sort = k; save(); paint(); },
      `${shown.length} of ${all.length} running jobs${what}${more}`));
  }

  async function update(s) {
    last = s;
    const jobs = [...s.jobs.values()];
    const nodes = [...s.nodes.values()].sort((a, b) => a.name.localeCompare(b.name, 'en', { numeric: true }));
    const up = nodes.filter((n) => n.up === 1).length;
    const down = nodes.filter((n) => n.up !== 1).map((n) => n.name);
    const sum = (f) => jobs.reduce((a, j) => a + (Number.isFinite(f(j)) ? f(j) : 0), 0);
    const cores = nodes.reduce((a, n) => a + (Number.isFinite(n.cpus) ? n.cpus : 0), 0);
    const attention = jobs.filter(FILTERS.attention.test).length;
    tiles.replaceChildren(
      tile('Nodes up', `${up} / ${nodes.length}`, down.length ? `down: ${down.slice(0, 5).join(', ')}` : 'all up'),
      tile('Running jobs', num(jobs.length), `${attention} need attention`),
      tile('Cores used / allocated', `${num(sum((j) => j.cpuUsed))} / ${num(sum((j) => j.cpus))}`, `of ${num(cores)} in the cluster`),
      tile('GPUs busy / allocated', `${num(sum((j) => j.gpusBusy))} / ${num(sum((j) => j.gpus))}`),
      tile('Job I/O', `${rate(sum((j) => j.ioRead))} read`, `${rate(sum((j) => j.ioWrite))} written`));
    replaceKeepFocus(tops, 
      topList('By CPU (cores used)', jobs, (j) => j.cpuUsed, (j) => `${num(j.cpuUsed)} cores`),
      topList('By GPU (GPUs busy)', jobs, (j) => j.gpusBusy, (j) => `${num(j.gpusBusy)} of ${num(j.gpus)} GPUs`),
      topList(`By I/O (${ioShareLabel().replace(/^S/, 's')})`, jobs, (j) => j.share, (j) => `${pct(j.share)} · ${rate(j.ioRead + j.ioWrite)}`));
    paint();
    replaceKeepFocus(nodesBox, h('div', { class: 'scroll' }, h('table', {},
      h('caption', {}, `${nodes.length} nodes`),
      h('thead', {}, h('tr', {}, ['Node', 'State', 'CPU busy (cores)', 'Memory used', 'Jobs']
        .map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, nodes.map((n) => h('tr', {},
        h('th', { scope: 'row' }, nodeLink(n.name)),
        h('td', {}, n.up === 1 ? 'up' : h('strong', {}, 'down')),
        h('td', { class: 'n' }, usedOf(n.cpuBusy, n.cpus)),
        h('td', { class: 'n' }, usedOf(n.memTotal - n.memAvail, n.memTotal, bytes)),
        h('td', { class: 'n' }, num(n.jobs))))))));

    const r = await ctx.ranges(['cluster_cpu_used', 'cluster_cpus_allocated', 'cluster_cpus',
      'cluster_io_read', 'cluster_io_write'], {});
    const one = (n) => r[n].ys[0] || r[n].xs.map(() => null);
    cpuChart.update(r.cluster_cpu_used.xs, [
      { label: 'used', ys: one('cluster_cpu_used') },
      { label: 'allocated', ys: one('cluster_cpus_allocated') },
      { label: 'in the cluster', ys: one('cluster_cpus') },
    ]);
    ioChart.update(r.cluster_io_read.xs, [
      { label: 'read', ys: one('cluster_io_read') },
      { label: 'write', ys: one('cluster_io_write') },
    ]);
  }

  return {
    update,
    destroy() { cpuChart.destroy(); ioChart.destroy(); },
  };
}
