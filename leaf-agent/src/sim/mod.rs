//! A deterministic simulated compute node, driven by virtual time only.
//!
//! [`SimNode`] implements [`Collector`] with the metric names of the real
//! collectors (node CPU, memory, load, network, disk) plus the per-job series
//! of a Slurm node, with full attribution labels (`job_id`, `user`,
//! `account`, `partition`), GPU series for gpu-partition jobs, and jobs that
//! start and end (their series then vanish from the output).
//!
//! Determinism: nothing reads a clock or an OS random source. The simulation
//! runs in fixed one-second steps and every draw is a hash of (seed, node,
//! step, what) (see `rng`), so the state at a virtual time depends only on
//! the seed, the node name, the CPU count and the boot time, not on how the
//! caller split its [`SimNode::advance`] calls.
//!
//! Change rates follow real nodes, since they drive the wire cost: counters
//! move every step, load averages every 5 s (as the kernel's), job memory and
//! GPU utilisation every 5 to 15 s, page cache every 30 s.

mod jobs;
mod load;
mod rng;
mod state;

#[cfg(test)]
mod tests;

use crate::collect::{Collector, Observation};
use crate::error::LeafError;

use jobs::{JobSpec, MAX_DURATION_MS, SLOT_MS};
use rng::{hash, range, str_hash, unit};
use state::{NodeCounters, RunningJob};

pub use load::{SERIES_PER_JOB, SimJobs};

/// Length of one simulation step, in virtual milliseconds.
pub const STEP_MS: i64 = 1000;

/// A gap longer than this in [`SimNode::advance`] is treated as a reboot at
/// the new time rather than simulated step by step.
pub const MAX_CATCHUP_MS: i64 = 3_600_000;

const GIB: u64 = 1 << 30;

/// A simulated Slurm compute node.
#[derive(Clone, Debug)]
pub struct SimNode {
    node: String,
    seed: u64,
    /// Hash of (seed, node name): the root of this node's own draws.
    key: u64,
    cpus: u32,
    gpus: u32,
    mem_total: u64,
    swap_total: u64,
    os_mem: u64,
    booted: bool,
    now_ms: i64,
    /// Last simulated step (its time is `step * STEP_MS`).
    step: i64,
    /// First slot whose candidate jobs have not been considered yet.
    next_slot: i64,
    /// Candidates this node will run, not started yet, by start time.
    pending: Vec<JobSpec>,
    jobs: Vec<RunningJob>,
    c: NodeCounters,
}

impl SimNode {
    /// A node named `node_name` with `cpus` CPUs in the cluster seeded `seed`.
    ///
    /// Nodes of one cluster share `seed`: they then agree on every job's
    /// attributes, and a multi-node job shows on each node that runs it. The
    /// node boots at the first [`advance`](Self::advance) or
    /// [`set_time`](Self::set_time) (or at time 0 on a first `collect`).
    pub fn new(node_name: &str, seed: u64, cpus: u32) -> Self {
        let key = hash(&[seed, str_hash(node_name)]);
        let cpus = cpus.max(1);
        let gpu_node = unit(&[key, 1]) < 0.25;
        let mem_per_cpu = if unit(&[key, 2]) < 0.5 { 4 } else { 8 } * GIB;
        let mem_total = u64::from(cpus) * mem_per_cpu - GIB / 2;
        SimNode {
            node: node_name.to_string(),
            seed,
            key,
            cpus,
            gpus: if gpu_node { 4 } else { 0 },
            mem_total: round_to(mem_total as f64, 1024),
            swap_total: if unit(&[key, 3]) < 0.3 { 8 * GIB } else { 0 },
            os_mem: round_to(range(&[key, 4], 0.8, 2.5) * GIB as f64, 4096),
            booted: false,
            now_ms: 0,
            step: 0,
            next_slot: 0,
            pending: Vec::new(),
            jobs: Vec::new(),
            c: NodeCounters::default(),
        }
    }

    /// The node name (the `node` label).
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// Current virtual time, Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// Number of GPUs (4 on the quarter of nodes that are GPU nodes, else 0).
    pub fn gpus(&self) -> u32 {
        self.gpus
    }

    /// Ids of the jobs running now, ascending.
    pub fn running_jobs(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.jobs.iter().map(|j| j.spec.id).collect();
        ids.sort_unstable();
        ids
    }

