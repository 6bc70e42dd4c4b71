//! Kubernetes pods exported as jobs: each pod cgroup the kubelet creates
//! becomes one job, with `job_id` = `<namespace>/<pod>` when the kubelet's
//! pod log directory names it (`/var/log/pods/<ns>_<pod>_<uid>`), else the
//! pod UID; labels `qos` (`Guaranteed`, `Burstable`, `BestEffort`) and
//! `scheduler="kubernetes"`; no `user`, `account`, `partition`. The labels
//! are fixed when the pod is first seen, so a series never changes name.
//!
//! Layouts (both kubelet cgroup drivers, cgroup v1 and v2; see
//! [`crate::attrib::k8s`]): `kubepods[/<qos>]/pod<uid>` (cgroupfs) and
//! `kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid_>.slice`
//! (systemd), under each v1 controller or at the v2 root (or `unified/`).
//! The pod directory holds all its containers, so its files are the pod's
//! totals.
//!
//! Files: v2 `cpu.stat` (`usage_usec`), `memory.current`, `memory.max`,
//! `cpu.max` (`<quota> <period>` or `max <period>`), `io.stat` (block
//! devices only: network filesystems are not in it); v1 `cpuacct.usage`,
//! `memory.usage_in_bytes`, `memory.limit_in_bytes`, `cpu.cfs_quota_us`
//! (`-1` unlimited) and `cpu.cfs_period_us`.
//!
//! Metrics (the contract's `canopy_job_*` names): `cpu_seconds_total`,
//! `memory_bytes`, `memory_allocated_bytes` (the pod's memory limit),
//! `cpus_allocated` (CPU limit: quota / period, fractional), and on v2
//! `io_{read,write}_{bytes,ops}_total`. Unreadable files cost that value and
//! count in `canopy_leaf_collector_errors_total{collector="k8s_pods"}`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::cgroup_v1::{parse_u64_file, subdirs};
use super::cgroup_v2::{parse_cpu_stat, parse_io_stat};
use super::probe::{DEFAULT_REPROBE_EVERY, Probe};
use super::proc_io::IoCounters;
use super::{Collector, Observation};
use crate::attrib::k8s::{PodRef, parse_pod_cgroup, parse_pod_log_dir};
use crate::error::LeafError;

/// Limits at or above this are "unlimited" (v1 prints `PAGE_COUNTER_MAX`).
const UNLIMITED: u64 = 1 << 62;

/// What the cgroup files say about one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodCgroup {
    /// UID and QoS class from the path.
    pub pod: PodRef,
    /// CPU time of all containers, nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// Memory charged to the pod, bytes.
    pub memory_bytes: Option<u64>,
    /// Memory limit, bytes (`None` when unlimited).
    pub memory_limit_bytes: Option<u64>,
    /// CPU limit in CPUs (`None` when unlimited).
    pub cpu_limit: Option<f64>,
    /// Block I/O (v2 `io.stat`).
    pub io: Option<IoCounters>,
}

/// Parses a CPU limit: v2 `cpu.max` (`max 100000`, `150000 100000`).
pub fn parse_cpu_max(text: &str) -> Result<Option<f64>, LeafError> {
    const FORMAT: &str = "cpu.max";
    let mut f = text.split_whitespace();
    let quota = f.next();
    let period: u64 = super::field(FORMAT, 1, "period", f.next())?;
    match quota {
        Some("max") => Ok(None),
        q => {
            let q: u64 = super::field(FORMAT, 1, "quota", q)?;
            Ok((period > 0).then(|| q as f64 / period as f64))
        }
    }
}

/// Parses a v1 CPU limit from `cpu.cfs_quota_us` (`-1` is unlimited) and
/// `cpu.cfs_period_us`.
pub fn parse_cfs_quota(quota: &str, period: &str) -> Result<Option<f64>, LeafError> {
    let q: i64 = super::field("cpu.cfs_quota_us", 1, "quota", Some(quota.trim()))?;
    let p: u64 = super::field("cpu.cfs_period_us", 1, "period", Some(period.trim()))?;
    Ok((q > 0 && p > 0).then(|| q as f64 / p as f64))
}

/// Parses a memory limit: a number, or v2's `max`; huge values are
/// unlimited.
pub fn parse_memory_limit(format: &'static str, text: &str) -> Result<Option<u64>, LeafError> {
    if text.trim() == "max" {
        return Ok(None);
    }
    Ok(Some(parse_u64_file(format, text)?).filter(|v| *v < UNLIMITED))
}

/// Every pod directory under one hierarchy root (a v1 controller directory
/// or the v2 root), with its pod.
pub fn pod_dirs(base: &Path) -> Result<Vec<(PodRef, PathBuf)>, LeafError> {
    let mut out = Vec::new();
    for top in ["kubepods", "kubepods.slice"] {
        let tdir = base.join(top);
        for (name, path) in subdirs(&tdir).map_err(|e| LeafError::io(&tdir, e))? {
            if let Some(p) = parse_pod_cgroup(&format!("/{top}/{name}")) {
                out.push((p, path));
                continue;
            }
            // A QoS level: its children are pods.
            for (pname, ppath) in subdirs(&path).map_err(|e| LeafError::io(&path, e))? {
                if let Some(p) = parse_pod_cgroup(&format!("/{top}/{name}/{pname}")) {
                    out.push((p, ppath));
                }
            }
        }
    }
    Ok(out)
}

