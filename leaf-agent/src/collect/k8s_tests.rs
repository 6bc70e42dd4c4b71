//! Kubernetes pods as jobs on fake `/sys/fs/cgroup` trees built in a temp
//! dir (kubelet layouts of both drivers, v1 and v2, files in the kernel's
//! formats), and the `job_id=""` account of CPU outside jobs.

#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::path::Path;

use super::k8s_pods::{K8sPodsCollector, parse_cfs_quota, parse_cpu_max, parse_memory_limit};
use super::outside_jobs::{OutsideCpu, OutsideJobsCollector};
use super::*;
use crate::TestDir;
use crate::attrib::k8s::parse_pod_log_dir;

const UID_WEB: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
const UID_BATCH: &str = "11111111-2222-3333-4444-555555555555";
const UID_DB: &str = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
}

fn get<'a>(obs: &'a [Observation], name: &str, job: &str) -> Option<&'a Observation> {
    let hits: Vec<&Observation> = obs
        .iter()
        .filter(|o| o.labels.name() == name && o.labels.get("job_id") == Some(job))
        .collect();
    assert!(hits.len() <= 1, "{name} {job}: {}", hits.len());
    hits.first().copied()
}

fn val(obs: &[Observation], name: &str, job: &str) -> Option<f64> {
    get(obs, name, job).map(|o| o.value)
}

/// cgroup v2, systemd driver: `kubepods.slice/kubepods-<qos>.slice/
/// kubepods-<qos>-pod<uid_>.slice/cri-containerd-<id>.scope`. File formats:
/// `cpu.stat` as this machine's kernel prints it, `memory.max` / `cpu.max`
/// (`max` or numbers), `io.stat` per device (Documentation/admin-guide/
/// cgroup-v2.rst).
fn v2_systemd_tree(root: &Path) {
    write(
        root,
        "cgroup.controllers",
        "cpuset cpu io memory hugetlb pids rdma misc\n",
    );
    let web = format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        UID_WEB.replace('-', "_")
    );
    write(
        root,
        &format!("{web}/cpu.stat"),
        "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 10\nnr_throttled 1\nthrottled_usec 3000\nnr_bursts 0\nburst_usec 0\n",
    );
    write(root, &format!("{web}/memory.current"), "268435456\n");
    write(root, &format!("{web}/memory.max"), "536870912\n");
    write(root, &format!("{web}/cpu.max"), "150000 100000\n");
    write(
        root,
        &format!("{web}/io.stat"),
        "259:0 rbytes=4096 wbytes=1048576 rios=1 wios=16 dbytes=0 dios=0\n",
    );
    // A container inside the pod: its files are already in the pod's.
    write(
        root,
        &format!(
            "{web}/cri-containerd-4e2f1c0b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f.scope/cpu.stat"
        ),
        "usage_usec 2400000\nuser_usec 1900000\nsystem_usec 500000\n",
    );
    let batch = format!(
        "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
        UID_BATCH.replace('-', "_")
    );
    write(
        root,
        &format!("{batch}/cpu.stat"),
        "usage_usec 1000\nuser_usec 1000\nsystem_usec 0\n",
    );
    write(root, &format!("{batch}/memory.current"), "4096\n");
    write(root, &format!("{batch}/memory.max"), "max\n");
    write(root, &format!("{batch}/cpu.max"), "max 100000\n");
    let db = format!(
        "kubepods.slice/kubepods-pod{}.slice",
        UID_DB.replace('-', "_")
    );
    write(
        root,
        &format!("{db}/cpu.stat"),
        "usage_usec 7000000\nuser_usec 7000000\nsystem_usec 0\n",
    );
    write(root, &format!("{db}/memory.current"), "1073741824\n");
    write(root, &format!("{db}/memory.max"), "1073741824\n");
    write(root, &format!("{db}/cpu.max"), "200000 100000\n");
    // Odd neighbours that are not pods: must be ignored, not fatal.
    write(
        root,
        "kubepods.slice/kubepods-burstable.slice/weird name ü/cpu.stat",
        "x\n",
    );
    write(
        root,
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podnot_a_uid.slice/cpu.stat",
        "usage_usec 1\n",
    );
    write(
        root,
        "system.slice/kubelet.service/cpu.stat",
        "usage_usec 99\n",
    );
}

