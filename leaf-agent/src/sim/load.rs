//! A fixed load of simulated Slurm jobs, for measuring the leaf's own cost.
//!
//! [`SimJobs`] reports `jobs` jobs that all run for as long as it lives, each
//! with [`SERIES_PER_JOB`] series (the naming contract's job metrics, a few
//! more cgroup, perf, network and Lustre counters, and four GPUs with four
//! series each) under full attribution labels. Counters move every second, as
//! on a busy node; gauges are redrawn every few seconds to minutes, as the
//! kernel and NVML change them. Every value is a hash of (job, series, step),
//! so two runs see the same stream.

use canopy_proto::codec::SeriesKey;
use canopy_proto::model::{Labels, MetricKind};

use super::rng::{fold_mixed, hash, hash_on, hash_state, mix, range, range_of, str_hash, unit_of};
use super::{GIB, STEP_MS};
use crate::collect::{Collector, Observation, Sink};
use crate::error::LeafError;

/// GPUs per simulated job.
const GPUS: usize = 4;

/// How one series moves.
#[derive(Clone, Copy)]
enum Shape {
    /// A counter growing by about `rate` per second (times the job's scale).
    Counter { rate: f64 },
    /// A gauge fixed for the job's life.
    Fixed { value: f64 },
    /// A gauge redrawn in `[lo, hi)` every `every` seconds (1..=255).
    Gauge { lo: f64, hi: f64, every: u8 },
}

const G: f64 = GIB as f64;

/// The job-level series: (metric, shape).
const JOB_SERIES: [(&str, Shape); 24] = [
    ("canopy_job_cpu_seconds_total", Shape::Counter { rate: 8.0 }),
    ("canopy_job_cpus_allocated", Shape::Fixed { value: 16.0 }),
    (
        "canopy_job_memory_bytes",
        Shape::Gauge {
            lo: 4.0 * G,
            hi: 60.0 * G,
            every: 10,
        },
    ),
    (
        "canopy_job_memory_allocated_bytes",
        Shape::Fixed { value: 64.0 * G },
    ),
    (
        "canopy_job_memory_cache_bytes",
        Shape::Gauge {
            lo: 0.1 * G,
            hi: 8.0 * G,
            every: 30,
        },
    ),
    (
        "canopy_job_memory_swap_bytes",
        Shape::Gauge {
            lo: 0.0,
            hi: 1e6,
            every: 120,
        },
    ),
    (
        "canopy_job_io_read_bytes_total",
        Shape::Counter { rate: 2e7 },
    ),
    (
        "canopy_job_io_write_bytes_total",
        Shape::Counter { rate: 5e6 },
    ),
    (
        "canopy_job_io_read_ops_total",
        Shape::Counter { rate: 400.0 },
    ),
    (
        "canopy_job_io_write_ops_total",
        Shape::Counter { rate: 90.0 },
    ),
    (
        "canopy_job_pids",
        Shape::Gauge {
            lo: 16.0,
            hi: 80.0,
            every: 15,
        },
    ),
    ("canopy_job_gpus_allocated", Shape::Fixed { value: 4.0 }),
    (
        "canopy_job_energy_joules_total",
        Shape::Counter { rate: 900.0 },
    ),
    (
        "canopy_job_instructions_total",
        Shape::Counter { rate: 2e10 },
    ),
    ("canopy_job_cycles_total", Shape::Counter { rate: 1.6e10 }),
    (
        "canopy_job_cache_misses_total",
        Shape::Counter { rate: 3e7 },
    ),
    (
        "canopy_job_cpu_throttled_seconds_total",
        Shape::Counter { rate: 0.01 },
    ),
    (
        "canopy_job_cpu_pressure_seconds_total",
        Shape::Counter { rate: 0.05 },
    ),
    (
        "canopy_job_memory_pressure_seconds_total",
        Shape::Counter { rate: 0.002 },
    ),
    (
        "canopy_job_network_receive_bytes_total",
        Shape::Counter { rate: 4e7 },
    ),
    (
        "canopy_job_network_transmit_bytes_total",
        Shape::Counter { rate: 3e7 },
    ),
    (
        "canopy_job_lustre_read_bytes_total",
        Shape::Counter { rate: 1.5e7 },
    ),
    (
        "canopy_job_lustre_write_bytes_total",
        Shape::Counter { rate: 4e6 },
    ),
    ("canopy_job_lustre_open_total", Shape::Counter { rate: 3.0 }),
];

