//! Simulator tests: determinism, job life cycle, counter monotonicity, labels.

#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use canopy_proto::model::{Labels, MetricKind};

use super::*;

const T0: i64 = 1_700_000_000_000;

fn snapshot(n: &mut SimNode) -> Vec<Observation> {
    let mut out = Vec::new();
    n.collect(&mut out).unwrap();
    out
}

fn as_map(obs: &[Observation]) -> BTreeMap<String, f64> {
    obs.iter()
        .map(|o| (o.labels.to_string(), o.value))
        .collect()
}

fn job_ids(obs: &[Observation]) -> BTreeSet<String> {
    obs.iter()
        .filter_map(|o| o.labels.get("job_id").map(str::to_string))
        .collect()
}

/// Runs `n` for `secs` one-second ticks after booting at T0; one snapshot per tick.
fn run(name: &str, seed: u64, cpus: u32, secs: i64) -> Vec<Vec<Observation>> {
    let mut n = SimNode::new(name, seed, cpus);
    n.set_time(T0);
    (0..=secs)
        .map(|i| {
            n.advance(T0 + i * 1000);
            snapshot(&mut n)
        })
        .collect()
}

#[test]
fn same_seed_same_output_however_time_is_split() {
    let mut a = SimNode::new("cn001", 42, 32);
    let mut b = SimNode::new("cn001", 42, 32);
    a.set_time(T0);
    b.set_time(T0);
    assert_eq!(snapshot(&mut a), snapshot(&mut b));
    for i in 1..=600 {
        a.advance(T0 + i * 1000 + 250);
    }
    b.advance(T0 + 250_000);
    b.advance(T0 + 600_250);
    assert_eq!(snapshot(&mut a), snapshot(&mut b));
    let mut c = SimNode::new("cn001", 43, 32);
    c.set_time(T0);
    c.advance(T0 + 600_250);
    assert_ne!(as_map(&snapshot(&mut a)), as_map(&snapshot(&mut c)));
}

#[test]
fn jobs_start_and_end_within_an_hour() {
    let (mut started, mut ended) = (0, 0);
    for node in ["cn001", "cn002", "cn003", "cn004"] {
        let snaps = run(node, 7, 64, 3600);
        for w in snaps.windows(2) {
            let (before, after) = (job_ids(&w[0]), job_ids(&w[1]));
            started += after.difference(&before).count();
            ended += before.difference(&after).count();
        }
    }
    assert!(started >= 4, "started {started}");
    assert!(ended >= 4, "ended {ended}");
}

#[test]
fn ended_jobs_series_vanish_and_running_jobs_report() {
    let mut n = SimNode::new("cn002", 7, 64);
    n.set_time(T0);
    for i in 1..=3600 {
        n.advance(T0 + i * 1000);
        let ids: BTreeSet<String> = n.running_jobs().iter().map(u64::to_string).collect();
        assert_eq!(job_ids(&snapshot(&mut n)), ids);
    }
}

#[test]
fn counters_never_decrease() {
    for node in ["cn001", "gpu01", "cn003"] {
        let snaps = run(node, 3, 48, 1800);
        let mut last: HashMap<Labels, f64> = HashMap::new();
        for s in &snaps {
            for o in s.iter().filter(|o| o.kind == MetricKind::Counter) {
                if let Some(prev) = last.insert(o.labels.clone(), o.value) {
                    assert!(o.value >= prev, "{} went {prev} -> {}", o.labels, o.value);
                }
            }
        }
    }
}

#[test]
fn every_series_is_labelled_and_unique() {
    let mut gpu_series = 0;
    for i in 0..16 {
        let mut n = SimNode::new(&format!("cn{i:03}"), 11, 64);
        n.set_time(T0);
        n.advance(T0 + 120_000);
        let out = snapshot(&mut n);
        let mut seen = BTreeSet::new();
        for o in &out {
            assert!(seen.insert(o.labels.clone()), "duplicate {}", o.labels);
            assert_eq!(o.labels.get("node"), Some(n.node_name()));
            assert!(
                o.value.is_finite() && o.value >= 0.0,
                "{} = {}",
                o.labels,
                o.value
            );
            if o.labels.name().starts_with("canopy_job_") {
                for l in ["job_id", "user", "account", "partition"] {
                    assert!(o.labels.get(l).is_some(), "{} lacks {l}", o.labels);
                }
            }
            if o.labels.name() == "canopy_job_gpu_sm_utilization_ratio" {
                gpu_series += 1;
                assert_eq!(o.labels.get("partition"), Some("gpu"));
                assert!(o.labels.get("gpu").is_some());
                assert!(o.value <= 1.0);
            }
        }
        let m = as_map(&out);
        let get = |k: &str| {
            m.iter()
                .find(|(l, _)| l.starts_with(k))
                .map(|(_, v)| *v)
                .unwrap()
        };
        assert!(get("canopy_node_memory_available_bytes") <= get("canopy_node_memory_total_bytes"));
    }
    assert!(gpu_series > 0, "no GPU jobs on 16 nodes");
}

