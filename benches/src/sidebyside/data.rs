//! The benchmark's data: Canopy-shaped series for `nodes` nodes, each node
//! running one Slurm job spread over a few nodes (labels `job_id`, `user`,
//! `account`, `partition`, `node`), sampled every `interval_ms` and cut into
//! remote_write request bodies.
//!
//! Every value is a function of (seed, node, series, step) and the state of
//! its own series, so two runs, or two different cuts into requests, give
//! the same samples. Timestamps sit on a per-node grid offset by 1..999 ms,
//! never on a whole second: a query at a whole second then never has a
//! sample on the edge of its range, where Prometheus 2.42 (closed ranges)
//! and 3.x (left-open ranges) disagree.

use canopy_proto::schema::remote::{Label, Sample, TimeSeries, WriteRequest};

/// The metric every query of the benchmark reads.
pub const IO_READ: &str = "canopy_job_io_read_bytes_total";

/// The splitmix64 finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform draw in [0, 1) from the coordinates.
fn unit(parts: &[u64]) -> f64 {
    let h = parts
        .iter()
        .fold(0x243f_6a88_85a3_08d3, |acc, p| mix(acc ^ mix(*p)));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// How one series moves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// A counter growing by about `rate` per second (times the node's load);
    /// a rate of 0 on most nodes gives flat counters.
    Counter {
        /// Mean increase per second at full load.
        rate: f64,
        /// Fraction of nodes where the counter does not move at all.
        flat: f64,
    },
    /// A gauge redrawn in `[lo, hi)` every `every` steps, rounded to `quantum`.
    Gauge {
        /// Lower bound.
        lo: f64,
        /// Upper bound.
        hi: f64,
        /// Steps between redraws.
        every: u64,
        /// Rounding of the value (bytes to pages, percent to 0.01...).
        quantum: f64,
    },
    /// A constant (allocations, capacities).
    Fixed {
        /// The value.
        value: f64,
    },
}

const GIB: f64 = 1_073_741_824.0;

/// Job series (labels: job, user, account, partition, node). `IO_READ` first.
const JOB: [(&str, Shape); 16] = [
    (IO_READ, ctr(2e7, 0.05)),
    ("canopy_job_io_write_bytes_total", ctr(5e6, 0.1)),
    ("canopy_job_io_read_ops_total", ctr(400.0, 0.05)),
    ("canopy_job_io_write_ops_total", ctr(90.0, 0.1)),
    ("canopy_job_cpu_seconds_total", ctr(8.0, 0.0)),
    ("canopy_job_cpus_allocated", Shape::Fixed { value: 64.0 }),
    (
        "canopy_job_memory_bytes",
        gauge(4.0 * GIB, 60.0 * GIB, 4, 4096.0),
    ),
    (
        "canopy_job_memory_cache_bytes",
        gauge(0.1 * GIB, 8.0 * GIB, 12, 4096.0),
    ),
    (
        "canopy_job_memory_allocated_bytes",
        Shape::Fixed { value: 64.0 * GIB },
    ),
    ("canopy_job_energy_joules_total", ctr(900.0, 0.0)),
    ("canopy_job_instructions_total", ctr(2e10, 0.0)),
    ("canopy_job_cpu_throttled_seconds_total", ctr(0.01, 0.9)),
    ("canopy_job_memory_pressure_seconds_total", ctr(0.002, 0.95)),
    ("canopy_job_network_receive_bytes_total", ctr(4e7, 0.2)),
    ("canopy_job_lustre_read_bytes_total", ctr(1.5e7, 0.3)),
    ("canopy_job_lustre_write_bytes_total", ctr(4e6, 0.3)),
];

/// Per-GPU job series (plus a `gpu` label), for each of [`GPUS`] GPUs.
const GPU: [(&str, Shape); 4] = [
    (
        "canopy_job_gpu_sm_utilization_ratio",
        gauge(0.0, 1.0, 2, 0.01),
    ),
    (
        "canopy_job_gpu_memory_bytes",
        gauge(2.0 * GIB, 80.0 * GIB, 8, 1_048_576.0),
    ),
    ("canopy_job_gpu_power_watts", gauge(80.0, 700.0, 1, 1.0)),
    ("canopy_job_gpu_energy_joules_total", ctr(400.0, 0.0)),
];
const GPUS: usize = 4;