/// The per-GPU series: (metric, shape).
const GPU_SERIES: [(&str, Shape); 4] = [
    (
        "canopy_job_gpu_sm_utilization_ratio",
        Shape::Gauge {
            lo: 0.0,
            hi: 1.0,
            every: 5,
        },
    ),
    (
        "canopy_job_gpu_memory_used_bytes",
        Shape::Gauge {
            lo: 2.0 * G,
            hi: 80.0 * G,
            every: 10,
        },
    ),
    (
        "canopy_job_gpu_power_watts",
        Shape::Gauge {
            lo: 60.0,
            hi: 700.0,
            every: 2,
        },
    ),
    (
        "canopy_job_gpu_energy_joules_total",
        Shape::Counter { rate: 350.0 },
    ),
];

/// Series each simulated job reports.
pub const SERIES_PER_JOB: usize = JOB_SERIES.len() + GPUS * GPU_SERIES.len();

/// One series of one job: its labels, how it moves, and its current value.
#[derive(Clone, Debug)]
struct LoadSeries {
    labels: Labels,
    kind: MetricKind,
    /// The state of the hash fold after the series' key
    /// ([`hash_state`]): every draw of the series continues from it, so its
    /// key is not mixed again per draw.
    key_state: u64,
    /// Counters: mean growth per second (`lo`). Gauges: bounds and period
    /// (`every` 0 for a fixed value).
    lo: f64,
    hi: f64,
    every: u8,
    /// Gauges: the series' phase within its period (key mod `every`).
    phase: u8,
    value: f64,
    /// Gauges: the first step of the period after the one `value` was
    /// drawn for (`i64::MIN` before the first draw): steps only move
    /// forward, so the value is redrawn exactly when a step reaches it,
    /// with one comparison a step instead of a division.
    next: i64,
    /// The sender's key, once recorded.
    slot: Option<SeriesKey>,
}

impl LoadSeries {
    fn new(labels: Labels, key: u64, shape: Shape, scale: f64) -> Self {
        let (kind, lo, hi, every, value) = match shape {
            Shape::Counter { rate } => {
                let r = rate * scale;
                // A job that has been running for 10 min to a day.
                let start = (r * range(&[key, 2], 600.0, 86_400.0)).floor();
                (MetricKind::Counter, r, 0.0, 0, start)
            }
            Shape::Fixed { value } => (MetricKind::Gauge, value, value, 0u8, value),
            Shape::Gauge { lo, hi, every } => (MetricKind::Gauge, lo, hi, every, lo),
        };
        LoadSeries {
            labels,
            kind,
            key_state: hash_state(key),
            lo,
            hi,
            every,
            phase: if every > 0 {
                (key % u64::from(every)) as u8
            } else {
                0
            },
            value,
            next: i64::MIN,
            slot: None,
        }
    }

    /// Moves a counter by one step, `k`; `mixed_k` is `mix(k)` (the same for
    /// every series, so mixed once a step). The draws are `range(&[key, k],
    /// 0.5, 1.5)` and `unit(&[key, k, 3])` with the key's fold resumed.
    #[inline]
    fn step_counter(&mut self, mixed_k: u64) {
        // Whole units, 0.5x to 1.5x the mean rate; slow counters step by
        // one now and then.
        let h = fold_mixed(self.key_state, mixed_k);
        let r = self.lo * range_of(h, 0.5, 1.5);
        self.value += if r >= 1.0 {
            floor_nonneg(r)
        } else if unit_of(fold_mixed(h, MIXED_3)) < r {
            1.0
        } else {
            0.0
        };
    }

    /// Moves a gauge to step `to`: redrawn when its period changes.
    fn step_gauge(&mut self, to: i64) {
        if self.every == 0 {
            return;
        }
        // Still in the period of the value held (`advance_to` never
        // moves back).
        if to < self.next {
            return;
        }
        let every = i64::from(self.every);
        // Each series has its own phase within its period.
        let period = (to + i64::from(self.phase)).div_euclid(every);
        self.next = (period + 1)
            .saturating_mul(every)
            .saturating_sub(i64::from(self.phase));
        let v = range_of(
            hash_on(self.key_state, &[period as u64, 4]),
            self.lo,
            self.hi,
        );
        // Ratios to two decimals (as NVML's percent), the rest in whole units.
        self.value = if self.hi <= 1.0 {
            (v * 100.0).round() / 100.0
        } else {
            v.floor()
        };
    }
}

/// `mix(3)`: the last coordinate of a slow counter's second draw.
const MIXED_3: u64 = mix(3);

/// `r.floor()` for `r >= 0` without libm's `floor` (a call on baseline
/// x86-64): below 2^52 the truncating cast is exact and is the floor.
#[inline]
fn floor_nonneg(r: f64) -> f64 {
    if r < 4_503_599_627_370_496.0 {
        (r as i64) as f64
    } else {
        r.floor()
    }
}

