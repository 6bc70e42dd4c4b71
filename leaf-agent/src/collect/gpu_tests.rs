//! Tests of GPU parsing and per-job mapping (no GPU here: amdgpu sysfs
//! fixtures and recorded NVML-shaped values) and per-job energy.

#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::gpu::nvml::{RunningProcess, UtilSample, merge_processes};
use super::gpu::{GpuProcess, job_from_proc_cgroup, node_sm_utilization, per_job};
use super::*;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn value(obs: &[Observation], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let hits: Vec<f64> = obs
        .iter()
        .filter(|o| {
            o.labels.name() == name && labels.iter().all(|(k, v)| o.labels.get(k) == Some(v))
        })
        .map(|o| o.value)
        .collect();
    assert!(hits.len() <= 1, "{name} {labels:?} matched {}", hits.len());
    hits.first().copied()
}

#[test]
fn amdgpu_sysfs_fixture() {
    let mut c = gpu::amd::AmdGpuCollector::new("n1", &data("sys-hpc"));
    let mut out = Vec::new();
    c.collect(&mut out).unwrap();
    let g = |name| value(&out, name, &[("gpu", "card0")]);
    assert_eq!(g("canopy_node_gpu_busy_ratio"), Some(0.87));
    assert_eq!(
        g("canopy_node_gpu_memory_used_bytes"),
        Some(34_359_738_368.0)
    );
    assert_eq!(
        g("canopy_node_gpu_memory_total_bytes"),
        Some(68_702_699_520.0)
    );
    assert_eq!(g("canopy_node_gpu_power_watts"), Some(301.0));
    assert_eq!(g("canopy_node_gpu_temperature_celsius"), Some(52.0));
    // amdgpu has no SM figure; card1 (BMC VGA), the connector and the render
    // node are not GPUs.
    assert_eq!(g("canopy_node_gpu_sm_utilization_ratio"), None);
    assert_eq!(out.len(), 5);
    assert!(
        gpu::amd::is_card("card12")
            && !gpu::amd::is_card("card0-DP-1")
            && !gpu::amd::is_card("renderD128")
    );
}

#[test]
fn amdgpu_power_input_and_garbage() {
    let f = gpu::amd::AmdCardFiles {
        gpu_busy_percent: Some("250\n".into()),
        vram_used: Some("x".into()),
        power1_input: Some("99000000\n".into()),
        ..Default::default()
    };
    let s = gpu::amd::parse_card("card2", &f);
    assert_eq!(s.busy, Some(1.0), "clamped to 100 %");
    assert_eq!(s.memory_used_bytes, None);
    assert_eq!(s.power_watts, Some(99.0));
}

#[test]
fn job_of_process_from_proc_cgroup() {
    let t = |f: &str| std::fs::read_to_string(data(&format!("gpu/{f}"))).unwrap();
    assert_eq!(
        job_from_proc_cgroup(&t("proc-cgroup-v1")).as_deref(),
        Some("4321")
    );
    assert_eq!(
        job_from_proc_cgroup(&t("proc-cgroup-v2")).as_deref(),
        Some("4322")
    );
    assert_eq!(job_from_proc_cgroup(&t("proc-cgroup-outside")), None);
    assert_eq!(job_from_proc_cgroup("0::/x/job_/y\n0::/job_12a"), None);
}

/// NVML-shaped values as `nvidia-smi` shows them on a shared 2-GPU node:
/// GPU 0 runs two processes of job 4321 and one outside any job; GPU 1 is in
/// MIG mode (no per-process SM samples) with processes of jobs 4321 and 4322.
fn recorded() -> Vec<GpuProcess> {
    let gpu0_running = [
        RunningProcess {
            pid: 2001,
            memory_bytes: Some(8 << 30),
            mig: None,
        },
        RunningProcess {
            pid: 2002,
            memory_bytes: Some(4 << 30),
            mig: None,
        },
        RunningProcess {
            pid: 3001,
            memory_bytes: Some(1 << 30),
            mig: None,
        },
    ];
    let gpu0_samples = [
        UtilSample {
            pid: 2001,
            timestamp_us: 1_000,
            sm_percent: 30,
        },
        UtilSample {
            pid: 2001,
            timestamp_us: 2_000,
            sm_percent: 55,
        },
        UtilSample {
            pid: 2002,
            timestamp_us: 2_000,
            sm_percent: 70,
        },
    ];
    let gpu1_running = [
        RunningProcess {
            pid: 2003,
            memory_bytes: Some(10 << 30),
            mig: Some((1, 0)),
        },
        RunningProcess {
            pid: 4001,
            memory_bytes: Some(5 << 30),
            mig: Some((2, 0)),
        },
    ];
    let mut v = merge_processes("0", &gpu0_running, Some(&gpu0_samples));
    v.extend(merge_processes("1", &gpu1_running, None));
    v
}

