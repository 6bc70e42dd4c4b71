//! perf_event tests on this machine's kernel: node-wide software events,
//! the hardware-counter probe, and per-job counters on a real cgroup v2
//! directory in the Slurm layout with a real busy process inside.

#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use super::*;

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

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

fn has_pmu() -> bool {
    Path::new("/sys/bus/event_source/devices/cpu").exists()
        || Path::new("/sys/bus/event_source/devices/cpu_core").exists()
}

#[test]
fn perf_helpers() {
    assert_eq!(
        perf::parse_cpu_list("0-3,8,10-11\n").unwrap(),
        vec![0, 1, 2, 3, 8, 10, 11]
    );
    assert_eq!(perf::parse_cpu_list("0\n").unwrap(), vec![0]);
    assert!(perf::parse_cpu_list("3-1").is_err());
    assert!(perf::parse_cpu_list("a").is_err());
    assert_eq!(perf::scale_count(100, 10, 5), 200.0);
    assert_eq!(perf::scale_count(100, 10, 10), 100.0);
    assert_eq!(perf::scale_count(100, 10, 0), 0.0);
    assert_eq!(
        perf::classify_errno(Some(2)),
        perf::OpenFailure::Unsupported
    );
    assert_eq!(
        perf::classify_errno(Some(95)),
        perf::OpenFailure::Unsupported
    );
    assert_eq!(
        perf::classify_errno(Some(13)),
        perf::OpenFailure::NotPermitted
    );
    assert_eq!(perf::classify_errno(None), perf::OpenFailure::Other);
}

