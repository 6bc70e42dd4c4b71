//! The simulated node's mutable state: node counters and running jobs.

use super::jobs::{JobSpec, Partition};
use super::rng::{range, unit};
use super::{STEP_MS, round_to};
use crate::collect::Observation;

/// Network counters of one interface (floats holding whole numbers once
/// floored; only grow).
#[derive(Clone, Debug, Default)]
pub(crate) struct NetCounters {
    pub rx_bytes: f64,
    pub tx_bytes: f64,
    pub rx_packets: f64,
    pub tx_packets: f64,
}

impl NetCounters {
    fn add(&mut self, rx: f64, tx: f64, packet_size: f64) {
        self.rx_bytes += rx;
        self.tx_bytes += tx;
        self.rx_packets += rx / packet_size;
        self.tx_packets += tx / packet_size;
    }
}

/// Block device counters.
#[derive(Clone, Debug, Default)]
pub(crate) struct DiskCounters {
    pub read_bytes: f64,
    pub written_bytes: f64,
    pub reads: f64,
    pub writes: f64,
    pub io_ms: f64,
}

/// Node-level counters and slowly changing gauges.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeCounters {
    /// Ticks (1/100 s) per mode, in `CPU_MODES` order.
    pub cpu_ticks: [f64; 8],
    pub ctxt: f64,
    pub eth0: NetCounters,
    pub ib0: NetCounters,
    pub disk: DiskCounters,
    pub procs_running: u32,
    pub procs_blocked: u32,
    pub load: [f64; 3],
    pub cached: u64,
    pub buffers: u64,
    /// CPUs kept busy at the last step, for the load average.
    busy: f64,
}

impl NodeCounters {
    /// Counters of a node that has been up for a plausible while.
    pub fn at_boot(key: u64, cpus: u32, _mem_total: u64) -> Self {
        let up = range(&[key, 20], 86_400.0, 40.0 * 86_400.0).floor();
        let cpus = f64::from(cpus);
        let share = [0.45, 0.0005, 0.03, 0.5, 0.003, 0.0003, 0.001, 0.0];
        let mut c = NodeCounters::default();
        for (t, s) in c.cpu_ticks.iter_mut().zip(share) {
            *t = (up * cpus * 100.0 * s).floor();
        }
        c.ctxt = (up * (1500.0 + 1500.0 * cpus)).floor();
        c.eth0.add(up * 6e3, up * 4e3, 800.0);
        c.ib0.add(up * 2e8, up * 2e8, 4096.0);
        c.disk.read_bytes = (up * 2e5).floor();
        c.disk.written_bytes = (up * 4e5).floor();
        c.disk.reads = (up * 3.0).floor();
        c.disk.writes = (up * 12.0).floor();
        c.disk.io_ms = (up * 5.0).floor();
        c
    }

    /// Advances the counters by one step, given the jobs' activity.
    pub fn integrate(&mut self, key: u64, s: i64, cpus: u32, jobs: &[RunningJob]) {
        let s = s as u64;
        let r = |what: u64| unit(&[key, s, what]);
        let ncpu = f64::from(cpus);
        let job_busy: f64 = jobs.iter().map(|j| j.last_rate).sum::<f64>().min(ncpu);
        let os = (0.01 * ncpu + 0.02) * (0.5 + r(1));
        let disk_read: f64 = 5e4 * r(2) + jobs.iter().map(|j| j.last_read * 0.02).sum::<f64>();
        let disk_write: f64 = 1e5 * r(3) + jobs.iter().map(|j| j.last_write * 0.05).sum::<f64>();
        let ib: f64 = jobs.iter().map(|j| j.last_net).sum::<f64>() * (0.9 + 0.2 * r(4));
        let iowait = (disk_write / 4e8).min(0.5) * ncpu * 0.1;
        let mut m = [
            job_busy * 0.94 + os * 0.4,
            0.0005 * ncpu,
            job_busy * 0.05 + os * 0.5,
            0.0,
            iowait,
            0.0003 * ncpu,
            0.001 * ncpu + ib / 1e10,
            0.0,
        ];
        let used: f64 = m.iter().sum();
        m[3] = (ncpu - used).max(0.0);
        for (t, v) in self.cpu_ticks.iter_mut().zip(m) {
            *t += v * 100.0 * (STEP_MS as f64 / 1000.0);
        }
        self.ctxt += 1500.0 + 200.0 * ncpu + 2500.0 * job_busy * (0.8 + 0.4 * r(5));
        self.eth0.add(6e3 * (0.5 + r(6)), 4e3 * (0.5 + r(7)), 800.0);
        self.ib0
            .add(ib + 2e3, ib * (0.95 + 0.1 * r(8)) + 2e3, 4096.0);
        self.disk.read_bytes += disk_read;
        self.disk.written_bytes += disk_write;
        self.disk.reads += disk_read / 65_536.0;
        self.disk.writes += disk_write / 32_768.0;
        self.disk.io_ms += ((disk_read + disk_write) / 2e6).min(1000.0);
        self.busy = job_busy + os;
    }

