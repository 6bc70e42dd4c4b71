// One node (#/node/NAME): state, CPU and memory over time, its jobs.

import { h, num, bytes, usedOf, tile, replaceKeepFocus } from './ui.js';
import { Chart } from './chart.js';
import { jobTable } from './overview.js';

/** Mounts the page of node `name` into ctx.root. */
export function mount(ctx, name) {
  const tiles = h('div', { class: 'tiles' });
  const charts = h('div', { class: 'charts' });
  const cpu = new Chart(charts, 'CPU busy (cores)', 'cores');
  const mem = new Chart(charts, 'Memory', 'bytes');
  const jobsCpu = new Chart(charts, 'Cores used by job', 'cores');
  const io = new Chart(charts, 'Job I/O', 'rate');
  const jobsBox = h('div', {});
  let sort = ctx.params.get('sort') || 'cpu';
  let last = null;
  ctx.root.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Overview'), ' › node'),
    h('h1', { tabindex: '-1' }, `Node ${name}`),
    tiles,
    h('section', { 'aria-labelledby': 'h-use' }, h('h2', { id: 'h-use' }, 'Last 15 minutes'), charts),
    h('section', { 'aria-labelledby': 'h-jobs' }, h('h2', { id: 'h-jobs' }, 'Jobs on this node'), jobsBox));

  function paint() {
    if (!last) return;
    const jobs = [...last.jobs.values()].filter((j) => j.nodes.includes(name));
    replaceKeepFocus(jobsBox, jobTable(jobs, sort, (k) => {
      sort = k;
      ctx.setParams(new URLSearchParams({ sort }));
      paint();
    }, `${jobs.length} running jobs on ${name}`));
  }

  async function update(s) {
    last = s;
    const n = s.nodes.get(name);
    if (!n) {
      tiles.replaceChildren(h('p', {}, `No node called ${name} has reported in the last 5 minutes.`));
    } else {
      tiles.replaceChildren(
        tile('State', n.up === 1 ? 'up' : 'down'),
        tile('CPU busy (cores)', usedOf(n.cpuBusy, n.cpus)),
        tile('Memory used', usedOf(n.memTotal - n.memAvail, n.memTotal, bytes)),
        tile('Jobs', num(n.jobs)));
    }
    paint();
    const r = await ctx.ranges(['node_cpu_busy', 'node_cpus', 'node_memory_used', 'node_memory_total',
      'node_job_cpu_used', 'node_io_read', 'node_io_write'], { node: name });
    const one = (k) => r[k].ys[0] || r[k].xs.map(() => null);
    const xs = r.node_cpu_busy.xs;
    cpu.update(xs, [{ label: 'busy', ys: one('node_cpu_busy') }, { label: 'cores', ys: one('node_cpus'), dash: [6, 4] }]);
    mem.update(xs, [{ label: 'used', ys: one('node_memory_used') }, { label: 'total', ys: one('node_memory_total'), dash: [6, 4] }]);
    const per = r.node_job_cpu_used;
    jobsCpu.update(xs, per.results.map((x, i) => ({ label: `job ${x.metric.job_id || '?'}`, ys: per.ys[i] })));
    io.update(xs, [{ label: 'read', ys: one('node_io_read') }, { label: 'write', ys: one('node_io_write') }]);
  }

  return {
    update,
    destroy() { for (const c of [cpu, mem, jobsCpu, io]) c.destroy(); },
  };
}