/// A fixed set of simulated jobs; see the module documentation.
#[derive(Clone, Debug)]
pub struct SimJobs {
    series: Vec<LoadSeries>,
    /// Last simulated step, `None` before the first tick.
    step: Option<i64>,
}

impl SimJobs {
    /// `jobs` jobs on node `node`, with ids from 1000001 on; `seed` picks
    /// their users, sizes and values.
    pub fn new(node: &str, seed: u64, jobs: usize) -> Self {
        const USERS: [(&str, &str, &str); 4] = [
            ("alice", "physics", "cpu"),
            ("bob", "climate", "gpu"),
            ("chen", "bio", "cpu"),
            ("dana", "ml", "gpu"),
        ];
        let root = hash(&[seed, str_hash(node)]);
        let gpus: Vec<String> = (0..GPUS).map(|g| g.to_string()).collect();
        let mut series = Vec::with_capacity(jobs * SERIES_PER_JOB);
        for j in 0..jobs as u64 {
            let jk = hash(&[root, j]);
            let id = (1_000_001 + j).to_string();
            let (user, account, partition) = USERS[(jk % USERS.len() as u64) as usize];
            // Busy and idle jobs: counters grow at 0.05x to 1.5x the base rate.
            let scale = range(&[jk, 1], 0.05, 1.5);
            let base = [
                ("node", node),
                ("job_id", id.as_str()),
                ("user", user),
                ("account", account),
                ("partition", partition),
            ];
            let all = JOB_SERIES.iter().map(|s| (s, None)).chain(
                gpus.iter()
                    .flat_map(|g| GPU_SERIES.iter().map(move |s| (s, Some(g.as_str())))),
            );
            for (i, ((name, shape), gpu)) in all.enumerate() {
                let mut pairs = base.to_vec();
                if let Some(g) = gpu {
                    pairs.push(("gpu", g));
                }
                let key = hash(&[jk, i as u64]);
                series.push(LoadSeries::new(
                    Labels::metric_strs(name, pairs),
                    key,
                    *shape,
                    scale,
                ));
            }
        }
        SimJobs { series, step: None }
    }

    /// Number of series reported per tick.
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    /// Moves to step `s` (at most one hour is replayed); earlier steps are ignored.
    fn advance_to(&mut self, s: i64) {
        let from = match self.step {
            Some(p) if s <= p => return,
            Some(p) => p.max(s - 3600),
            None => s - 1,
        };
        // One pass over the series (each moves on its own draws, so the
        // order of series and steps does not matter): a counter steps
        // through every step, a gauge moves to the last.
        if from + 1 == s {
            let mixed_k = mix(s as u64);
            for x in &mut self.series {
                if x.kind == MetricKind::Counter {
                    x.step_counter(mixed_k);
                } else {
                    x.step_gauge(s);
                }
            }
        } else {
            for x in &mut self.series {
                if x.kind == MetricKind::Counter {
                    for k in from + 1..=s {
                        x.step_counter(mix(k as u64));
                    }
                } else {
                    x.step_gauge(s);
                }
            }
        }
        self.step = Some(s);
    }
}