    /// Redraws the gauges that change every few steps (all of them when
    /// `force`): run queue and load every 5 s, page cache every 30 s, buffers
    /// every 60 s.
    pub fn redraw(
        &mut self,
        key: u64,
        s: i64,
        cpus: u32,
        mem_total: u64,
        jobs: &[RunningJob],
        force: bool,
    ) {
        let r = |what: u64| unit(&[key, s as u64, what]);
        if force {
            self.busy = jobs
                .iter()
                .map(|j| j.cpus as f64 * j.spec.cpu_eff)
                .sum::<f64>()
                .min(f64::from(cpus));
        }
        if force || s.rem_euclid(5) == 0 {
            self.procs_running = (self.busy + r(10)).round().max(1.0) as u32;
            self.procs_blocked = u32::from(r(11) < 0.08);
            let n = f64::from(self.procs_running + self.procs_blocked);
            // The kernel's exponential decay, sampled every 5 s.
            for (l, period) in self.load.iter_mut().zip([60.0_f64, 300.0, 900.0]) {
                *l = if force {
                    n
                } else {
                    *l * (-5.0 / period).exp() + n * (1.0 - (-5.0 / period).exp())
                };
            }
        }
        if force || s.rem_euclid(30) == 0 {
            self.cached = round_to(
                mem_total as f64 * range(&[key, s as u64, 12], 0.05, 0.09),
                1024,
            );
        }
        if force || s.rem_euclid(60) == 0 {
            self.buffers = round_to(
                mem_total as f64 * range(&[key, s as u64, 13], 0.001, 0.002),
                1024,
            );
        }
    }
}

/// A job running on this node.
#[derive(Clone, Debug)]
pub(crate) struct RunningJob {
    pub spec: JobSpec,
    id_label: String,
    /// CPUs allocated here (the ask, capped to the node).
    pub cpus: u32,
    pub mem_alloc: u64,
    /// GPU indices allocated here.
    pub gpu_ids: Vec<u32>,
    gpu_labels: Vec<String>,
    cpu_seconds: f64,
    read_bytes: f64,
    write_bytes: f64,
    pub mem_bytes: u64,
    gpu_util: Vec<f64>,
    /// Activity at the last step, for the node totals.
    pub last_rate: f64,
    pub last_read: f64,
    pub last_write: f64,
    pub last_net: f64,
}

impl RunningJob {
    pub fn new(spec: JobSpec, cpus: u32, mem_alloc: u64, gpu_ids: Vec<u32>) -> Self {
        RunningJob {
            id_label: spec.id.to_string(),
            gpu_labels: gpu_ids.iter().map(u32::to_string).collect(),
            gpu_util: vec![0.0; gpu_ids.len()],
            spec,
            cpus,
            mem_alloc,
            gpu_ids,
            cpu_seconds: 0.0,
            read_bytes: 0.0,
            write_bytes: 0.0,
            mem_bytes: 0,
            last_rate: 0.0,
            last_read: 0.0,
            last_write: 0.0,
            last_net: 0.0,
        }
    }

    /// Counters of a job that has run since its start, at mean rates (warm start).
    pub fn warm_start(&mut self, t: i64) {
        let secs = ((t - self.spec.start_ms) as f64 / 1000.0).max(0.0);
        self.cpu_seconds = f64::from(self.cpus) * self.spec.cpu_eff * secs;
        self.read_bytes = (self.spec.read_rate * 0.6 * secs).floor();
        self.write_bytes = (self.spec.write_rate * secs).floor();
    }

