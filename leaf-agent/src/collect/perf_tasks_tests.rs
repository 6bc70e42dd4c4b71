//! Per-task perf counters for cgroup v1 Slurm jobs: the inheritance rule on
//! hand-made task lists, `/proc/<pid>/status` recorded here, and a real
//! cgroup v1 job directory (Slurm's layout, made under a private directory
//! of this machine's cpuacct hierarchy) with real busy processes, checked
//! against the kernel's own `cpuacct.usage` of that cgroup.

#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use super::perf::PerfKind;
use super::perf_tasks::{PerfTasksCollector, TaskInfo, parse_status, tasks_to_open};
use super::*;

fn t(tid: u32, tgid: u32, ppid: u32, name: &str) -> TaskInfo {
    TaskInfo {
        tid,
        tgid,
        ppid,
        name: name.into(),
    }
}

#[test]
fn perf_tasks_status_recorded_here() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pid/status");
    let s = parse_status(&std::fs::read_to_string(p).unwrap()).unwrap();
    assert_eq!(s, t(17561, 17561, 17553, "cp"));
    assert!(
        parse_status("Name:\tx\nPid:\t3\n").is_err(),
        "no Tgid, PPid"
    );
    assert!(parse_status("Name:\tx\nPid:\tz\nTgid:\t1\nPPid:\t1\n").is_err());
}