fn read_opt(path: &Path) -> Result<Option<String>, LeafError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LeafError::io(path, e)),
    }
}

/// Which files a hierarchy root holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hier {
    V2,
    CpuAcct,
    Cpu,
    Memory,
}

/// Reads one optional file of `dir`; a read error goes to `errs`.
fn file(dir: &Path, name: &str, errs: &mut Vec<LeafError>) -> Option<String> {
    read_opt(&dir.join(name)).unwrap_or_else(|e| {
        errs.push(e);
        None
    })
}

/// Parses `text` (when there) with `parse`, storing into `slot`; a parse
/// error goes to `errs`.
fn set<T>(
    text: Option<String>,
    slot: &mut T,
    errs: &mut Vec<LeafError>,
    parse: impl FnOnce(&str) -> Result<T, LeafError>,
) {
    if let Some(t) = text {
        match parse(&t) {
            Ok(v) => *slot = v,
            Err(e) => errs.push(e),
        }
    }
}

/// Reads one pod directory's files of hierarchy `h` into `p`; the errors
/// go to `errs` (one unreadable file costs that value only).
fn read_pod(h: Hier, dir: &Path, p: &mut PodCgroup, errs: &mut Vec<LeafError>) {
    match h {
        Hier::V2 => {
            let t = file(dir, "cpu.stat", errs);
            set(t, &mut p.cpu_usage_ns, errs, |t| {
                Ok(Some(parse_cpu_stat(t)?.usage_usec.saturating_mul(1000)))
            });
            let t = file(dir, "memory.current", errs);
            set(t, &mut p.memory_bytes, errs, |t| {
                parse_u64_file("memory.current", t).map(Some)
            });
            let t = file(dir, "memory.max", errs);
            set(t, &mut p.memory_limit_bytes, errs, |t| {
                parse_memory_limit("memory.max", t)
            });
            let t = file(dir, "cpu.max", errs);
            set(t, &mut p.cpu_limit, errs, parse_cpu_max);
            let t = file(dir, "io.stat", errs);
            set(t, &mut p.io, errs, |t| parse_io_stat(t).map(Some));
        }
        Hier::CpuAcct => {
            let t = file(dir, "cpuacct.usage", errs);
            set(t, &mut p.cpu_usage_ns, errs, |t| {
                parse_u64_file("cpuacct.usage", t).map(Some)
            });
        }
        Hier::Memory => {
            let t = file(dir, "memory.usage_in_bytes", errs);
            set(t, &mut p.memory_bytes, errs, |t| {
                parse_u64_file("memory.usage_in_bytes", t).map(Some)
            });
            let t = file(dir, "memory.limit_in_bytes", errs);
            set(t, &mut p.memory_limit_bytes, errs, |t| {
                parse_memory_limit("memory.limit_in_bytes", t)
            });
        }
        Hier::Cpu => {
            let q = file(dir, "cpu.cfs_quota_us", errs);
            let per = file(dir, "cpu.cfs_period_us", errs);
            if let (Some(q), Some(per)) = (q, per) {
                set(Some(q), &mut p.cpu_limit, errs, |q| {
                    parse_cfs_quota(q, &per)
                });
            }
        }
    }
}

/// The hierarchy roots to look at under `cgroup_root`.
fn hierarchies(cgroup_root: &Path) -> Vec<(Hier, PathBuf)> {
    let mut v = Vec::new();
    for r in [cgroup_root.to_path_buf(), cgroup_root.join("unified")] {
        if r.join("cgroup.controllers").is_file() {
            v.push((Hier::V2, r));
        }
    }
    v.push((Hier::CpuAcct, cgroup_root.join("cpuacct")));
    v.push((Hier::Cpu, cgroup_root.join("cpu")));
    v.push((Hier::Memory, cgroup_root.join("memory")));
    v
}

/// Scans every pod under `cgroup_root` (v1 controllers and v2), merged by
/// UID and ordered by it, with the errors met.
pub fn scan_pods(cgroup_root: &Path) -> (Vec<PodCgroup>, Vec<LeafError>) {
    let mut pods: BTreeMap<String, PodCgroup> = BTreeMap::new();
    let mut errs = Vec::new();
    for (h, base) in hierarchies(cgroup_root) {
        let dirs = match pod_dirs(&base) {
            Ok(d) => d,
            Err(e) => {
                errs.push(e);
                continue;
            }
        };
        for (pod, dir) in dirs {
            let p = pods.entry(pod.uid.clone()).or_insert_with(|| PodCgroup {
                pod,
                cpu_usage_ns: None,
                memory_bytes: None,
                memory_limit_bytes: None,
                cpu_limit: None,
                io: None,
            });
            read_pod(h, &dir, p, &mut errs);
        }
    }
    (pods.into_values().collect(), errs)
}

