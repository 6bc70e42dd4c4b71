//! GPU per process through DRM fdinfo, on a `/proc` fixture whose fdinfo
//! files follow Documentation/gpu/drm-usage-stats.rst as amdgpu (before and
//! after kernel 6.11) and i915 print it. No AMD or Intel GPU here: fixtures
//! only.

#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::gpu::drm::{
    DrmAccount, DrmClient, DrmFdinfoCollector, is_drm_node, parse_fdinfo, pci_slot_from_uevent,
};
use super::*;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn find(obs: &[Observation], name: &str, l: &[(&str, Option<&str>)]) -> Option<f64> {
    let hits: Vec<&Observation> = obs
        .iter()
        .filter(|o| o.labels.name() == name && l.iter().all(|(k, v)| o.labels.get(k) == *v))
        .collect();
    assert!(hits.len() <= 1, "{name} {l:?}: {}", hits.len());
    hits.first().map(|o| o.value)
}

#[test]
fn drm_fdinfo_parsers_on_recorded_formats() {
    let old = std::fs::read_to_string(data("drm/proc/4242/fdinfo/5")).unwrap();
    let c = parse_fdinfo(&old).unwrap().expect("a DRM client");
    assert_eq!(c.driver, "amdgpu");
    assert_eq!(c.client_id, 42);
    assert_eq!(c.pdev.as_deref(), Some("0000:03:00.0"));
    assert_eq!(c.engines_ns["gfx"], 2_207_403_740);
    assert_eq!(c.engines_ns["compute"], 55_436_813_524);
    // drm-memory-vram only (gtt and cpu are host memory).
    assert_eq!(c.device_memory_bytes, Some(1_044_480 * 1024));
    let new = std::fs::read_to_string(data("drm/proc/4243/fdinfo/6")).unwrap();
    let c = parse_fdinfo(&new).unwrap().unwrap();
    assert_eq!(c.device_memory_bytes, Some(512 << 20));
    let i915 = std::fs::read_to_string(data("drm/proc/6000/fdinfo/8")).unwrap();
    let c = parse_fdinfo(&i915).unwrap().unwrap();
    assert_eq!(c.driver, "i915");
    assert!(!c.engines_ns.contains_key("capacity-video"));
    assert_eq!(c.engines_ns["video-enhance"], 0);
    assert_eq!(c.device_memory_bytes, Some(2 << 30));
    // Not a DRM fd; garbage numbers are errors, not panics.
    let plain = std::fs::read_to_string(data("drm/proc/4242/fdinfo/3")).unwrap();
    assert_eq!(parse_fdinfo(&plain).unwrap(), None);
    let bad = std::fs::read_to_string(data("drm/proc/7000/fdinfo/10")).unwrap();
    assert!(parse_fdinfo(&bad).is_err());
    assert!(parse_fdinfo("drm-driver: x\ndrm-client-id: -1\n").is_err());
    assert!(parse_fdinfo("drm-driver: x\ndrm-client-id: 1\ndrm-memory-vram: 1 TiB\n").is_err());
    let ue = std::fs::read_to_string(data("sys-hpc/class/drm/card0/device/uevent")).unwrap();
    assert_eq!(pci_slot_from_uevent(&ue).as_deref(), Some("0000:03:00.0"));
    assert!(is_drm_node(Path::new("/dev/dri/renderD128")));
    assert!(is_drm_node(Path::new("/dev/dri/card1")));
    assert!(!is_drm_node(Path::new("/dev/null")));
    assert!(!is_drm_node(Path::new("/tmp/dev/dri/card0")));
}

#[test]
fn drm_fdinfo_per_job_on_a_proc_fixture() {
    let mut c = DrmFdinfoCollector::new("n1", &data("drm/proc"), &data("sys-hpc")).scan_every(1);
    let mut out = Vec::new();
    c.collect(&mut out).unwrap();
    let busy = "canopy_job_gpu_engine_busy_seconds_total";
    // Job 4322 (cgroup v2 path): clients 42 (two fds, counted once) and 43.
    let j = |e: &'static str| {
        [
            ("job_id", Some("4322")),
            ("gpu", Some("card0")),
            ("engine", Some(e)),
        ]
    };
    assert_eq!(find(&out, busy, &j("gfx")), Some(3.20740374));
    assert_eq!(find(&out, busy, &j("compute")), Some(55.436813524));
    assert_eq!(
        find(
            &out,
            "canopy_job_gpu_memory_bytes",
            &[("job_id", Some("4322")), ("gpu", Some("card0"))]
        ),
        Some((1_044_480.0 * 1024.0) + 536_870_912.0)
    );
    // A process outside any job: job_id "" (absent label), not dropped.
    assert_eq!(
        find(
            &out,
            busy,
            &[
                ("job_id", None),
                ("gpu", Some("card0")),
                ("engine", Some("gfx"))
            ]
        ),
        Some(0.5)
    );
    // Intel, job 4321 (cgroup v1 path); no card with that PCI slot in the
    // fixture, so the PCI address names the GPU.
    let i = [
        ("job_id", Some("4321")),
        ("gpu", Some("0000:4d:00.0")),
        ("engine", Some("render")),
    ];
    assert_eq!(find(&out, busy, &i), Some(9.288864723));
    // The vanished fdinfo is skipped; the garbage one is counted.
    assert_eq!(
        find(
            &out,
            "canopy_leaf_collector_errors_total",
            &[("collector", Some("gpu_drm_fdinfo"))]
        ),
        Some(1.0)
    );
    let mut seen = std::collections::HashSet::new();
    assert!(out.iter().all(|o| seen.insert(o.labels.clone())));
}

#[test]
fn drm_closed_client_keeps_its_time_in_the_job() {
    let client = |id: u64, gfx: u64, mem: u64| DrmClient {
        driver: "amdgpu".into(),
        pdev: Some("0000:03:00.0".into()),
        client_id: id,
        engines_ns: BTreeMap::from([("gfx".to_string(), gfx)]),
        device_memory_bytes: Some(mem),
    };
    let row = |job: &str, c: DrmClient| (job.to_string(), "card0".to_string(), c);
    let key = ("7".to_string(), "card0".to_string());
    let mut a = DrmAccount::new();
    let t = a.update(&[row("7", client(1, 100, 10)), row("7", client(2, 50, 5))]);
    assert_eq!(t[&key].engines_ns["gfx"], 150);
    assert_eq!(t[&key].memory_bytes, 15);
    // Client 2 closes: its 50 ns stay, its memory goes.
    let t = a.update(&[row("7", client(1, 120, 10))]);
    assert_eq!(t[&key].engines_ns["gfx"], 170);
    assert_eq!(t[&key].memory_bytes, 10);
    // A new client with a reused id on another job does not disturb job 7.
    let t = a.update(&[row("7", client(1, 130, 10)), row("8", client(3, 5, 1))]);
    assert_eq!(t[&key].engines_ns["gfx"], 180);
    // The job's last client closes: the job is gone.
    let t = a.update(&[row("8", client(3, 6, 1))]);
    assert!(!t.contains_key(&key));
}

#[test]
fn drm_no_gpu_logs_once_and_scans_nothing() {
    let mut c =
        DrmFdinfoCollector::new("n1", Path::new("/proc"), Path::new("/nonexistent")).scan_every(1);
    let mut out = Vec::new();
    for _ in 0..600 {
        c.collect(&mut out).unwrap();
    }
    assert!(out.is_empty());
    assert_eq!(c.probe().notices(), 1);
    assert_eq!(c.probe().attempts(), 2);
}