#[test]
fn perf_tasks_inheritance_rule() {
    let none = HashSet::new();
    // First sight of a job: every task gets its own counter.
    let first = [
        t(100, 100, 1, "slurmstepd"),
        t(101, 101, 100, "bash"),
        t(102, 101, 100, "bash"),
    ];
    assert_eq!(tasks_to_open(&none, &first), [100, 101, 102]);
    let known: HashSet<u32> = [100, 101, 102].into();
    let later = [
        // A child and a thread of counted tasks, and a grandchild through
        // a new (inherited) child: all inherited.
        t(110, 110, 101, "python"),
        t(111, 110, 101, "python"),
        t(112, 112, 110, "cc1"),
        // A new step's slurmstepd (double-forked, parent init), and a
        // process of an ssh session adopted into the job: their own.
        t(120, 120, 1, "slurmstepd"),
        t(121, 121, 120, "a.out"),
        t(130, 130, 555, "bash"),
        // An orphan whose counted parent already exited.
        t(140, 140, 1, "daemon"),
    ];
    assert_eq!(tasks_to_open(&known, &later), [120, 121, 130]);
    // An orphan in a job with nothing counted yet gets its own.
    assert_eq!(tasks_to_open(&none, &[t(140, 140, 1, "daemon")]), [140]);
    // Stale parent links that loop do not hang.
    let cycle = [t(7, 7, 8, "a"), t(8, 8, 7, "b")];
    assert_eq!(tasks_to_open(&none, &cycle), [7, 8]);
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

/// `<cpuacct>/canopy-perf-v1-<pid>/slurm_t/uid_0/job_<id>/step_*`: Slurm's
/// v1 layout under a private directory, so no other scan on this machine
/// sees a fake job. Children killed and directories removed on drop.
struct V1Job {
    ctl: PathBuf,
    job: PathBuf,
    children: Vec<Child>,
}

impl V1Job {
    fn new(id: u64) -> Self {
        let cpuacct = Path::new("/sys/fs/cgroup/cpuacct");
        assert!(
            cpuacct.join("cpuacct.usage").exists(),
            "needs a cgroup v1 cpuacct hierarchy at /sys/fs/cgroup/cpuacct (this CI host has one)"
        );
        let ctl = cpuacct.join(format!("canopy-perf-v1-{}-{id}", std::process::id()));
        let job = ctl.join(format!("slurm_t/uid_0/job_{id}"));
        std::fs::create_dir_all(job.join("step_0")).unwrap();
        V1Job {
            ctl,
            job,
            children: Vec::new(),
        }
    }

    /// Starts `script` under sh and moves it into `step`.
    fn start(&mut self, step: &str, script: &str) {
        let dir = self.job.join(step);
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("sh").args(["-c", script]).spawn().unwrap();
        std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).unwrap();
        self.children.push(child);
    }

    fn cpuacct_s(&self) -> f64 {
        let t = std::fs::read_to_string(self.job.join("cpuacct.usage")).unwrap();
        t.trim().parse::<f64>().unwrap() / 1e9
    }

    fn stop(&mut self) {
        for mut c in self.children.drain(..) {
            let _ = Command::new("pkill")
                .args(["-KILL", "-P", &c.id().to_string()])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for V1Job {
    fn drop(&mut self) {
        self.stop();
        // Removing a cgroup needs its tasks gone: give the kernel a moment.
        for _ in 0..50 {
            let mut dirs = vec![self.ctl.clone()];
            let mut all = Vec::new();
            while let Some(d) = dirs.pop() {
                if let Ok(rd) = std::fs::read_dir(&d) {
                    for e in rd.flatten() {
                        if e.file_type().is_ok_and(|f| f.is_dir()) {
                            dirs.push(e.path());
                        }
                    }
                }
                all.push(d);
            }
            all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
            for d in &all {
                let _ = std::fs::remove_dir(d);
            }
            if !self.ctl.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn value(obs: &[Observation], name: &str, job: &str) -> Option<f64> {
    obs.iter()
        .find(|o| o.labels.name() == name && o.labels.get("job_id") == Some(job))
        .map(|o| o.value)
}

#[test]
fn perf_tasks_count_a_real_v1_job_with_inherited_children() {
    assert!(
        is_root(),
        "needs root (cgroups, perf on other tasks); CI runs as root"
    );
    let mut job = V1Job::new(79);
    // The first process forks its busy child only after the collector saw it.
    job.start("step_0", "sleep 0.3; (while :; do :; done) & wait");
    let mut c =
        PerfTasksCollector::with_controllers("n1", vec![job.ctl.clone()], Path::new("/proc"), 4096)
            .read_every(1);
    let mut out = Vec::new();
    c.collect(&mut out).unwrap();
    let kinds = c.kinds().expect("counters opened").to_vec();
    assert!(kinds.contains(&PerfKind::TaskClock), "{kinds:?}");
    assert!(kinds.contains(&PerfKind::ContextSwitches), "{kinds:?}");
    // Hardware counters only with a PMU (this VM has none: refused once).
    assert_eq!(kinds.contains(&PerfKind::Cycles), has_pmu(), "{kinds:?}");
    let opened_first = c.opened_tasks(79).unwrap();
    assert!(opened_first >= 1, "{opened_first}");

    std::thread::sleep(Duration::from_millis(1200));
    out.clear();
    c.collect(&mut out).unwrap();
    // sleep and the busy subshell were forked later: inherited, no new fds.
    assert_eq!(c.opened_tasks(79), Some(opened_first));
    let tc = value(&out, "canopy_job_perf_task_clock_seconds_total", "79").unwrap();
    let acct = job.cpuacct_s();
    // On a loaded 2-CPU machine the busy child may get little CPU: what
    // matters is that it is counted at all, and that perf agrees with the
    // kernel's own account of the cgroup.
    assert!(tc > 0.02, "busy child counted through inherit: {tc}");
    assert!(
        (tc - acct).abs() <= 0.15 * acct + 0.1,
        "perf task-clock {tc} s vs the kernel's cpuacct.usage {acct} s"
    );
    assert!(value(&out, "canopy_job_perf_context_switches_total", "79").is_some_and(|v| v >= 1.0));

    // A new step: a process from outside the job's tree gets its own counter.
    job.start("step_1", "while :; do :; done");
    out.clear();
    c.collect(&mut out).unwrap();
    assert_eq!(c.opened_tasks(79), Some(opened_first + 1));
    std::thread::sleep(Duration::from_millis(600));
    out.clear();
    c.collect(&mut out).unwrap();
    let tc2 = value(&out, "canopy_job_perf_task_clock_seconds_total", "79").unwrap();
    let acct2 = job.cpuacct_s();
    assert!(tc2 > tc, "{tc} -> {tc2}");
    assert!(
        (tc2 - acct2).abs() <= 0.15 * acct2 + 0.1,
        "perf task-clock {tc2} s vs cpuacct.usage {acct2} s"
    );

    // The job ends: its tasks exit, its directory goes, its series stop.
    job.stop();
    let dir = job.job.clone();
    for step in ["step_0", "step_1"] {
        for _ in 0..50 {
            if std::fs::remove_dir(dir.join(step)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    std::fs::remove_dir(&dir).unwrap();
    out.clear();
    c.collect(&mut out).unwrap();
    assert!(
        !out.iter().any(|o| o.labels.get("job_id") == Some("79")),
        "{out:?}"
    );
}

#[test]
fn perf_tasks_no_v1_jobs_logs_once_and_budget_holds() {
    let mut none =
        PerfTasksCollector::new("n1", Path::new("/nonexistent"), Path::new("/proc"), 4096);
    let mut out = Vec::new();
    for _ in 0..600 {
        none.collect(&mut out).unwrap();
    }
    assert!(out.is_empty());
    assert_eq!(none.probe().notices(), 1);
    assert_eq!(none.probe().attempts(), 2);

    assert!(is_root(), "needs root; CI runs as root");
    let mut job = V1Job::new(80);
    job.start("step_0", "sleep 30");
    // A budget smaller than one task's counters: nothing opened, counted.
    let mut c =
        PerfTasksCollector::with_controllers("n1", vec![job.ctl.clone()], Path::new("/proc"), 1);
    out.clear();
    c.collect(&mut out).unwrap();
    assert!(
        !out.iter()
            .any(|o| o.labels.name() == "canopy_job_perf_task_clock_seconds_total")
    );
    assert!(out.iter().any(|o| {
        o.labels.name() == "canopy_leaf_collector_errors_total"
            && o.labels.get("kind") == Some("fd_budget")
    }));
}

#[test]
fn perf_tasks_idle_slurm_root_picks_up_a_new_job_at_the_next_tick() {
    let d = crate::TestDir::new();
    let ctl = d.path().join("cpuacct");
    std::fs::create_dir_all(ctl.join("slurm_n1/uid_1000")).unwrap();
    let mut c =
        PerfTasksCollector::with_controllers("n1", vec![ctl.clone()], Path::new("/proc"), 64);
    let mut out = Vec::new();
    for _ in 0..5 {
        c.collect(&mut out).unwrap();
    }
    assert_eq!(c.probe().notices(), 0, "Slurm's root is there: no back-off");
    // A job starts (its tasks are already gone: nothing to open, no panic).
    std::fs::create_dir_all(ctl.join("slurm_n1/uid_1000/job_9/step_0")).unwrap();
    std::fs::write(
        ctl.join("slurm_n1/uid_1000/job_9/step_0/tasks"),
        "4000000000\n",
    )
    .unwrap();
    c.collect(&mut out).unwrap();
    assert_eq!(c.opened_tasks(9), Some(0));
    assert!(out.is_empty(), "{out:?}");
}