/// Node series (labels: node, partition).
const NODE: [(&str, Shape); 16] = [
    (
        "canopy_node_memory_total_bytes",
        Shape::Fixed { value: 512.0 * GIB },
    ),
    (
        "canopy_node_memory_available_bytes",
        gauge(100.0 * GIB, 500.0 * GIB, 4, 4096.0),
    ),
    (
        "canopy_node_memory_free_bytes",
        gauge(10.0 * GIB, 300.0 * GIB, 4, 4096.0),
    ),
    (
        "canopy_node_memory_cached_bytes",
        gauge(1.0 * GIB, 100.0 * GIB, 20, 4096.0),
    ),
    ("canopy_node_network_receive_bytes_total", ctr(5e7, 0.0)),
    ("canopy_node_network_transmit_bytes_total", ctr(4e7, 0.0)),
    ("canopy_node_infiniband_receive_bytes_total", ctr(2e9, 0.1)),
    ("canopy_node_infiniband_transmit_bytes_total", ctr(2e9, 0.1)),
    ("canopy_node_infiniband_link_downed_total", ctr(0.0, 1.0)),
    ("canopy_node_disk_read_bytes_total", ctr(1e6, 0.2)),
    ("canopy_node_disk_written_bytes_total", ctr(3e6, 0.0)),
    ("canopy_node_energy_joules_total", ctr(1500.0, 0.0)),
    ("canopy_node_power_watts", gauge(300.0, 2500.0, 1, 1.0)),
    ("canopy_node_temperature_celsius", gauge(35.0, 80.0, 8, 1.0)),
    ("canopy_node_procs_running", gauge(1.0, 70.0, 1, 1.0)),
    ("canopy_node_context_switches_total", ctr(5e4, 0.0)),
];

/// CPU modes of `canopy_node_cpu_seconds_total{cpu, mode}`, which fills the
/// rest of a node's series; `steal` stays flat at 0.
const MODES: [(&str, f64); 8] = [
    ("user", 0.7),
    ("system", 0.08),
    ("idle", 0.2),
    ("iowait", 0.01),
    ("irq", 0.002),
    ("softirq", 0.005),
    ("nice", 0.0),
    ("steal", 0.0),
];

const fn ctr(rate: f64, flat: f64) -> Shape {
    Shape::Counter { rate, flat }
}

const fn gauge(lo: f64, hi: f64, every: u64, quantum: f64) -> Shape {
    Shape::Gauge {
        lo,
        hi,
        every,
        quantum,
    }
}

const USERS: [&str; 7] = ["alice", "bob", "chen", "dana", "emeka", "fatima", "gus"];
const ACCOUNTS: [&str; 4] = ["climate", "genomics", "lattice-qcd", "ml-research"];
const PARTITIONS: [&str; 3] = ["gpu", "cpu", "bigmem"];

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSpec {
    /// Nodes.
    pub nodes: usize,
    /// Series per node (at least 1; past the job, GPU and node series the
    /// rest are per-CPU `canopy_node_cpu_seconds_total`).
    pub series_per_node: usize,
    /// Nodes per Slurm job.
    pub nodes_per_job: usize,
    /// Sample interval, milliseconds (a whole number of seconds).
    pub interval_ms: i64,
    /// Samples per series.
    pub steps: usize,
    /// The whole second at or after the last sample of every series.
    pub end_ms: i64,
    /// Seed of every draw.
    pub seed: u64,
}

impl DataSpec {
    /// Series in total.
    pub fn series(&self) -> usize {
        self.nodes * self.series_per_node
    }

    /// Samples in total.
    pub fn samples(&self) -> u64 {
        (self.series() * self.steps) as u64
    }

    /// The whole second of the first grid step (before the node offsets).
    pub fn start_ms(&self) -> i64 {
        self.end_ms - 1000 - (self.steps as i64 - 1) * self.interval_ms
    }

    /// Timestamp of `step` on `node`: the grid plus 1..999 ms.
    pub fn ts_ms(&self, node: usize, step: usize) -> i64 {
        let off = 1 + (mix(self.seed ^ node as u64) % 999) as i64;
        self.start_ms() + step as i64 * self.interval_ms + off
    }