impl Collector for SimJobs {
    fn name(&self) -> &'static str {
        "sim_jobs"
    }

    fn set_tick_time(&mut self, ts_ms: i64) {
        self.advance_to(ts_ms.div_euclid(STEP_MS));
    }

    /// Appends every job's series at the current step. Never fails.
    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if self.step.is_none() {
            self.advance_to(0);
        }
        out.extend(self.series.iter().map(|x| Observation {
            labels: x.labels.clone(),
            kind: x.kind,
            value: x.value,
        }));
        Ok(())
    }

    /// Records every job's series by key: labels are built once, in `new`.
    fn collect_into(&mut self, sink: &mut Sink<'_>) -> Result<(), LeafError> {
        if self.step.is_none() {
            self.advance_to(0);
        }
        for x in &mut self.series {
            sink.record(&mut x.slot, &x.labels, x.kind, x.value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn snap(s: &mut SimJobs, ts: i64) -> Vec<Observation> {
        s.set_tick_time(ts);
        let mut out = Vec::new();
        s.collect(&mut out).expect("sim collect never fails");
        out
    }

    fn values(o: &[Observation]) -> Vec<f64> {
        o.iter().map(|x| x.value).collect()
    }

    #[test]
    fn a_series_stays_small() {
        // 2,000 of them live in the leaf-overhead benchmark's leaf: its
        // RSS goal is tight. 72 bytes since a `Labels` handle is 16 bytes
        // (a fat `Arc<str>`): its label buffer became one allocation
        // instead of three, so a series with its own labels costs less
        // in all (the leaf measured 9.9 MiB peak either way).
        assert!(std::mem::size_of::<Labels>() <= 16);
        assert!(std::mem::size_of::<LoadSeries>() <= 72);
    }

    #[test]
    fn fifty_jobs_of_forty_labelled_series() {
        let mut s = SimJobs::new("n1", 7, 50);
        let obs = snap(&mut s, 1_700_000_000_000);
        assert_eq!(SERIES_PER_JOB, 40);
        assert_eq!(obs.len(), 50 * 40);
        assert_eq!(s.series_count(), 2000);
        let distinct: BTreeSet<String> = obs.iter().map(|o| o.labels.to_string()).collect();
        assert_eq!(distinct.len(), obs.len(), "every series is distinct");
        for o in &obs {
            for l in ["node", "job_id", "user", "account", "partition"] {
                assert!(o.labels.get(l).is_some(), "{} lacks {l}", o.labels);
            }
            assert!(o.value.is_finite() && o.value >= 0.0, "{}", o.labels);
        }
        let jobs: BTreeSet<&str> = obs.iter().filter_map(|o| o.labels.get("job_id")).collect();
        assert_eq!(jobs.len(), 50);
    }

    /// Runs `s` through `collect_into` for one tick at `ts`; returns the
    /// table's (labels, value) and the plain observations left over.
    fn sink_tick(
        s: &mut SimJobs,
        tx: &mut canopy_proto::codec::Sender,
        ts: i64,
    ) -> (Vec<(String, f64)>, usize) {
        let src = tx.source("n1", 1000);
        tx.begin_tick(ts);
        tx.tick_source(src, ts);
        s.set_tick_time(ts);
        let mut obs = Vec::new();
        s.collect_into(&mut Sink::new(tx, src, &mut obs))
            .expect("sim collect never fails");
        let (table, _) = tx.finish_tick();
        let mut rows: Vec<(String, f64)> = table
            .iter()
            .map(|(_, e)| (e.labels.to_string(), e.value))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        tx.end_tick();
        (rows, obs.len())
    }

    #[test]
    fn recording_by_key_matches_the_observations() {
        use canopy_proto::codec::{BoundsPolicy, Sender};
        let t0 = 1_700_000_000_000;
        let mut by_key = SimJobs::new("n1", 7, 3);
        let mut plain = SimJobs::new("n1", 7, 3);
        let mut tx = Sender::new(BoundsPolicy::default());
        for i in 0..5 {
            let ts = t0 + i * 1000;
            let (rows, left) = sink_tick(&mut by_key, &mut tx, ts);
            assert_eq!(left, 0, "everything recorded by key");
            assert!(by_key.series.iter().all(|x| x.slot.is_some()));
            let obs = snap(&mut plain, ts);
            let mut want: Vec<(String, f64)> = obs
                .iter()
                .map(|o| (o.labels.to_string(), o.value))
                .collect();
            want.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(rows.len(), want.len());
            for (r, w) in rows.iter().zip(&want) {
                assert_eq!(r.0, w.0);
                // The table holds quantised values: within the default bounds.
                assert!(
                    (r.1 - w.1).abs() <= 1e-3 * w.1.abs().max(1.0),
                    "{r:?} vs {w:?}"
                );
            }
        }
    }

    #[test]
    fn counters_grow_gauges_change_and_runs_repeat() {
        let t0 = 1_700_000_000_000;
        let mut a = SimJobs::new("n1", 7, 3);
        let first = snap(&mut a, t0);
        let mut last = first.clone();
        let mut gauge_changes = 0;
        for i in 1..=60 {
            let now = snap(&mut a, t0 + i * 1000);
            for (p, n) in last.iter().zip(&now) {
                assert_eq!(p.labels, n.labels);
                if n.kind == MetricKind::Counter {
                    assert!(n.value >= p.value, "{} went down", n.labels);
                } else if n.value != p.value {
                    gauge_changes += 1;
                }
            }
            last = now;
        }
        let cpu = |o: &[Observation]| {
            o.iter()
                .find(|x| x.labels.name() == "canopy_job_cpu_seconds_total")
                .map(|x| x.value)
                .expect("cpu series")
        };
        assert!(cpu(&last) > cpu(&first), "busy counters move");
        assert!(gauge_changes > 0, "gauges are redrawn");
        // Same seed, same node: the same stream, however the ticks were split.
        let mut b = SimJobs::new("n1", 7, 3);
        snap(&mut b, t0);
        let b_last = snap(&mut b, t0 + 60_000);
        assert_eq!(values(&b_last), values(&last));
        assert_ne!(values(&b_last), values(&first));
    }
}