    /// (Re)boots the node at virtual time `ts_ms`: counters restart at values
    /// for a plausible uptime, and jobs that would be running at `ts_ms` are
    /// already there. Call before the first collect; later it is a reboot
    /// (counters reset, as on a real node).
    pub fn set_time(&mut self, ts_ms: i64) {
        self.booted = true;
        self.now_ms = ts_ms;
        self.step = ts_ms.div_euclid(STEP_MS);
        self.jobs.clear();
        self.pending.clear();
        self.c = NodeCounters::at_boot(self.key, self.cpus, self.mem_total);
        // Replay admissions (no integration) over the longest job's lifetime.
        let from = ts_ms - MAX_DURATION_MS;
        self.next_slot = from.div_euclid(SLOT_MS);
        self.plan_slots_until(ts_ms);
        while self.pending.first().is_some_and(|j| j.start_ms <= ts_ms) {
            let spec = self.pending.remove(0);
            self.retire(spec.start_ms);
            self.admit(spec);
        }
        self.retire(ts_ms);
        for j in &mut self.jobs {
            j.warm_start(ts_ms);
        }
        let s = self.step;
        for j in &mut self.jobs {
            j.redraw(s, ts_ms, true);
        }
        self.c
            .redraw(self.key, s, self.cpus, self.mem_total, &self.jobs, true);
    }

    /// Moves virtual time forward to `ts_ms`, simulating every whole step in
    /// between. Earlier times are ignored (virtual time never goes back); a
    /// gap over [`MAX_CATCHUP_MS`] reboots the node at `ts_ms`.
    pub fn advance(&mut self, ts_ms: i64) {
        if !self.booted {
            self.set_time(ts_ms);
            return;
        }
        if ts_ms <= self.now_ms {
            return;
        }
        if ts_ms - self.now_ms > MAX_CATCHUP_MS {
            tracing::debug!(node = %self.node, gap_ms = ts_ms - self.now_ms, "sim gap too long; rebooting");
            self.set_time(ts_ms);
            return;
        }
        let target = ts_ms.div_euclid(STEP_MS);
        while self.step < target {
            self.step += 1;
            self.run_step(self.step);
        }
        self.now_ms = ts_ms;
    }

    /// Simulates step `s` (virtual time `s * STEP_MS`).
    fn run_step(&mut self, s: i64) {
        let t = s * STEP_MS;
        self.retire(t);
        self.plan_slots_until(t);
        while self.pending.first().is_some_and(|j| j.start_ms <= t) {
            let spec = self.pending.remove(0);
            self.admit(spec);
        }
        for j in &mut self.jobs {
            j.integrate(self.key, s, t);
            j.redraw(s, t, false);
        }
        self.c.integrate(self.key, s, self.cpus, &self.jobs);
        self.c
            .redraw(self.key, s, self.cpus, self.mem_total, &self.jobs, false);
    }

    /// Considers the candidates of every slot starting at or before `t`.
    fn plan_slots_until(&mut self, t: i64) {
        let gpu_node = self.gpus > 0;
        while self.next_slot * SLOT_MS <= t {
            for k in 0..jobs::JOBS_PER_SLOT {
                let spec = jobs::candidate(self.seed, self.next_slot, k);
                if jobs::runs_on(&spec, self.key, gpu_node) {
                    self.pending.push(spec);
                }
            }
            self.next_slot += 1;
        }
        self.pending.sort_by_key(|j| (j.start_ms, j.id));
    }

    /// Drops jobs that have ended by `t`: their series vanish.
    fn retire(&mut self, t: i64) {
        self.jobs.retain(|j| j.spec.end_ms > t);
    }

    /// Starts `spec` here if it fits (CPUs, memory, GPUs); otherwise the
    /// scheduler placed it elsewhere and it is dropped.
    fn admit(&mut self, spec: JobSpec) {
        let used_cpus: u32 = self.jobs.iter().map(|j| j.cpus).sum();
        let used_mem: u64 = self.jobs.iter().map(|j| j.mem_alloc).sum();
        let cpus = spec.cpus.min(self.cpus);
        let mem_alloc = u64::from(cpus) * spec.mem_per_cpu;
        let free_gpus: Vec<u32> = (0..self.gpus)
            .filter(|g| !self.jobs.iter().any(|j| j.gpu_ids.contains(g)))
            .collect();
        let fits = used_cpus + cpus <= self.cpus
            && used_mem + mem_alloc <= self.mem_total.saturating_sub(self.os_mem)
            && spec.gpus as usize <= free_gpus.len();
        if fits {
            // `fits` checked spec.gpus <= free_gpus.len().
            let gpu_ids = free_gpus[..spec.gpus as usize].to_vec();
            self.jobs
                .push(RunningJob::new(spec, cpus, mem_alloc, gpu_ids));
        }
    }