    /// The Slurm job running on `node`.
    pub fn job_of(&self, node: usize) -> usize {
        node / self.nodes_per_job.max(1)
    }
}

/// One series of a node: its metric, extra labels and shape.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesDef {
    /// Metric name.
    pub name: &'static str,
    /// Job labels (job_id, user, account) or only node labels.
    pub job_scoped: bool,
    /// An extra label (`gpu`, or `cpu` and `mode`).
    pub extra: Vec<(&'static str, String)>,
    /// How it moves.
    pub shape: Shape,
}

/// The `j`-th series of every node.
pub fn series_def(j: usize) -> SeriesDef {
    let def = |name, job_scoped, extra, shape| SeriesDef {
        name,
        job_scoped,
        extra,
        shape,
    };
    if let Some(&(n, s)) = JOB.get(j) {
        return def(n, true, Vec::new(), s);
    }
    let j = j - JOB.len();
    if j < GPU.len() * GPUS {
        let (n, s) = GPU[j % GPU.len()];
        return def(n, true, vec![("gpu", (j / GPU.len()).to_string())], s);
    }
    let j = j - GPU.len() * GPUS;
    if let Some(&(n, s)) = NODE.get(j) {
        return def(n, false, Vec::new(), s);
    }
    let j = j - NODE.len();
    let (mode, share) = MODES[j % MODES.len()];
    def(
        "canopy_node_cpu_seconds_total",
        false,
        vec![
            ("cpu", (j / MODES.len()).to_string()),
            ("mode", mode.to_string()),
        ],
        ctr(share, if share == 0.0 { 1.0 } else { 0.0 }),
    )
}

/// The shape of the `j`-th series (as [`series_def`], without allocating).
fn shape_of(j: usize) -> Shape {
    if let Some(&(_, s)) = JOB.get(j) {
        return s;
    }
    let j = j - JOB.len();
    if j < GPU.len() * GPUS {
        return GPU[j % GPU.len()].1;
    }
    let j = j - GPU.len() * GPUS;
    if let Some(&(_, s)) = NODE.get(j) {
        return s;
    }
    let share = MODES[(j - NODE.len()) % MODES.len()].1;
    ctr(share, if share == 0.0 { 1.0 } else { 0.0 })
}

/// The sorted label pairs of series `j` on `node` (Prometheus wants
/// remote_write labels sorted by name).
pub fn labels(spec: &DataSpec, node: usize, j: usize) -> Vec<(String, String)> {
    let d = series_def(j);
    let job = spec.job_of(node);
    let mut l: Vec<(String, String)> = vec![
        ("__name__".into(), d.name.into()),
        ("node".into(), format!("n{node:05}")),
        (
            "partition".into(),
            PARTITIONS[job % PARTITIONS.len()].into(),
        ),
    ];
    if d.job_scoped {
        l.push(("job_id".into(), (4_000_000 + job).to_string()));
        l.push(("user".into(), USERS[job % USERS.len()].into()));
        l.push(("account".into(), ACCOUNTS[job % ACCOUNTS.len()].into()));
    }
    for (k, v) in d.extra {
        l.push((k.into(), v));
    }
    l.sort();
    l
}

/// The moving state of one series.
#[derive(Clone, Copy, Debug)]
struct SeriesState {
    value: f64,
    /// Multiplier of the counter's rate on this node (0 for flat ones).
    scale: f64,
    /// The step at which this counter resets to 0 (a restarted job), if any.
    reset_at: Option<usize>,
}

/// Generates the samples of a group of nodes step after step.
#[derive(Debug)]
pub struct NodeGroup {
    spec: DataSpec,
    nodes: std::ops::Range<usize>,
    state: Vec<SeriesState>,
    next_step: usize,
}

