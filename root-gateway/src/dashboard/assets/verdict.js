// The traffic light: each job is ok, underusing or overloading, with the
// reasons in words. Colour is never the only cue: each level has its own
// shape and a visible word, and the reasons are in the accessible name.

import { h, num, pct, bytes, rate } from './ui.js';

/**
 * Thresholds, fractions of the allocation: the defaults of the gateway's
 * scheduler API verdict (root-gateway/src/stress/verdict.rs, Thresholds),
 * replaced by the gateway's own at start (applyThresholds), so the light
 * here and the gRPC JobStress verdict agree.
 */
export const LIMITS = {
  /** A job observed for less than this many seconds of the rate window is not called underusing. */
  minObservedSecs: 50,
  /** Below this share of allocated cores busy, CPU is underused. */
  cpuUnder: 0.5,
  /** Above this share of allocated cores busy, CPU is oversubscribed. */
  cpuOver: 1.1,
  /** Below this share of allocated memory, memory is underused. */
  memUnder: 0.2,
  /** At or above this share of allocated memory, memory is near its limit. */
  memOver: 0.95,
  /** A mean SM utilisation below this over the job's GPUs: GPUs idle. */
  gpuUnder: 0.2,
  /** Above this share of cluster reads or writes a job dominates I/O... */
  ioShareOver: 0.5,
  /** ...when it also moves at least this many bytes per second. */
  ioMinBytes: 50e6,
  /** The "heavy I/O" quick filter: this share of cluster I/O or more. */
  ioHeavy: 0.1,
};

/** The gateway's [thresholds] field of each LIMITS entry. */
const FROM_GATEWAY = {
  minObservedSecs: 'min_observed_secs',
  cpuUnder: 'cpu_under',
  cpuOver: 'cpu_over',
  memUnder: 'mem_under',
  memOver: 'mem_over',
  gpuUnder: 'gpu_under',
  ioShareOver: 'io_share_over',
  ioMinBytes: 'io_min_bytes_per_sec',
};

/** Takes the gateway's thresholds (finite numbers only; the rest keep
 *  their defaults). */
export function applyThresholds(t) {
  for (const [ours, theirs] of Object.entries(FROM_GATEWAY)) {
    const v = t ? Number(t[theirs]) : NaN;
    if (Number.isFinite(v)) LIMITS[ours] = v;
  }
}

const WORDS = { ok: 'OK', under: 'Underusing', over: 'Overloading', unknown: 'No data yet' };

/** Mean SM utilisation over the job's allocated GPUs. */
export function gpuMean(j) {
  return j.gpus > 0 && Number.isFinite(j.gpusBusy) ? j.gpusBusy / j.gpus : NaN;
}

/** Judges one job row; returns {level, word, reasons}. */
export function judge(j) {
  const over = [];
  const under = [];
  let judged = false;
  if (j.cpus > 0 && Number.isFinite(j.cpuUsed)) {
    judged = true;
    const r = j.cpuUsed / j.cpus;
    if (r > LIMITS.cpuOver) over.push(`CPU oversubscribed: ${num(j.cpuUsed)} cores busy on ${num(j.cpus)} allocated (${pct(r)})`);
    else if (r < LIMITS.cpuUnder) under.push(`CPU underused: ${num(j.cpuUsed)} of ${num(j.cpus)} allocated cores busy (${pct(r)})`);
  }
  if (j.memAlloc > 0 && Number.isFinite(j.mem)) {
    judged = true;
    const r = j.mem / j.memAlloc;
    if (r >= LIMITS.memOver) over.push(`memory near its limit: ${bytes(j.mem)} of ${bytes(j.memAlloc)} (${pct(r)})`);
    else if (r < LIMITS.memUnder) under.push(`memory underused: ${bytes(j.mem)} of ${bytes(j.memAlloc)} allocated (${pct(r)})`);
  }
  const g = gpuMean(j);
  if (Number.isFinite(g) && g < LIMITS.gpuUnder) {
    under.push(`GPUs idle: mean SM utilisation ${pct(g)} on ${num(j.gpus)} allocated`);
  }
  for (const [what, share, r] of [['reads', j.readShare, j.ioRead], ['writes', j.writeShare, j.ioWrite]]) {
    if (share > LIMITS.ioShareOver && r >= LIMITS.ioMinBytes) {
      over.push(`dominates cluster I/O: ${pct(share)} of cluster ${what} (${rate(r)})`);
    }
  }
  const young = Number.isFinite(j.observed) && j.observed < LIMITS.minObservedSecs;
  if (young) under.length = 0;
  let level = 'unknown';
  if (over.length) level = 'over';
  else if (under.length) level = 'under';
  else if (judged && Number.isFinite(j.cpuUsed)) level = 'ok';
  const reasons = over.concat(under);
  if (young) {
    reasons.push(`observed for ${Math.round(j.observed)} s only: not judged for underuse before ${LIMITS.minObservedSecs} s`);
  }
  return { level, word: WORDS[level], reasons };
}

/** The traffic light element for a verdict; `long` adds the reasons as text. */
export function light(v, long = false) {
  const why = v.reasons.length ? `: ${v.reasons.join('; ')}` : '';
  return h('span', { class: `light light-${v.level}`, title: v.word + why },
    h('span', { class: 'light-dot', 'aria-hidden': 'true' }),
    h('span', { class: 'light-word' }, v.word),
    long && why ? h('span', { class: 'light-why' }, why) : h('span', { class: 'sr-only' }, why));
}

/** Quick filters of the job table: id -> {label, hint, test(job)}. */
export const FILTERS = {
  all: { label: 'All jobs', hint: 'every running job', test: () => true },
  waste: {
    label: 'Asked for more than it used',
    hint: `cores busy under ${pct(LIMITS.cpuUnder)} of allocated`,
    test: (j) => j.cpus > 0 && Number.isFinite(j.cpuUsed) && j.cpuUsed / j.cpus < LIMITS.cpuUnder,
  },
  gpuidle: {
    label: 'GPUs idle',
    hint: `mean SM utilisation under ${pct(LIMITS.gpuUnder)}`,
    test: (j) => gpuMean(j) < LIMITS.gpuUnder,
  },
  memhigh: {
    label: 'Memory near its limit',
    hint: `memory at or above ${pct(LIMITS.memOver)} of allocated`,
    test: (j) => j.memAlloc > 0 && j.mem / j.memAlloc >= LIMITS.memOver,
  },
  ioheavy: {
    label: 'Heavy I/O',
    hint: `${pct(LIMITS.ioHeavy)} or more of cluster I/O`,
    test: (j) => j.share >= LIMITS.ioHeavy,
  },
  attention: {
    label: 'Needs attention',
    hint: 'underusing or overloading',
    test: (j) => j.verdict.level === 'under' || j.verdict.level === 'over',
  },
};