#[test]
fn nvml_merge_takes_latest_sample_and_zero_for_idle() {
    let p = recorded();
    assert_eq!(p[0].sm_percent, Some(55), "latest sample wins");
    assert_eq!(p[1].sm_percent, Some(70));
    assert_eq!(p[2].sm_percent, Some(0), "running without sample = idle");
    assert_eq!(p[3].sm_percent, None, "MIG: no sampling");
    // A sampled process that already left the running list is kept.
    let gone = merge_processes(
        "0",
        &[],
        Some(&[UtilSample {
            pid: 9,
            timestamp_us: 1,
            sm_percent: 5,
        }]),
    );
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].memory_bytes, None);
    assert_eq!(
        node_sm_utilization(&p, "0"),
        Some(1.0),
        "55 + 70 capped at 1"
    );
    assert_eq!(node_sm_utilization(&p, "1"), None);
    // An idle GPU that can sample reads 0, a MIG one stays unknown.
    use super::gpu::nvml::device_sm_utilization;
    assert_eq!(device_sm_utilization(&[], "2", true), Some(0.0));
    assert_eq!(device_sm_utilization(&p, "1", false), None);
    assert_eq!(device_sm_utilization(&p, "0", true), Some(1.0));
}

#[test]
fn gpu_processes_map_to_jobs() {
    let pid_jobs: HashMap<u32, String> = [
        (2001, "4321"),
        (2002, "4321"),
        (2003, "4321"),
        (4001, "4322"),
    ]
    .into_iter()
    .map(|(p, j)| (p, j.to_string()))
    .collect();
    let jobs = per_job(&recorded(), &pid_jobs);
    let key = |j: &str, g: &str, m: &str| (j.to_string(), g.to_string(), m.to_string());
    let j0 = jobs[&key("4321", "0", "")];
    assert_eq!(j0.sm_utilization, Some(1.0));
    assert_eq!(j0.memory_bytes, 12 << 30);
    let outside = jobs[&key("", "0", "")];
    assert_eq!(outside.sm_utilization, Some(0.0));
    assert_eq!(outside.memory_bytes, 1 << 30);
    let mig = jobs[&key("4322", "1", "gi2/ci0")];
    assert_eq!(mig.sm_utilization, None);
    assert_eq!(mig.memory_bytes, 5 << 30);
    assert_eq!(jobs.len(), 4);

    let mut out = Vec::new();
    gpu::job_observations("n1", &jobs, &mut out);
    assert_eq!(
        value(
            &out,
            "canopy_job_gpu_sm_utilization_ratio",
            &[("job_id", "4321"), ("gpu", "0")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &out,
            "canopy_job_gpu_memory_bytes",
            &[("job_id", "4321"), ("gpu", "1"), ("mig", "gi1/ci0")]
        ),
        Some((10u64 << 30) as f64)
    );
    // The MIG instance has memory but no SM series.
    assert_eq!(
        out.iter()
            .filter(|o| o.labels.name() == "canopy_job_gpu_sm_utilization_ratio")
            .count(),
        2
    );
}

#[test]
fn nvml_without_driver_degrades_once() {
    // No libnvidia-ml.so on this machine (nor on CI): the collector says so
    // once and exports nothing. Where a driver is present it must find a GPU.
    let mut c = gpu::nvml::NvmlCollector::new("n1", Path::new("/proc"));
    let mut out = Vec::new();
    for _ in 0..5 {
        c.collect(&mut out).unwrap();
    }
    match c.probe().state() {
        probe::ProbeState::Absent => {
            assert!(out.is_empty());
            assert_eq!(c.probe().notices(), 1);
            assert_eq!(c.probe().attempts(), 1, "no re-probe within 300 ticks");
        }
        probe::ProbeState::Present => {
            assert!(
                out.iter()
                    .any(|o| o.labels.name() == "canopy_node_gpu_memory_total_bytes")
            );
        }
        probe::ProbeState::Unknown => panic!("collect never probed"),
    }
}

#[test]
fn energy_split_by_cpu_share() {
    // 100 J over the tick, node busy 4 CPU-s: job a used 2, job b 1.
    let s = job_energy::split_energy(100.0, 4.0, &[("a", 2.0), ("b", 1.0)]);
    assert_eq!(s, vec![("a", 50.0), ("b", 25.0)]);
    // Jobs' CPU above the node's (read skew): never more than the node used.
    let s = job_energy::split_energy(100.0, 2.0, &[("a", 3.0), ("b", 1.0)]);
    assert_eq!(s, vec![("a", 75.0), ("b", 25.0)]);
    // Idle node, negative delta (reset): nothing charged.
    assert_eq!(
        job_energy::split_energy(100.0, 0.0, &[("a", 0.0)]),
        vec![("a", 0.0)]
    );
    assert_eq!(
        job_energy::split_energy(-5.0, 2.0, &[("a", 1.0)]),
        vec![("a", 0.0)]
    );
    assert_eq!(
        job_energy::split_energy(10.0, 2.0, &[("a", -1.0)]),
        vec![("a", 0.0)]
    );
}

fn tick(energy: f64, user: f64, idle: f64, jobs: &[(&str, f64)]) -> Vec<Observation> {
    let mut v = vec![
        Observation::counter(
            "canopy_node_energy_joules_total",
            "n1",
            &[("zone", "package-0")],
            energy,
        ),
        Observation::counter(
            "canopy_node_energy_joules_total",
            "n1",
            &[("zone", "package-0/core")],
            energy / 2.0,
        ),
        Observation::counter(
            "canopy_node_cpu_seconds_total",
            "n1",
            &[("mode", "user")],
            user,
        ),
        Observation::counter(
            "canopy_node_cpu_seconds_total",
            "n1",
            &[("mode", "idle")],
            idle,
        ),
    ];
    for (j, cpu) in jobs {
        v.push(Observation::counter(
            "canopy_job_cpu_seconds_total",
            "n1",
            &[("job_id", j), ("user", "alice"), ("account", "phys")],
            *cpu,
        ));
    }
    v
}

#[test]
fn job_energy_derives_from_the_tick_buffer() {
    let mut c = job_energy::JobEnergyCollector::new();
    let mut t1 = tick(1000.0, 10.0, 50.0, &[("7", 5.0)]);
    c.collect(&mut t1).unwrap();
    let e = |obs: &[Observation], j| value(obs, "canopy_job_energy_joules_total", &[("job_id", j)]);
    assert_eq!(e(&t1, "7"), Some(0.0), "first sight: baseline");
    // +200 J (package only; core is inside it), node busy +4 s, job 7 +3 s,
    // job 8 new. Idle time does not count as busy.
    let mut t2 = tick(1200.0, 14.0, 90.0, &[("7", 8.0), ("8", 1.0)]);
    c.collect(&mut t2).unwrap();
    assert_eq!(e(&t2, "7"), Some(150.0));
    assert_eq!(e(&t2, "8"), Some(0.0));
    let o = t2
        .iter()
        .find(|o| o.labels.name() == "canopy_job_energy_joules_total")
        .unwrap();
    assert_eq!(o.labels.get("user"), Some("alice"), "job labels carried");
    assert_eq!(o.kind, canopy_proto::MetricKind::Counter);
    let mut t3 = tick(1300.0, 16.0, 90.0, &[("7", 9.0), ("8", 2.0)]);
    c.collect(&mut t3).unwrap();
    assert_eq!(e(&t3, "7"), Some(200.0));
    assert_eq!(e(&t3, "8"), Some(50.0));
    // No RAPL on the node: nothing derived.
    let mut none = vec![Observation::counter(
        "canopy_job_cpu_seconds_total",
        "n1",
        &[("job_id", "7")],
        1.0,
    )];
    c.collect(&mut none).unwrap();
    assert_eq!(none.len(), 1);
}

#[test]
fn device_job_series_get_the_job_labels() {
    let mut obs = vec![
        Observation::counter(
            "canopy_job_cpu_seconds_total",
            "n1",
            &[
                ("job_id", "7"),
                ("user", "alice"),
                ("account", "phys"),
                ("partition", "gpu"),
            ],
            3.0,
        ),
        Observation::gauge(
            "canopy_job_gpu_sm_utilization_ratio",
            "n1",
            &[("job_id", "7"), ("gpu", "0")],
            0.5,
        ),
        Observation::gauge(
            "canopy_job_gpu_sm_utilization_ratio",
            "n1",
            &[("job_id", "9"), ("gpu", "1")],
            0.2,
        ),
        Observation::gauge("canopy_job_gpu_memory_bytes", "n1", &[("gpu", "1")], 1.0),
        Observation::gauge(
            "canopy_job_gpu_memory_bytes",
            "n2",
            &[("job_id", "7"), ("gpu", "0")],
            1.0,
        ),
    ];
    job_labels::JobLabelsCollector.collect(&mut obs).unwrap();
    let l = &obs[1].labels;
    assert_eq!(
        (l.get("user"), l.get("account"), l.get("partition")),
        (Some("alice"), Some("phys"), Some("gpu"))
    );
    assert_eq!(l.get("gpu"), Some("0"));
    assert_eq!(obs[2].labels.get("user"), None, "unknown job left alone");
    assert_eq!(obs[3].labels.get("user"), None, "outside any job");
    assert_eq!(obs[4].labels.get("user"), None, "other node");
    assert_eq!(obs[0].labels.get("user"), Some("alice"));
}