impl NodeGroup {
    /// The series of `nodes`, before their first step.
    pub fn new(spec: DataSpec, nodes: std::ops::Range<usize>) -> Self {
        let s = spec.seed;
        let mut state = Vec::with_capacity(nodes.len() * spec.series_per_node);
        for n in nodes.clone() {
            for j in 0..spec.series_per_node {
                let (n64, j64) = (n as u64, j as u64);
                let st = match shape_of(j) {
                    Shape::Counter { rate, flat } => {
                        let moving = unit(&[s, n64, j64, 1]) >= flat;
                        let scale = if moving {
                            rate * (0.2 + 1.6 * unit(&[s, n64, j64, 2]))
                        } else {
                            0.0
                        };
                        // Counters have been running for a while: 1 h to 10 days.
                        let age = 3600.0 + 860_000.0 * unit(&[s, n64, j64, 3]);
                        let reset = moving && unit(&[s, n64, j64, 4]) < 0.02;
                        SeriesState {
                            value: (rate * age).round(),
                            scale,
                            reset_at: reset
                                .then(|| (unit(&[s, n64, j64, 5]) * spec.steps as f64) as usize),
                        }
                    }
                    Shape::Gauge { .. } | Shape::Fixed { .. } => SeriesState {
                        value: 0.0,
                        scale: 0.0,
                        reset_at: None,
                    },
                };
                state.push(st);
            }
        }
        NodeGroup {
            spec,
            nodes,
            state,
            next_step: 0,
        }
    }

    /// Advances every series by one step and returns the values, node-major.
    fn step(&mut self) -> Vec<f64> {
        let k = self.next_step;
        self.next_step += 1;
        let (s, spn) = (self.spec.seed, self.spec.series_per_node);
        let secs = self.spec.interval_ms as f64 / 1000.0;
        let mut out = Vec::with_capacity(self.state.len());
        for (i, st) in self.state.iter_mut().enumerate() {
            let n = (self.nodes.start + i / spn) as u64;
            let j = i % spn;
            let v = match shape_of(j) {
                Shape::Counter { .. } => {
                    if st.reset_at == Some(k) {
                        st.value = 0.0;
                    } else if k > 0 && st.scale > 0.0 {
                        // Load swings slowly per node, with noise per step.
                        let phase = unit(&[s, n, 6]) * std::f64::consts::TAU;
                        let swing = 0.6 + 0.4 * (phase + k as f64 * secs / 600.0).sin();
                        let noise = 0.7 + 0.6 * unit(&[s, n, j as u64, k as u64, 7]);
                        let inc = st.scale * secs * swing * noise;
                        // Byte and op counters move in whole units.
                        let inc = if st.scale >= 1.0 {
                            inc.round()
                        } else {
                            (inc * 1e3).round() / 1e3
                        };
                        st.value += inc;
                    }
                    st.value
                }
                Shape::Gauge {
                    lo,
                    hi,
                    every,
                    quantum,
                } => {
                    let epoch = (k as u64 + n) / every.max(1);
                    let x = lo + (hi - lo) * unit(&[s, n, j as u64, epoch, 8]);
                    (x / quantum).round() * quantum
                }
                Shape::Fixed { value } => value,
            };
            out.push(v);
        }
        out
    }

    /// The next `steps` steps of every series as one request.
    pub fn request(&mut self, steps: usize) -> WriteRequest {
        let spn = self.spec.series_per_node;
        let first = self.next_step;
        let steps = steps.min(self.spec.steps.saturating_sub(first));
        let mut series: Vec<TimeSeries> = self
            .nodes
            .clone()
            .flat_map(|n| (0..spn).map(move |j| (n, j)))
            .map(|(n, j)| TimeSeries {
                labels: labels(&self.spec, n, j)
                    .into_iter()
                    .map(|(name, value)| Label { name, value })
                    .collect(),
                samples: Vec::with_capacity(steps),
            })
            .collect();
        for k in first..first + steps {
            let vals = self.step();
            for (i, (ts, v)) in series.iter_mut().zip(vals).enumerate() {
                let node = self.nodes.start + i / spn;
                ts.samples.push(Sample {
                    value: v,
                    timestamp: self.spec.ts_ms(node, k),
                });
            }
        }
        WriteRequest { timeseries: series }
    }
}

/// One encoded request body.
#[derive(Clone, Debug)]
pub struct Body {
    /// Snappy-compressed protobuf.
    pub bytes: Vec<u8>,
    /// Samples inside.
    pub samples: usize,
    /// The time slice it belongs to (bodies of slice `k` hold steps
    /// `k * steps_per_request ..`).
    pub slice: usize,
}

/// How the data is cut into requests and spread over senders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Concurrent senders; sender `i` owns a contiguous share of the nodes
    /// and sends them in time order.
    pub senders: usize,
    /// Nodes per request.
    pub nodes_per_request: usize,
    /// Steps per request.
    pub steps_per_request: usize,
}

