//! The simulated cluster's job stream: which jobs exist, and what each is.
//!
//! Time is cut into one-minute slots; each slot has [`JOBS_PER_SLOT`]
//! candidate jobs whose every attribute is a hash of (cluster seed, job id),
//! so all nodes of one simulated cluster agree on a job's labels, start and
//! end. Each node then decides on its own, by another hash, whether it runs a
//! candidate; a job can so appear on several nodes (a multi-node job), with
//! the same id and labels everywhere. Job ids are unique across the cluster:
//! `slot * JOBS_PER_SLOT + k + 1` (the slot taken modulo 10^6 minutes).

use super::rng::{hash, pick, range, unit};

/// Length of one scheduling slot.
pub(crate) const SLOT_MS: i64 = 60_000;
/// Candidate jobs per slot, cluster-wide.
pub(crate) const JOBS_PER_SLOT: u64 = 16;
/// The longest job, so a warm start knows how far back to look.
pub(crate) const MAX_DURATION_MS: i64 = 90 * 60_000;

/// Users and the account each one charges.
const USERS: [(&str, &str); 10] = [
    ("alice", "physics"),
    ("bob", "climate"),
    ("chen", "bio"),
    ("dana", "ml"),
    ("emil", "physics"),
    ("fatima", "climate"),
    ("goran", "bio"),
    ("hiro", "ml"),
    ("ines", "physics"),
    ("jamal", "ml"),
];

/// Slurm partitions of the simulated cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Partition {
    /// Short test jobs on CPU nodes.
    Debug,
    /// Batch jobs on CPU nodes.
    Cpu,
    /// Jobs on GPU nodes.
    Gpu,
}

impl Partition {
    /// The `partition` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Partition::Debug => "debug",
            Partition::Cpu => "cpu",
            Partition::Gpu => "gpu",
        }
    }
}

/// Everything about one job that all nodes agree on.
#[derive(Clone, Debug)]
pub(crate) struct JobSpec {
    /// Cluster-unique job id.
    pub id: u64,
    /// Hash of (seed, id), the root of the job's own draws.
    pub key: u64,
    pub user: &'static str,
    pub account: &'static str,
    pub partition: Partition,
    /// Virtual start and end time.
    pub start_ms: i64,
    pub end_ms: i64,
    /// CPUs asked per node (before capping to the node's size).
    pub cpus: u32,
    /// Memory asked per CPU.
    pub mem_per_cpu: u64,
    /// GPUs asked per node (gpu partition only).
    pub gpus: u32,
    /// Mean share of the allocated CPUs the job keeps busy.
    pub cpu_eff: f64,
    /// Mean share of the allocated memory the job touches.
    pub mem_frac: f64,
    /// Mean SM utilisation of its GPUs.
    pub gpu_util: f64,
    /// Mean read rate, bytes per second.
    pub read_rate: f64,
    /// Background write rate (logs, small output), bytes per second.
    pub write_rate: f64,
    /// Checkpoint interval in steps (a write burst of the job's memory).
    pub ckpt_every: u64,
    /// Interconnect traffic, bytes per second each way.
    pub net_rate: f64,
    /// Gauges (memory, GPU utilisation) change every this many steps.
    pub redraw_every: u64,
}

const GIB: u64 = 1 << 30;

/// The job id of candidate `k` of `slot`.
pub(crate) fn job_id(slot: i64, k: u64) -> u64 {
    slot.rem_euclid(1_000_000) as u64 * JOBS_PER_SLOT + k + 1
}

/// Candidate `k` (`< JOBS_PER_SLOT`) of `slot` in the cluster seeded `seed`.
pub(crate) fn candidate(seed: u64, slot: i64, k: u64) -> JobSpec {
    let id = job_id(slot, k);
    let key = hash(&[seed, id, slot as u64]);
    let r = |what: u64| unit(&[key, what]);
    let partition = match r(1) {
        x if x < 0.15 => Partition::Debug,
        x if x < 0.75 => Partition::Cpu,
        _ => Partition::Gpu,
    };
    let (user, account) = *pick(&[key, 2], &USERS);
    let dur_min = match partition {
        Partition::Debug => range(&[key, 3], 1.0, 10.0),
        Partition::Cpu => range(&[key, 3], 5.0, 60.0),
        Partition::Gpu => range(&[key, 3], 10.0, 90.0),
    };
    let start_ms = slot * SLOT_MS + (r(4) * 60.0) as i64 * 1000;
    let gpus = match partition {
        Partition::Gpu => *pick(&[key, 5], &[1, 1, 2, 4]),
        _ => 0,
    };
    let cpus = match partition {
        Partition::Debug => *pick(&[key, 6], &[1, 2, 4]),
        Partition::Cpu => *pick(&[key, 6], &[1, 2, 4, 8, 8, 16, 16, 32, 64]),
        Partition::Gpu => 8 * gpus,
    };
    // About a third of jobs under-use what they asked for: the efficiency
    // views need something to show.
    let under_cpu = r(7) < 0.3;
    let under_gpu = r(8) < 0.3;
    let under_mem = r(9) < 0.35;
    JobSpec {
        id,
        key,
        user,
        account,
        partition,
        start_ms,
        end_ms: start_ms + (dur_min * 60_000.0) as i64,
        cpus,
        mem_per_cpu: *pick(&[key, 10], &[2 * GIB, 4 * GIB, 4 * GIB, 8 * GIB]),
        gpus,
        cpu_eff: if under_cpu {
            range(&[key, 11], 0.03, 0.35)
        } else {
            range(&[key, 11], 0.7, 0.99)
        },
        mem_frac: if under_mem {
            range(&[key, 12], 0.03, 0.25)
        } else {
            range(&[key, 12], 0.35, 0.9)
        },
        gpu_util: if under_gpu {
            range(&[key, 13], 0.0, 0.08)
        } else {
            range(&[key, 13], 0.55, 0.97)
        },
        read_rate: range(&[key, 14], 0.0, 1.0).powi(3) * 200e6,
        write_rate: range(&[key, 15], 1e3, 200e3),
        ckpt_every: *pick(&[key, 16], &[300, 600, 900, 1200]),
        net_rate: match partition {
            Partition::Debug => range(&[key, 17], 0.0, 1e6),
            _ => range(&[key, 17], 0.0, 1.0).powi(2) * 2e9,
        },
        redraw_every: 5 + hash(&[key, 18]) % 11,
    }
}

/// Whether the node keyed `node_key` runs candidate `job`.
///
/// GPU nodes take gpu-partition jobs, CPU nodes the rest. The odds are tuned
/// so a node runs about three jobs at a time, whatever the cluster size.
pub(crate) fn runs_on(job: &JobSpec, node_key: u64, gpu_node: bool) -> bool {
    let p = match (job.partition, gpu_node) {
        (Partition::Gpu, true) => 0.03,
        (Partition::Cpu | Partition::Debug, false) => 0.012,
        _ => return false,
    };
    unit(&[job.key, node_key, 19]) < p
}