#[test]
fn k8s_pods_v2_systemd_are_exported_as_jobs() {
    let dir = TestDir::new();
    let root = dir.path().join("cgroup");
    v2_systemd_tree(&root);
    let logs = dir.path().join("pods");
    std::fs::create_dir_all(logs.join(format!("default_web-0_{UID_WEB}"))).unwrap();
    std::fs::create_dir_all(logs.join("not-a-pod-dir")).unwrap();
    let mut c = K8sPodsCollector::new("n1", &root, Some(&logs));
    let mut out = Vec::new();
    c.collect(&mut out).unwrap();

    // Named from the kubelet log directory when known, else the UID.
    let web = "default/web-0";
    assert_eq!(val(&out, "canopy_job_cpu_seconds_total", web), Some(2.5));
    assert_eq!(
        val(&out, "canopy_job_memory_bytes", web),
        Some(268_435_456.0)
    );
    assert_eq!(
        val(&out, "canopy_job_memory_allocated_bytes", web),
        Some(536_870_912.0)
    );
    assert_eq!(val(&out, "canopy_job_cpus_allocated", web), Some(1.5));
    assert_eq!(
        val(&out, "canopy_job_io_write_bytes_total", web),
        Some(1_048_576.0)
    );
    let o = get(&out, "canopy_job_cpu_seconds_total", web).unwrap();
    assert_eq!(o.labels.get("qos"), Some("Burstable"));
    assert_eq!(o.labels.get("scheduler"), Some("kubernetes"));
    assert_eq!(o.labels.get("node"), Some("n1"));
    for empty in ["user", "account", "partition"] {
        assert_eq!(o.labels.get(empty), None, "{empty} is empty, so absent");
    }
    let be = get(&out, "canopy_job_cpu_seconds_total", UID_BATCH).unwrap();
    assert_eq!(be.labels.get("qos"), Some("BestEffort"));
    assert_eq!(be.value, 0.001);
    // Unlimited: no allocation series.
    assert_eq!(
        val(&out, "canopy_job_memory_allocated_bytes", UID_BATCH),
        None
    );
    assert_eq!(val(&out, "canopy_job_cpus_allocated", UID_BATCH), None);
    let db = get(&out, "canopy_job_cpus_allocated", UID_DB).unwrap();
    assert_eq!((db.value, db.labels.get("qos")), (2.0, Some("Guaranteed")));
    // Three pods, nothing else (no container, no odd directory).
    let mut jobs: Vec<&str> = out.iter().filter_map(|o| o.labels.get("job_id")).collect();
    jobs.sort_unstable();
    jobs.dedup();
    assert_eq!(jobs, [UID_BATCH, UID_DB, web]);
    let mut seen = std::collections::HashSet::new();
    assert!(out.iter().all(|o| seen.insert(o.labels.clone())));
}

#[test]
fn k8s_pods_v1_cgroupfs_driver() {
    let dir = TestDir::new();
    let root = dir.path();
    // cgroup v1, cgroupfs driver: `<controller>/kubepods[/<qos>]/pod<uid>/`.
    // One-number files as the kernel prints them (this machine's root
    // `memory.limit_in_bytes` is the unlimited value used here).
    let b = format!("kubepods/burstable/pod{UID_WEB}");
    write(root, &format!("cpuacct/{b}/cpuacct.usage"), "3250000000\n");
    write(
        root,
        &format!("memory/{b}/memory.usage_in_bytes"),
        "104857600\n",
    );
    write(
        root,
        &format!("memory/{b}/memory.limit_in_bytes"),
        "9223372036854771712\n",
    );
    write(root, &format!("cpu/{b}/cpu.cfs_quota_us"), "150000\n");
    write(root, &format!("cpu/{b}/cpu.cfs_period_us"), "100000\n");
    write(
        root,
        &format!("cpuacct/{b}/0123abcd/cpuacct.usage"),
        "3000000000\n",
    );
    let g = format!("kubepods/pod{UID_DB}");
    write(root, &format!("cpuacct/{g}/cpuacct.usage"), "1000000000\n");
    write(root, &format!("cpu/{g}/cpu.cfs_quota_us"), "-1\n");
    write(root, &format!("cpu/{g}/cpu.cfs_period_us"), "100000\n");
    let mut c = K8sPodsCollector::new("n1", root, None);
    let mut out = Vec::new();
    c.collect(&mut out).unwrap();
    assert_eq!(
        val(&out, "canopy_job_cpu_seconds_total", UID_WEB),
        Some(3.25)
    );
    assert_eq!(
        val(&out, "canopy_job_memory_bytes", UID_WEB),
        Some(104_857_600.0)
    );
    assert_eq!(
        val(&out, "canopy_job_memory_allocated_bytes", UID_WEB),
        None
    );
    assert_eq!(val(&out, "canopy_job_cpus_allocated", UID_WEB), Some(1.5));
    let db = get(&out, "canopy_job_cpu_seconds_total", UID_DB).unwrap();
    assert_eq!((db.value, db.labels.get("qos")), (1.0, Some("Guaranteed")));
    assert_eq!(val(&out, "canopy_job_cpus_allocated", UID_DB), None);
}