    /// Appends the node observations.
    fn node_observations(&self, out: &mut Vec<Observation>) {
        let n = self.node.as_str();
        let c = &self.c;
        for (mode, ticks) in crate::collect::stat::CPU_MODES.iter().zip(c.cpu_ticks) {
            let v = ticks.floor() / 100.0;
            out.push(Observation::counter(
                "canopy_node_cpu_seconds_total",
                n,
                &[("mode", mode)],
                v,
            ));
        }
        out.push(Observation::counter(
            "canopy_node_context_switches_total",
            n,
            &[],
            c.ctxt.floor(),
        ));
        out.push(Observation::gauge(
            "canopy_node_procs_running",
            n,
            &[],
            f64::from(c.procs_running),
        ));
        out.push(Observation::gauge(
            "canopy_node_procs_blocked",
            n,
            &[],
            f64::from(c.procs_blocked),
        ));
        out.push(Observation::gauge(
            "canopy_node_cpus",
            n,
            &[],
            f64::from(self.cpus),
        ));
        for (name, l) in [
            ("canopy_node_load1", c.load[0]),
            ("canopy_node_load5", c.load[1]),
            ("canopy_node_load15", c.load[2]),
        ] {
            out.push(Observation::gauge(
                name,
                n,
                &[],
                (l * 100.0).round() / 100.0,
            ));
        }
        let jobs_mem: u64 = self.jobs.iter().map(|j| j.mem_bytes).sum();
        let total = self.mem_total;
        let used = (self.os_mem + jobs_mem).min(total);
        let cached = c.cached.min(total - used);
        let buffers = c.buffers.min(total - used - cached);
        let free = total - used - cached - buffers;
        let available = free + cached / 10 * 9 + buffers;
        let mem = [
            ("canopy_node_memory_total_bytes", total),
            (
                "canopy_node_memory_available_bytes",
                round_to(available as f64, 1024),
            ),
            ("canopy_node_memory_free_bytes", free),
            ("canopy_node_memory_cached_bytes", cached),
            ("canopy_node_memory_buffers_bytes", buffers),
            ("canopy_node_memory_swap_total_bytes", self.swap_total),
            ("canopy_node_memory_swap_free_bytes", self.swap_total),
        ];
        for (name, v) in mem {
            out.push(Observation::gauge(name, n, &[], v as f64));
        }
        for (dev, d) in [("eth0", &c.eth0), ("ib0", &c.ib0)] {
            let l = [("device", dev)];
            out.push(Observation::counter(
                "canopy_node_network_receive_bytes_total",
                n,
                &l,
                d.rx_bytes.floor(),
            ));
            out.push(Observation::counter(
                "canopy_node_network_transmit_bytes_total",
                n,
                &l,
                d.tx_bytes.floor(),
            ));
            out.push(Observation::counter(
                "canopy_node_network_receive_packets_total",
                n,
                &l,
                d.rx_packets.floor(),
            ));
            out.push(Observation::counter(
                "canopy_node_network_transmit_packets_total",
                n,
                &l,
                d.tx_packets.floor(),
            ));
        }
        let l = [("device", "nvme0n1")];
        let d = &c.disk;
        out.push(Observation::counter(
            "canopy_node_disk_read_bytes_total",
            n,
            &l,
            d.read_bytes.floor(),
        ));
        out.push(Observation::counter(
            "canopy_node_disk_written_bytes_total",
            n,
            &l,
            d.written_bytes.floor(),
        ));
        out.push(Observation::counter(
            "canopy_node_disk_reads_completed_total",
            n,
            &l,
            d.reads.floor(),
        ));
        out.push(Observation::counter(
            "canopy_node_disk_writes_completed_total",
            n,
            &l,
            d.writes.floor(),
        ));
        out.push(Observation::counter(
            "canopy_node_disk_io_time_seconds_total",
            n,
            &l,
            d.io_ms.floor() / 1000.0,
        ));
    }
}

impl Collector for SimNode {
    fn name(&self) -> &'static str {
        "sim_node"
    }

    fn set_tick_time(&mut self, ts_ms: i64) {
        self.advance(ts_ms);
    }

    /// Appends the node's and its running jobs' series at the current
    /// virtual time. Never fails.
    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if !self.booted {
            self.set_time(0);
        }
        self.node_observations(out);
        for j in &self.jobs {
            j.observations(&self.node, out);
        }
        Ok(())
    }
}

/// Rounds `v` down to a multiple of `unit` (pages, KiB), as the kernel reports.
pub(crate) fn round_to(v: f64, unit: u64) -> u64 {
    let v = v.max(0.0) as u64;
    v / unit * unit
}