    /// Advances the job's counters by one step ending at time `t`.
    pub fn integrate(&mut self, node_key: u64, s: i64, t: i64) {
        let k = self.spec.key;
        let r = |what: u64| unit(&[k, node_key, s as u64, what]);
        let dt = STEP_MS as f64 / 1000.0;
        let elapsed = ((t - self.spec.start_ms) / STEP_MS).max(0) as u64;
        // Start-up ramp: the first 20 s are mostly loading and launching.
        let ramp = (elapsed as f64 / 20.0).min(1.0);
        let ncpu = f64::from(self.cpus);
        self.last_rate =
            (ncpu * self.spec.cpu_eff * (0.9 + 0.2 * r(1)) * (0.3 + 0.7 * ramp)).min(ncpu);
        self.cpu_seconds += self.last_rate * dt;
        // Reads come in phases of 30 s; writes are a trickle plus checkpoints.
        let reading = unit(&[k, (s / 30) as u64, 2]) < 0.6;
        self.last_read = if reading {
            (self.spec.read_rate * (0.5 + r(3)) * dt).floor()
        } else {
            0.0
        };
        let ckpt = elapsed > 0 && elapsed % self.spec.ckpt_every < 10;
        let burst = if ckpt {
            self.mem_bytes as f64 / 10.0
        } else {
            0.0
        };
        self.last_write = (self.spec.write_rate * (0.5 + r(4)) * dt + burst).floor();
        self.read_bytes += self.last_read;
        self.write_bytes += self.last_write;
        self.last_net = self.spec.net_rate * (0.5 + r(5)) * ramp;
    }

    /// Redraws memory and GPU utilisation every `redraw_every` steps (or now,
    /// when `force`).
    pub fn redraw(&mut self, s: i64, t: i64, force: bool) {
        let k = self.spec.key;
        let every = self.spec.redraw_every.max(1) as i64;
        if !force && (s + (k % 16) as i64).rem_euclid(every) != 0 {
            return;
        }
        let secs = (t - self.spec.start_ms) as f64 / 1000.0;
        let ramp = (secs / 180.0 + 0.05).min(1.0);
        let noise = range(&[k, s as u64, 6], 0.92, 1.08);
        self.mem_bytes = round_to(
            self.mem_alloc as f64 * self.spec.mem_frac * ramp * noise,
            4096,
        );
        for (i, u) in self.gpu_util.iter_mut().enumerate() {
            let x = self.spec.gpu_util * range(&[k, s as u64, 7, i as u64], 0.85, 1.15);
            // NVML reports whole percent.
            *u = (x.clamp(0.0, 1.0) * 100.0).round() / 100.0;
        }
    }

    /// Appends this job's series.
    pub fn observations(&self, node: &str, out: &mut Vec<Observation>) {
        let s = &self.spec;
        let l = [
            ("job_id", self.id_label.as_str()),
            ("user", s.user),
            ("account", s.account),
            ("partition", s.partition.as_str()),
        ];
        out.push(Observation::counter(
            "canopy_job_cpu_seconds_total",
            node,
            &l,
            self.cpu_seconds,
        ));
        out.push(Observation::gauge(
            "canopy_job_cpus_allocated",
            node,
            &l,
            f64::from(self.cpus),
        ));
        out.push(Observation::gauge(
            "canopy_job_memory_bytes",
            node,
            &l,
            self.mem_bytes as f64,
        ));
        out.push(Observation::gauge(
            "canopy_job_memory_allocated_bytes",
            node,
            &l,
            self.mem_alloc as f64,
        ));
        out.push(Observation::counter(
            "canopy_job_io_read_bytes_total",
            node,
            &l,
            self.read_bytes,
        ));
        out.push(Observation::counter(
            "canopy_job_io_write_bytes_total",
            node,
            &l,
            self.write_bytes,
        ));
        if s.partition == Partition::Gpu {
            out.push(Observation::gauge(
                "canopy_job_gpus_allocated",
                node,
                &l,
                self.gpu_ids.len() as f64,
            ));
            for (gpu, u) in self.gpu_labels.iter().zip(&self.gpu_util) {
                let mut lg = l.to_vec();
                lg.push(("gpu", gpu.as_str()));
                out.push(Observation::gauge(
                    "canopy_job_gpu_sm_utilization_ratio",
                    node,
                    &lg,
                    *u,
                ));
            }
        }
    }
}
