//! Per-job perf counters on a real Slurm in cgroup v1 mode (Slurm makes no
//! perf_event cgroup there, so the leaf counts per task with `inherit`): a
//! CPU job submitted by the unprivileged test user is counted, and its
//! perf task-clock over a few seconds matches the kernel's own
//! `cpuacct.usage` of the job's cgroup over the same seconds.
//!
//! Needs root and the single-node Slurm of `scripts/local-slurm.sh` (run
//! here with `start`, which returns at once when it is already up). Fails,
//! naming the script, when that is not possible. With Slurm in
//! `proctrack/linuxproc` mode (no job cgroups) it checks that no per-task
//! series is claimed.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use canopy_leaf::Collector;
use canopy_leaf::collect::perf_tasks::PerfTasksCollector;

const SCRIPT: &str = "scripts/local-slurm.sh";
const USER: &str = "canopytest";

fn run(cmd: &str, args: &[&str]) -> (bool, String) {
    match Command::new(cmd).args(args).stdin(Stdio::null()).output() {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ),
        Err(e) => (false, format!("cannot run {cmd}: {e}")),
    }
}

/// Cancels the job on drop.
struct Job(String);

impl Drop for Job {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).output();
    }
}

/// The job's cpuacct directory (any `slurm*` root), once it exists.
fn job_dir(id: &str) -> Option<PathBuf> {
    let cpuacct = Path::new("/sys/fs/cgroup/cpuacct");
    for root in std::fs::read_dir(cpuacct).ok()?.flatten() {
        if !root.file_name().to_string_lossy().starts_with("slurm") {
            continue;
        }
        for uid in std::fs::read_dir(root.path()).ok()?.flatten() {
            let d = uid.path().join(format!("job_{id}"));
            if d.join("cpuacct.usage").exists() {
                return Some(d);
            }
        }
    }
    None
}

fn cpuacct_s(dir: &Path) -> f64 {
    let t = std::fs::read_to_string(dir.join("cpuacct.usage")).unwrap();
    t.trim().parse::<f64>().unwrap() / 1e9
}

fn task_clock(c: &mut PerfTasksCollector, id: &str) -> Option<f64> {
    let mut out = Vec::new();
    let _ = c.collect(&mut out);
    out.iter()
        .find(|o| {
            o.labels.name() == "canopy_job_perf_task_clock_seconds_total"
                && o.labels.get("job_id") == Some(id)
        })
        .map(|o| o.value)
}

#[test]
fn slurm_v1_job_perf_task_clock_matches_cpuacct() {
    let (ok, uid) = run("id", &["-u"]);
    assert!(
        ok && uid.trim() == "0",
        "this test needs root to run `{SCRIPT} start` (a real single-node Slurm) and to count other users' tasks"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(SCRIPT);
    let (ok, out) = run("bash", &[&script.to_string_lossy(), "start"]);
    assert!(
        ok,
        "Slurm is not up and `{SCRIPT} start` failed; run `bash {SCRIPT} start` as root:\n{out}"
    );
    let (ok, text) = run(
        "runuser",
        &[
            "-u",
            USER,
            "--",
            "sbatch",
            "--parsable",
            "-J",
            "perf-burn",
            "--chdir",
            "/tmp",
            "-o",
            "/dev/null",
            "--wrap",
            "timeout 40 sh -c 'while :; do :; done'",
        ],
    );
    assert!(
        ok,
        "sbatch as {USER} failed (is `{SCRIPT} start` done?): {text}"
    );
    let id = text.trim().to_string();
    let _job = Job(id.clone());

    let (_, conf) = run("scontrol", &["show", "config"]);
    let linuxproc = conf
        .lines()
        .any(|l| l.starts_with("ProctrackType") && l.contains("linuxproc"));
    let mut c =
        PerfTasksCollector::new("n1", Path::new("/sys/fs/cgroup"), Path::new("/proc"), 4096)
            .read_every(1);
    let start = Instant::now();
    let dir = loop {
        if let Some(d) = job_dir(&id) {
            break Some(d);
        }
        if linuxproc && start.elapsed() > Duration::from_secs(5) {
            break None;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "job {id} never showed in /sys/fs/cgroup/cpuacct/slurm*; is Slurm in cgroup mode?"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let Some(dir) = dir else {
        // linuxproc: no job cgroup, so nothing is counted per task.
        assert_eq!(task_clock(&mut c, &id), None);
        return;
    };
    // Wait until the job's busy loop runs in its cgroup.
    let t0 = loop {
        if let Some(v) = task_clock(&mut c, &id) {
            break v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no perf series for job {id}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let a0 = cpuacct_s(&dir);
    std::thread::sleep(Duration::from_secs(3));
    let t1 = task_clock(&mut c, &id).unwrap();
    let a1 = cpuacct_s(&dir);
    let (dt, da) = (t1 - t0, a1 - a0);
    assert!(da > 0.1, "the job burned CPU: cpuacct delta {da}");
    assert!(
        (dt - da).abs() <= 0.15 * da + 0.1,
        "perf task-clock delta {dt} s vs cpuacct.usage delta {da} s"
    );
}