/// Appends one pod's series with its fixed `job_id`.
pub fn observations(node: &str, job_id: &str, p: &PodCgroup, out: &mut Vec<Observation>) {
    let l = [
        ("job_id", job_id),
        ("qos", p.pod.qos.as_str()),
        ("scheduler", "kubernetes"),
    ];
    if let Some(ns) = p.cpu_usage_ns {
        let s = ns as f64 / 1e9;
        out.push(Observation::counter(
            "canopy_job_cpu_seconds_total",
            node,
            &l,
            s,
        ));
    }
    if let Some(io) = p.io {
        let c = [
            ("canopy_job_io_read_bytes_total", io.read_bytes),
            ("canopy_job_io_write_bytes_total", io.write_bytes),
            ("canopy_job_io_read_ops_total", io.read_ops),
            ("canopy_job_io_write_ops_total", io.write_ops),
        ];
        for (name, v) in c {
            out.push(Observation::counter(name, node, &l, v as f64));
        }
    }
    let g = [
        ("canopy_job_memory_bytes", p.memory_bytes.map(|v| v as f64)),
        (
            "canopy_job_memory_allocated_bytes",
            p.memory_limit_bytes.map(|v| v as f64),
        ),
        ("canopy_job_cpus_allocated", p.cpu_limit),
    ];
    for (name, v) in g {
        if let Some(v) = v {
            out.push(Observation::gauge(name, node, &l, v));
        }
    }
}

/// Exports the Kubernetes pods of this node as jobs; see the module docs.
#[derive(Debug)]
pub struct K8sPodsCollector {
    node: String,
    cgroup_root: PathBuf,
    pod_logs: Option<PathBuf>,
    probe: Probe,
    /// UID -> the `job_id` it was first reported with.
    ids: HashMap<String, String>,
    errors: BTreeMap<&'static str, u64>,
}

/// Where the kubelet keeps pod logs (`<ns>_<pod>_<uid>` directories).
pub const DEFAULT_POD_LOGS: &str = "/var/log/pods";

impl K8sPodsCollector {
    /// A collector for `node` scanning `cgroup_root`; pod names from the
    /// kubelet log directory `pod_logs` when given.
    pub fn new(node: &str, cgroup_root: &Path, pod_logs: Option<&Path>) -> Self {
        K8sPodsCollector {
            node: node.to_string(),
            cgroup_root: cgroup_root.to_path_buf(),
            pod_logs: pod_logs.map(Path::to_path_buf),
            probe: Probe::new("kubernetes pods", DEFAULT_REPROBE_EVERY),
            ids: HashMap::new(),
            errors: BTreeMap::new(),
        }
    }

    /// The back-off state: a node without kubelet cgroups is looked at
    /// rarely.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// UID -> `<ns>/<pod>` from the log directory.
    fn names(&self) -> HashMap<String, String> {
        let Some(dir) = &self.pod_logs else {
            return HashMap::new();
        };
        let Ok(rd) = std::fs::read_dir(dir) else {
            return HashMap::new();
        };
        rd.filter_map(|e| e.ok())
            .filter_map(|e| parse_pod_log_dir(e.file_name().to_str()?))
            .map(|(ns, pod, uid)| (uid, format!("{ns}/{pod}")))
            .collect()
    }
}

impl Collector for K8sPodsCollector {
    fn name(&self) -> &'static str {
        "k8s_pods"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if !self.probe.should_try() {
            return Ok(());
        }
        let (pods, errs) = scan_pods(&self.cgroup_root);
        // Back off only where the kubelet made no cgroup at all; on a
        // kubelet node without pods, a new pod shows at the next tick.
        let kubelet = hierarchies(&self.cgroup_root)
            .iter()
            .any(|(_, b)| b.join("kubepods").is_dir() || b.join("kubepods.slice").is_dir());
        if pods.is_empty() && self.ids.is_empty() && !kubelet {
            self.probe
                .missing(&"no kubepods cgroup (no kubelet on this node)");
            return Ok(());
        }
        self.probe.found();
        let first = errs.into_iter().fold(None, |first, e| {
            *self.errors.entry("cgroup").or_default() += 1;
            first.or(Some(e))
        });
        if pods.iter().any(|p| !self.ids.contains_key(&p.pod.uid)) {
            let names = self.names();
            for p in &pods {
                let id = names.get(&p.pod.uid).cloned();
                self.ids
                    .entry(p.pod.uid.clone())
                    .or_insert_with(|| id.unwrap_or_else(|| p.pod.uid.clone()));
            }
        }
        for p in &pods {
            let id = self.ids.get(&p.pod.uid).map_or(p.pod.uid.as_str(), |s| s);
            observations(&self.node, id, p, out);
        }
        // Ended pods: forget them; their series go stale.
        self.ids
            .retain(|uid, _| pods.iter().any(|p| p.pod.uid == *uid));
        for (kind, n) in &self.errors {
            out.push(Observation::counter(
                "canopy_leaf_collector_errors_total",
                &self.node,
                &[("collector", "k8s_pods"), ("kind", kind)],
                *n as f64,
            ));
        }
        first.map_or(Ok(()), Err)
    }
}
