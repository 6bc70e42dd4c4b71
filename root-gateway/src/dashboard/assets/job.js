// One job (#/job/ID): verdict with reasons, facts, and its use against its
// allocation over the last 15 minutes.

import { h, nodeLink, pct, bytes, rate, usedOf, replaceKeepFocus } from './ui.js';
import { light } from './verdict.js';
import { Chart } from './chart.js';
import { ioShareLabel } from './api.js';

/** Mounts the page of job `id` into ctx.root. */
export function mount(ctx, id) {
  const verdictBox = h('div', { class: 'verdict' });
  const facts = h('dl', { class: 'facts' });
  const charts = h('div', { class: 'charts' });
  const cpu = new Chart(charts, 'CPU cores', 'cores');
  const mem = new Chart(charts, 'Memory', 'bytes');
  let gpu = null;
  const io = new Chart(charts, 'I/O', 'rate');
  const share = new Chart(charts, ioShareLabel(), 'ratio');
  const byNode = new Chart(charts, 'CPU cores by node', 'cores');
  ctx.root.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Overview'), ' › job'),
    h('h1', { tabindex: '-1' }, `Job ${id}`),
    verdictBox, facts,
    h('section', { 'aria-labelledby': 'h-use' }, h('h2', { id: 'h-use' }, 'Use against allocation, last 15 minutes'), charts));

  const fact = (k, v) => [h('dt', {}, k), h('dd', {}, v)];

  async function update(s) {
    const j = s.jobs.get(id);
    if (!j) {
      verdictBox.replaceChildren(h('p', {}, `Job ${id} is not running now: no samples in the last 5 minutes.`));
      facts.replaceChildren();
    } else {
      verdictBox.replaceChildren(light(j.verdict, true));
      replaceKeepFocus(facts,
        ...fact('User', j.user || '–'), ...fact('Account', j.account || '–'),
        ...fact('Partition', j.partition || '–'),
        ...fact('Nodes', j.nodes.flatMap((n, i) => (i ? [', ', nodeLink(n)] : [nodeLink(n)]))),
        ...fact('Cores used / allocated', usedOf(j.cpuUsed, j.cpus)),
        ...fact('Memory used / allocated', usedOf(j.mem, j.memAlloc, bytes)),
        ...fact('GPUs busy / allocated', j.gpus > 0 ? usedOf(j.gpusBusy, j.gpus) : 'none allocated'),
        ...fact('I/O', `${rate(j.ioRead)} read, ${rate(j.ioWrite)} written`),
        ...fact(ioShareLabel(), pct(j.share)));
    }
    const r = await ctx.ranges(['job_cpu_used', 'job_cpus_allocated', 'job_memory', 'job_memory_allocated',
      'job_gpus_busy', 'job_gpus_allocated', 'job_io_read', 'job_io_write', 'job_io_share',
      'job_cpu_used_by_node'], { job: id });
    const one = (n) => r[n].ys[0] || r[n].xs.map(() => null);
    const xs = r.job_cpu_used.xs;
    cpu.update(xs, [{ label: 'used', ys: one('job_cpu_used') },
      { label: 'allocated', ys: one('job_cpus_allocated'), dash: [6, 4] }]);
    mem.update(xs, [{ label: 'used', ys: one('job_memory') },
      { label: 'allocated', ys: one('job_memory_allocated'), dash: [6, 4] }]);
    if (r.job_gpus_allocated.results.length) {
      if (!gpu) gpu = new Chart(charts, 'GPUs (SM busy)', 'gpus');
      charts.insertBefore(gpu.el, io.el);
      gpu.update(xs, [{ label: 'busy', ys: one('job_gpus_busy') },
        { label: 'allocated', ys: one('job_gpus_allocated'), dash: [6, 4] }]);
    }
    io.update(xs, [{ label: 'read', ys: one('job_io_read') }, { label: 'write', ys: one('job_io_write') }]);
    share.update(xs, [{ label: 'share', ys: one('job_io_share') }]);
    const per = r.job_cpu_used_by_node;
    byNode.update(xs, per.results.map((x, i) => ({ label: x.metric.node || '?', ys: per.ys[i] })));
    byNode.el.hidden = per.results.length < 2;
  }

  return {
    update,
    destroy() { for (const c of [cpu, mem, gpu, io, share, byNode]) if (c) c.destroy(); },
  };
}