#[test]
fn k8s_pod_ends_and_labels_never_change() {
    let dir = TestDir::new();
    let root = dir.path().join("cgroup");
    v2_systemd_tree(&root);
    let logs = dir.path().join("pods");
    std::fs::create_dir_all(&logs).unwrap();
    let mut c = K8sPodsCollector::new("n1", &root, Some(&logs));
    let mut out = Vec::new();
    c.collect(&mut out).unwrap();
    assert!(val(&out, "canopy_job_cpu_seconds_total", UID_WEB).is_some());
    // The log directory shows up later: the series keeps its first id.
    std::fs::create_dir_all(logs.join(format!("default_web-0_{UID_WEB}"))).unwrap();
    out.clear();
    c.collect(&mut out).unwrap();
    assert!(val(&out, "canopy_job_cpu_seconds_total", UID_WEB).is_some());
    assert!(val(&out, "canopy_job_cpu_seconds_total", "default/web-0").is_none());
    // The best-effort pod ends: its series stop.
    let batch = root.join(format!(
        "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
        UID_BATCH.replace('-', "_")
    ));
    std::fs::remove_dir_all(&batch).unwrap();
    out.clear();
    c.collect(&mut out).unwrap();
    assert!(
        out.iter()
            .all(|o| o.labels.get("job_id") != Some(UID_BATCH))
    );
    assert!(val(&out, "canopy_job_cpu_seconds_total", UID_DB).is_some());
}

#[test]
fn k8s_garbage_pod_file_costs_that_value_only() {
    let dir = TestDir::new();
    let root = dir.path().join("cgroup");
    v2_systemd_tree(&root);
    let web = format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        UID_WEB.replace('-', "_")
    );
    write(&root, &format!("{web}/memory.current"), "lots\n");
    write(&root, &format!("{web}/cpu.max"), "\n");
    let mut c = K8sPodsCollector::new("n1", &root, None);
    let mut out = Vec::new();
    assert!(
        c.collect(&mut out).is_err(),
        "the first error is returned for the log"
    );
    assert_eq!(
        val(&out, "canopy_job_cpu_seconds_total", UID_WEB),
        Some(2.5)
    );
    assert_eq!(val(&out, "canopy_job_memory_bytes", UID_WEB), None);
    let errs = out
        .iter()
        .find(|o| {
            o.labels.name() == "canopy_leaf_collector_errors_total"
                && o.labels.get("collector") == Some("k8s_pods")
        })
        .unwrap();
    assert_eq!(errs.value, 2.0);
}

#[test]
fn k8s_no_kubelet_logs_once_and_looks_rarely() {
    let dir = TestDir::new();
    let mut c = K8sPodsCollector::new("n1", dir.path(), None);
    let mut out = Vec::new();
    for _ in 0..600 {
        c.collect(&mut out).unwrap();
    }
    assert!(out.is_empty());
    assert_eq!(c.probe().notices(), 1);
    assert_eq!(c.probe().attempts(), 2);
}

#[test]
fn k8s_limit_and_log_dir_parsers() {
    assert_eq!(parse_cpu_max("max 100000\n").unwrap(), None);
    assert_eq!(parse_cpu_max("50000 100000\n").unwrap(), Some(0.5));
    assert!(parse_cpu_max("max\n").is_err());
    assert!(parse_cpu_max("-5 100000\n").is_err());
    assert_eq!(parse_cfs_quota("-1\n", "100000\n").unwrap(), None);
    assert_eq!(parse_cfs_quota("250000\n", "100000\n").unwrap(), Some(2.5));
    assert!(parse_cfs_quota("x", "100000").is_err());
    assert_eq!(parse_memory_limit("memory.max", "max\n").unwrap(), None);
    assert_eq!(
        parse_memory_limit("memory.limit_in_bytes", "9223372036854771712\n").unwrap(),
        None
    );
    assert_eq!(
        parse_memory_limit("memory.max", "1024\n").unwrap(),
        Some(1024)
    );
    assert_eq!(
        parse_pod_log_dir(&format!("kube-system_coredns-5d78c9869d-abcde_{UID_WEB}")),
        Some((
            "kube-system".into(),
            "coredns-5d78c9869d-abcde".into(),
            UID_WEB.into()
        ))
    );
    assert_eq!(parse_pod_log_dir("default_web_0_x"), None);
    assert_eq!(parse_pod_log_dir(&format!("Default_web_{UID_WEB}")), None);
    assert_eq!(parse_pod_log_dir(&format!("_web_{UID_WEB}")), None);
}