/// The side-by-side's default data over `minutes` ending at the whole
/// second after `now_ms` (100 series a node, 8 nodes a job, 15 s steps,
/// seed 1) and its default cut (4 senders, 10 nodes x 4 steps a request):
/// what `tsdb-side-by-side` loads, for examples that replay it in-process.
pub fn default_set(nodes: usize, minutes: usize, now_ms: i64) -> (DataSpec, Cut) {
    set_at_interval(nodes, minutes, 15, now_ms)
}

/// The sample interval the replaying examples use: `SBS_INTERVAL_S`
/// (whole seconds), else the side-by-side's default 15 s.
pub fn interval_from_env() -> usize {
    std::env::var("SBS_INTERVAL_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(15)
}

/// [`default_set`] at another sample interval (whole seconds, at least 1):
/// the side-by-side's defaults with `--interval`, for the examples'
/// `SBS_INTERVAL_S`.
pub fn set_at_interval(
    nodes: usize,
    minutes: usize,
    interval_s: usize,
    now_ms: i64,
) -> (DataSpec, Cut) {
    let interval_s = interval_s.max(1);
    let spec = DataSpec {
        nodes,
        series_per_node: 100,
        nodes_per_job: 8,
        interval_ms: interval_s as i64 * 1000,
        steps: minutes * 60 / interval_s,
        end_ms: (now_ms / 1000 + 1) * 1000,
        seed: 1,
    };
    let cut = Cut {
        senders: 4,
        nodes_per_request: 10,
        steps_per_request: 4,
    };
    (spec, cut)
}

/// Every sender's bodies interleaved slice by slice (senders own disjoint
/// nodes), roughly the order concurrent senders deliver them in.
pub fn interleaved(bodies: &[Vec<Body>]) -> impl Iterator<Item = &Body> {
    let longest = bodies.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest).flat_map(move |i| bodies.iter().filter_map(move |list| list.get(i)))
}

/// The request bodies of every sender, each list in time order.
pub fn bodies(
    spec: &DataSpec,
    cut: &Cut,
) -> Result<Vec<Vec<Body>>, canopy_gateway::remote_write::RemoteWriteError> {
    let senders = cut.senders.clamp(1, spec.nodes.max(1));
    let per = spec.nodes.div_ceil(senders);
    let shares: Vec<std::ops::Range<usize>> = (0..senders)
        .map(|i| (i * per).min(spec.nodes)..((i + 1) * per).min(spec.nodes))
        .filter(|r| !r.is_empty())
        .collect();
    std::thread::scope(|sc| {
        let handles: Vec<_> = shares
            .into_iter()
            .map(|share| sc.spawn(move || sender_bodies(spec, cut, share)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a body generator thread panicked"))
            .collect()
    })
}

fn sender_bodies(
    spec: &DataSpec,
    cut: &Cut,
    share: std::ops::Range<usize>,
) -> Result<Vec<Body>, canopy_gateway::remote_write::RemoteWriteError> {
    let npr = cut.nodes_per_request.max(1);
    let spr = cut.steps_per_request.max(1);
    let mut groups: Vec<NodeGroup> = share
        .clone()
        .step_by(npr)
        .map(|a| NodeGroup::new(*spec, a..(a + npr).min(share.end)))
        .collect();
    let mut out = Vec::new();
    for slice in 0..spec.steps.div_ceil(spr) {
        for g in &mut groups {
            let req = g.request(spr);
            let samples = req.timeseries.iter().map(|t| t.samples.len()).sum();
            out.push(Body {
                bytes: canopy_gateway::remote_write::wire::encode(&req)?,
                samples,
                slice,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_of_matches_series_def() {
        for j in 0..300 {
            assert_eq!(shape_of(j), series_def(j).shape, "series {j}");
        }
        assert_eq!(series_def(0).name, IO_READ);
        let cpu = series_def(JOB.len() + GPU.len() * GPUS + NODE.len() + 7);
        assert_eq!(cpu.name, "canopy_node_cpu_seconds_total");
        assert_eq!(
            cpu.extra,
            vec![("cpu", "0".into()), ("mode", "steal".into())]
        );
    }
}