#[test]
fn perf_node_exports_what_this_kernel_has() {
    // Software events work as root on any Linux; hardware events exist only
    // where the kernel exposes a CPU PMU. Either way nothing panics.
    let mut c = perf::PerfCollector::new("n1", Path::new("/sys")).with_software(true);
    let mut first = Vec::new();
    c.collect(&mut first).unwrap();
    let report = c.report().expect("opened on first collect").clone();
    assert!(
        is_root(),
        "perf tests need root (or kernel.perf_event_paranoid <= 0); CI runs as root"
    );
    assert!(
        report.counting.contains(&perf::PerfKind::ContextSwitches),
        "{report:?}"
    );
    assert!(
        !report.counting.contains(&perf::PerfKind::TaskClock),
        "node task-clock is wall time"
    );
    assert_eq!(
        report.counting.contains(&perf::PerfKind::Cycles),
        has_pmu(),
        "{report:?}"
    );
    if !has_pmu() {
        assert!(
            report
                .refused
                .iter()
                .any(|(k, f)| *k == perf::PerfKind::Cycles && *f == perf::OpenFailure::Unsupported),
            "{report:?}"
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut second = Vec::new();
    c.collect(&mut second).unwrap();
    // Kernel-mode events are counted (the crate excludes them by default).
    let cs = |o: &[Observation]| value(o, "canopy_node_perf_context_switches_total", &[]).unwrap();
    assert!(
        cs(&second) > cs(&first),
        "{} -> {}",
        cs(&first),
        cs(&second)
    );
    assert_eq!(
        value(&second, "canopy_node_cycles_total", &[]).is_some(),
        has_pmu()
    );
}

/// A cgroup v2 tree in the Slurm layout under the unified mount, removed on
/// drop (after the busy child is killed).
struct TestCgroup {
    root: PathBuf,
    job: PathBuf,
    child: Option<Child>,
}

impl TestCgroup {
    fn new(job: u64) -> Self {
        let unified = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.join("cgroup.procs").exists() && p.join("cgroup.subtree_control").exists())
            .expect("a cgroup v2 mount at /sys/fs/cgroup or /sys/fs/cgroup/unified");
        let root = unified.join(format!("canopy-perf-test-{}-{job}", std::process::id()));
        let job_dir = root.join(format!("system.slice/t_slurmstepd.scope/job_{job}"));
        std::fs::create_dir_all(&job_dir)
            .unwrap_or_else(|e| panic!("create {} (needs root): {e}", job_dir.display()));
        TestCgroup {
            root,
            job: job_dir,
            child: None,
        }
    }

    fn start_busy(&mut self) {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        std::fs::write(self.job.join("cgroup.procs"), child.id().to_string()).unwrap();
        self.child = Some(child);
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        self.stop();
        let mut d = self.job.clone();
        while d.starts_with(&self.root) {
            let _ = std::fs::remove_dir(&d);
            if !d.pop() {
                break;
            }
        }
    }
}

#[test]
fn perf_per_job_counts_a_real_cgroup() {
    assert!(is_root(), "needs root to create a cgroup; CI runs as root");
    let mut cg = TestCgroup::new(77);
    let mut c =
        perf_jobs::PerfJobsCollector::new("n1", &cg.root, Path::new("/sys"), 4096).read_every(2);
    let mut first = Vec::new();
    c.collect(&mut first).unwrap();
    let kinds = c.kinds().expect("job 77 opened").to_vec();
    assert!(kinds.contains(&perf::PerfKind::TaskClock), "{kinds:?}");
    assert_eq!(
        kinds.contains(&perf::PerfKind::Instructions),
        has_pmu(),
        "{kinds:?}"
    );
    let tc = |o: &[Observation]| {
        value(
            o,
            "canopy_job_perf_task_clock_seconds_total",
            &[("job_id", "77")],
        )
        .expect("job 77 series")
    };
    assert!(tc(&first) < 0.01, "empty cgroup: {}", tc(&first));

    cg.start_busy();
    std::thread::sleep(std::time::Duration::from_millis(400));
    // Tick 1 is not a read tick: the last value repeats.
    let mut between = Vec::new();
    c.collect(&mut between).unwrap();
    assert_eq!(tc(&between), tc(&first));
    let mut second = Vec::new();
    c.collect(&mut second).unwrap();
    // The busy loop ran ~0.4 s on a shared 2-CPU machine: well above zero,
    // never more than wall time.
    let busy = tc(&second);
    assert!(busy > 0.01 && busy < 0.5, "task clock {busy}");
    assert_eq!(
        value(
            &second,
            "canopy_job_instructions_total",
            &[("job_id", "77")]
        )
        .is_some(),
        has_pmu()
    );

    // The job ends: its cgroup goes, its series stop.
    cg.stop();
    std::fs::remove_dir(&cg.job).unwrap();
    let mut third = Vec::new();
    c.collect(&mut third).unwrap();
    assert!(third.is_empty(), "{third:?}");
}

#[test]
fn perf_per_job_fd_budget_and_absent_layout() {
    assert!(is_root(), "needs root to create a cgroup; CI runs as root");
    let cg = TestCgroup::new(78);
    // Budget smaller than one job's counters: the job is skipped, no panic.
    let mut c = perf_jobs::PerfJobsCollector::new("n1", &cg.root, Path::new("/sys"), 1);
    let mut out = Vec::new();
    c.collect(&mut out).unwrap();
    assert!(out.is_empty());
    // No v2 Slurm layout at all: one notice, rare re-probe.
    let mut none =
        perf_jobs::PerfJobsCollector::new("n1", Path::new("/nonexistent"), Path::new("/sys"), 4096);
    for _ in 0..600 {
        none.collect(&mut out).unwrap();
    }
    assert!(out.is_empty());
    assert_eq!(none.probe().notices(), 1);
    assert_eq!(none.probe().attempts(), 2);
}

#[test]
fn perf_node_default_is_hardware_only_and_degrades_once() {
    assert!(is_root(), "perf tests need root; CI runs as root");
    let mut c = perf::PerfCollector::new("n1", Path::new("/sys"));
    let mut out = Vec::new();
    for _ in 0..400 {
        c.collect(&mut out).unwrap();
    }
    let report = c.report().expect("probed").clone();
    assert!(
        report.counting.iter().all(|k| k.is_hardware()),
        "{report:?}"
    );
    if has_pmu() {
        assert!(
            out.iter()
                .any(|o| o.labels.name() == "canopy_node_instructions_total")
        );
    } else {
        // This machine: no PMU. One notice, one re-probe in 400 ticks.
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(c.probe().notices(), 1);
        assert_eq!(c.probe().attempts(), 2);
    }
}