#[test]
fn a_multi_node_job_has_the_same_labels_everywhere() {
    let mut by_job: HashMap<String, Vec<Labels>> = HashMap::new();
    for i in 0..200 {
        let mut n = SimNode::new(&format!("cn{i:03}"), 5, 64);
        n.set_time(T0);
        for o in snapshot(&mut n) {
            if o.labels.name() == "canopy_job_cpus_allocated" {
                let mut l = o.labels.clone();
                l.remove("node");
                by_job
                    .entry(l.get("job_id").unwrap_or("").to_string())
                    .or_default()
                    .push(l);
            }
        }
    }
    let multi: Vec<_> = by_job.values().filter(|v| v.len() > 1).collect();
    assert!(!multi.is_empty(), "no job on two nodes among 200");
    for v in multi {
        let mut v = v.clone();
        for l in &mut v {
            l.remove("__name__");
        }
        // cpus may differ per node only by capping; labels never.
        assert!(v.windows(2).all(|w| w[0] == w[1]), "{v:?}");
    }
}

#[test]
fn some_jobs_under_use_their_allocation() {
    let (mut under_cpu, mut under_mem, mut jobs) = (0, 0, 0);
    for i in 0..12 {
        let snaps = run(&format!("cn{i:03}"), 9, 64, 300);
        let (a, b) = (as_map(&snaps[60]), as_map(&snaps[300]));
        for (k, alloc) in b
            .iter()
            .filter(|(k, _)| k.starts_with("canopy_job_cpus_allocated"))
        {
            let cpu_key = k.replace("canopy_job_cpus_allocated", "canopy_job_cpu_seconds_total");
            let mem_key = k.replace("canopy_job_cpus_allocated", "canopy_job_memory_bytes");
            let mem_alloc = k.replace(
                "canopy_job_cpus_allocated",
                "canopy_job_memory_allocated_bytes",
            );
            let (Some(c0), Some(c1)) = (a.get(&cpu_key), b.get(&cpu_key)) else {
                continue;
            };
            jobs += 1;
            let eff = (c1 - c0) / 240.0 / alloc;
            assert!(eff <= 1.0 + 1e-9, "{k}: {eff}");
            under_cpu += usize::from(eff < 0.4);
            under_mem += usize::from(b[&mem_key] < 0.3 * b[&mem_alloc]);
            assert!(b[&mem_key] <= b[&mem_alloc]);
        }
    }
    assert!(jobs >= 10, "{jobs} jobs");
    assert!(
        under_cpu >= 1 && under_cpu < jobs,
        "{under_cpu}/{jobs} under-use CPUs"
    );
    assert!(under_mem >= 1, "{under_mem}/{jobs} under-use memory");
}

#[test]
fn gauges_change_every_few_ticks_not_every_tick() {
    let snaps = run("cn001", 21, 64, 600);
    let mut changes: HashMap<&str, (usize, usize)> = HashMap::new();
    let (mut prev, mut prev_map) = (None::<BTreeMap<String, f64>>, BTreeMap::new());
    for s in &snaps {
        let m = as_map(s);
        if prev.is_some() {
            for o in s {
                if let Some(p) = prev_map.get(&o.labels.to_string()) {
                    let e = changes.entry(o.labels.name()).or_default();
                    e.0 += usize::from(*p != o.value);
                    e.1 += 1;
                }
            }
        }
        prev_map = m.clone();
        prev = Some(m);
    }
    let ratio = |name: &str| {
        let (c, n) = changes[name];
        c as f64 / n as f64
    };
    assert!(ratio("canopy_node_cpu_seconds_total") > 0.5);
    assert!(
        ratio("canopy_node_load1") < 0.25,
        "{}",
        ratio("canopy_node_load1")
    );
    assert!(
        ratio("canopy_job_memory_bytes") < 0.25,
        "{}",
        ratio("canopy_job_memory_bytes")
    );
    assert_eq!(ratio("canopy_node_memory_total_bytes"), 0.0);
}

#[test]
fn time_going_back_is_ignored_and_long_gaps_reboot() {
    let mut n = SimNode::new("cn001", 1, 8);
    n.advance(T0);
    n.advance(T0 + 10_000);
    let before = snapshot(&mut n);
    n.advance(T0 + 5_000);
    assert_eq!(snapshot(&mut n), before);
    n.advance(T0 + 10_000 + MAX_CATCHUP_MS + 1);
    assert_eq!(n.now_ms(), T0 + 10_000 + MAX_CATCHUP_MS + 1);
}