#[test]
fn outside_jobs_cpu_is_node_busy_minus_jobs_and_never_decreases() {
    let mut a = OutsideCpu::new();
    let j = |v: &[(&str, f64)]| -> Vec<(String, f64)> {
        v.iter().map(|(k, c)| (k.to_string(), *c)).collect()
    };
    assert_eq!(a.update(100.0, &j(&[("1", 30.0)])), 70.0);
    assert_eq!(a.update(110.0, &j(&[("1", 38.0)])), 72.0);
    // Job 1 ends at 38 s: its CPU stays with it, not outside.
    assert_eq!(a.update(115.0, &j(&[])), 77.0);
    // A job first reported late takes back what it used: clamp, no dip.
    assert_eq!(a.update(120.0, &j(&[("2", 10.0)])), 77.0);
    assert_eq!(a.update(130.0, &j(&[("2", 11.0)])), 81.0);
    // Jobs read slightly after the node: never below the last value.
    assert_eq!(a.update(131.0, &j(&[("2", 12.5)])), 81.0);
    assert_eq!(a.update(f64::NAN, &j(&[])), 81.0);
}

#[test]
fn outside_jobs_series_has_an_empty_job_id_and_is_not_a_job() {
    let mut c = OutsideJobsCollector::new("n1");
    let mut out = vec![
        Observation::counter(
            "canopy_node_cpu_seconds_total",
            "n1",
            &[("mode", "user")],
            80.0,
        ),
        Observation::counter(
            "canopy_node_cpu_seconds_total",
            "n1",
            &[("mode", "system")],
            20.0,
        ),
        Observation::counter(
            "canopy_node_cpu_seconds_total",
            "n1",
            &[("mode", "idle")],
            900.0,
        ),
        Observation::counter(
            "canopy_job_cpu_seconds_total",
            "n1",
            &[("job_id", "42"), ("user", "alice")],
            25.0,
        ),
        Observation::counter(
            "canopy_job_cpu_seconds_total",
            "n1",
            &[("job_id", "default/web-0"), ("scheduler", "kubernetes")],
            5.0,
        ),
    ];
    c.collect(&mut out).unwrap();
    let outside: Vec<&Observation> = out
        .iter()
        .filter(|o| {
            o.labels.name() == "canopy_job_cpu_seconds_total" && o.labels.get("job_id").is_none()
        })
        .collect();
    assert_eq!(outside.len(), 1);
    assert_eq!(outside[0].value, 70.0);
    assert_eq!(outside[0].labels.get("node"), Some("n1"));
    // Nothing without the node's CPU series (no /proc/stat this tick).
    let mut none = vec![Observation::counter(
        "canopy_job_cpu_seconds_total",
        "n1",
        &[("job_id", "42")],
        1.0,
    )];
    OutsideJobsCollector::new("n1").collect(&mut none).unwrap();
    assert_eq!(none.len(), 1);
}

#[test]
fn outside_jobs_real_host_collectors_report_it() {
    // This machine, whatever runs on it: the `job_id=""` series exists and
    // is at most the node's busy time.
    let mut cs = host_collectors("self", Path::new("/proc"), Path::new("/sys/fs/cgroup"));
    let mut out = Vec::new();
    for c in &mut cs {
        let _ = c.collect(&mut out);
    }
    let outside = out
        .iter()
        .find(|o| {
            o.labels.name() == "canopy_job_cpu_seconds_total" && o.labels.get("job_id").is_none()
        })
        .expect("job_id=\"\" CPU series");
    let busy: f64 = out
        .iter()
        .filter(|o| o.labels.name() == "canopy_node_cpu_seconds_total")
        .filter(|o| !matches!(o.labels.get("mode"), Some("idle" | "iowait" | "steal")))
        .map(|o| o.value)
        .sum();
    assert!(
        outside.value > 0.0 && outside.value <= busy,
        "{} {busy}",
        outside.value
    );
}

#[test]
fn k8s_kubelet_without_pods_picks_up_a_new_pod_at_the_next_tick() {
    let dir = TestDir::new();
    let root = dir.path();
    std::fs::create_dir_all(root.join("cpuacct/kubepods/burstable")).unwrap();
    let mut c = K8sPodsCollector::new("n1", root, None);
    let mut out = Vec::new();
    for _ in 0..5 {
        c.collect(&mut out).unwrap();
    }
    assert!(out.is_empty());
    assert_eq!(
        c.probe().notices(),
        0,
        "the kubelet's cgroup is there: no back-off"
    );
    write(
        root,
        &format!("cpuacct/kubepods/burstable/pod{UID_WEB}/cpuacct.usage"),
        "1000000000\n",
    );
    c.collect(&mut out).unwrap();
    assert_eq!(
        val(&out, "canopy_job_cpu_seconds_total", UID_WEB),
        Some(1.0)
    );
}
