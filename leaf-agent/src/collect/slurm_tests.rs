//! The Slurm job collector on a fixture tree: a cgroup v1 job, its
//! processes under a fake `/proc`, and a fake `scontrol`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cgroup_v1;
use super::proc_io::{parse_proc_io, parse_stat_identity};
use super::{Collector, Observation, SlurmJobsCollector, SlurmJobsOptions};

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn put(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

fn proc_entry(root: &Path, pid: u32, ppid: u32, start: u64, write: u64) {
    let stat = format!(
        "{pid} (weird ) name) S {ppid} {pid} {pid} 0 -1 4194304 116 0 0 0 0 0 0 0 20 0 1 0 {start} 3133440 411"
    );
    put(&root.join(format!("{pid}/stat")), &stat);
    put(
        &root.join(format!("{pid}/io")),
        &format!(
            "rchar: 1\nwchar: 1\nsyscr: 3\nsyscw: 4\nread_bytes: 10\nwrite_bytes: {write}\ncancelled_write_bytes: 0\n"
        ),
    );
}

fn script(dir: &Path, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("scontrol");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p.to_string_lossy().into_owned()
}

/// A node with job 5 of uid 1002: slurmstepd 100, its shell 101, dd 102.
fn tree(d: &Path) -> (PathBuf, PathBuf) {
    let (proc_root, cg) = (d.join("proc"), d.join("cg"));
    let job = "slurm_n1/uid_1002/job_5";
    put(
        &cg.join(format!("cpuacct/{job}/cpuacct.usage")),
        "2500000000\n",
    );
    put(
        &cg.join(format!("memory/{job}/memory.usage_in_bytes")),
        "4096\n",
    );
    put(
        &cg.join(format!("memory/{job}/step_batch/cgroup.procs")),
        "100\n",
    );
    put(
        &cg.join(format!("memory/{job}/step_batch/task_0/cgroup.procs")),
        "101\n102\n",
    );
    proc_entry(&proc_root, 100, 1, 50, 16_384);
    proc_entry(&proc_root, 101, 100, 51, 0);
    proc_entry(&proc_root, 102, 101, 52, 100 << 20);
    put(
        &d.join("passwd"),
        "canopytest:x:1002:1002::/home/c:/bin/sh\n",
    );
    (proc_root, cg)
}

fn value(obs: &[Observation], name: &str, job: &str) -> Option<f64> {
    obs.iter()
        .find(|o| o.labels.name() == name && o.labels.get("job_id") == Some(job))
        .map(|o| o.value)
}

/// Ticks (1 s of virtual time each) until `f` holds or 10 s of real time pass.
fn tick_until(
    c: &mut SlurmJobsCollector,
    t: &mut i64,
    f: impl Fn(&[Observation]) -> bool,
) -> Vec<Observation> {
    let t0 = Instant::now();
    loop {
        *t += 1000;
        c.set_tick_time(*t);
        let mut out = Vec::new();
        let _ = c.collect(&mut out);
        if f(&out) {
            return out;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "condition never held: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn job_io_and_scheduler_labels() {
    let d = crate::TestDir::new();
    let (proc_root, cg) = tree(d.path());
    let fx = data("scontrol/running-batch.txt");
    let sc = script(
        d.path(),
        &format!("sed 's/JobId=2 /JobId=5 /' {}", fx.display()),
    );
    let opts = SlurmJobsOptions {
        scontrol: Some(sc),
        passwd: d.path().join("passwd"),
        ..SlurmJobsOptions::default()
    };
    let mut c = SlurmJobsCollector::new("n1", &proc_root, &cg, opts);
    let mut t = 0;
    let out = tick_until(&mut c, &mut t, |o| {
        value(o, "canopy_job_io_write_bytes_total", "5").is_some()
    });
    let w =
        |o: &[Observation]| value(o, "canopy_job_io_write_bytes_total", "5").expect("io series");
    assert_eq!(w(&out), (16_384 + (100 << 20)) as f64);
    assert_eq!(
        value(&out, "canopy_job_io_read_bytes_total", "5"),
        Some(30.0)
    );
    assert_eq!(
        value(&out, "canopy_job_io_write_ops_total", "5"),
        Some(12.0)
    );
    assert_eq!(value(&out, "canopy_job_cpu_seconds_total", "5"), Some(2.5));
    assert_eq!(value(&out, "canopy_job_cpus_allocated", "5"), Some(1.0));
    assert_eq!(
        value(&out, "canopy_job_memory_allocated_bytes", "5"),
        Some(f64::from(512u32 << 20))
    );
    assert_eq!(value(&out, "canopy_job_gpus_allocated", "5"), Some(0.0));
    for o in out.iter().filter(|o| o.labels.get("job_id") == Some("5")) {
        assert_eq!(o.labels.get("user"), Some("canopytest"), "{o:?}");
        assert_eq!(o.labels.get("partition"), Some("debug"));
        assert_eq!(o.labels.get("node"), Some("n1"));
    }

    // dd (102) wrote 200 MiB more, exited and was reaped by the shell.
    std::fs::remove_dir_all(proc_root.join("102")).expect("rm");
    put(
        &cg.join("memory/slurm_n1/uid_1002/job_5/step_batch/task_0/cgroup.procs"),
        "101\n",
    );
    proc_entry(&proc_root, 101, 100, 51, 300 << 20);
    let out = tick_until(&mut c, &mut t, |_| true);
    assert_eq!(
        w(&out),
        (16_384 + (300 << 20)) as f64,
        "reaped I/O counted once"
    );
    // Label sets kept from the first report are the ones a fresh build
    // gives, with the right kind, tick after tick.
    let jobs: Vec<_> = out
        .iter()
        .filter(|o| o.labels.get("job_id") == Some("5"))
        .collect();
    assert_eq!(jobs.len(), 9, "no rss or cache in this fixture: {jobs:?}");
    for o in jobs {
        let name = o.labels.name();
        let pairs: Vec<(&str, &str)> = ["job_id", "user", "account", "partition"]
            .iter()
            .map(|k| (*k, o.labels.get(k).unwrap_or("")))
            .collect();
        let fresh = Observation::new(name, o.kind, "n1", &pairs, o.value);
        assert_eq!(o.labels, fresh.labels);
        assert_eq!(
            o.kind == canopy_proto::model::MetricKind::Counter,
            name.ends_with("_total"),
            "{name}"
        );
    }

    // An unreadable process file: that process is skipped and counted, the rest stays.
    put(&proc_root.join("101/io"), "write_bytes: lots\n");
    let mut out = Vec::new();
    c.set_tick_time(t + 1000);
    assert!(c.collect(&mut out).is_err());
    assert_eq!(w(&out), (16_384 + (300 << 20)) as f64, "never decreases");
    assert!(
        out.iter()
            .any(|o| o.labels.name() == "canopy_leaf_collector_errors_total"
                && o.labels.get("kind") == Some("proc_io")
                && o.value >= 1.0)
    );
    assert_eq!(value(&out, "canopy_job_cpu_seconds_total", "5"), Some(2.5));
    // Its control files stay open from tick to tick (re-read in place):
    // cpuacct.usage and memory.usage_in_bytes; the two cgroup.procs are
    // opened afresh each tick (a kept v1 pid list can be stale).
    assert_eq!(c.open_job_files(), 2);
    put(
        &cg.join("cpuacct/slurm_n1/uid_1002/job_5/cpuacct.usage"),
        "3500000000\n",
    );
    let mut out = Vec::new();
    t += 1000;
    c.set_tick_time(t);
    let _ = c.collect(&mut out);
    assert_eq!(value(&out, "canopy_job_cpu_seconds_total", "5"), Some(3.5));

    // The job ends: no series of it any more (the sampler marks them stale).
    std::fs::remove_dir_all(cg.join("memory/slurm_n1/uid_1002/job_5")).expect("rm");
    std::fs::remove_dir_all(cg.join("cpuacct/slurm_n1/uid_1002/job_5")).expect("rm");
    let mut out = Vec::new();
    c.set_tick_time(t + 2000);
    c.collect(&mut out).expect("clean tick");
    assert!(
        out.iter().all(|o| o.labels.get("job_id").is_none()),
        "{out:?}"
    );
    assert_eq!(c.open_job_files(), 0, "an ended job's files are closed");
}

#[test]
fn scheduler_garbage_falls_back_to_the_uid_and_counts() {
    let d = crate::TestDir::new();
    let (proc_root, cg) = tree(d.path());
    let sc = script(d.path(), "echo 'JobId=5 }{ garbage'");
    let opts = SlurmJobsOptions {
        scontrol: Some(sc),
        passwd: d.path().join("passwd"),
        label_wait_ms: 3_000,
        ..SlurmJobsOptions::default()
    };
    let mut c = SlurmJobsCollector::new("n1", &proc_root, &cg, opts);
    let mut t = 0;
    let out = tick_until(&mut c, &mut t, |o| {
        value(o, "canopy_job_cpu_seconds_total", "5").is_some()
            && o.iter().any(|x| x.labels.get("kind") == Some("scheduler"))
    });
    let cpu = out
        .iter()
        .find(|o| o.labels.name() == "canopy_job_cpu_seconds_total")
        .expect("job series");
    assert_eq!(
        cpu.labels.get("user"),
        Some("canopytest"),
        "uid 1002 from passwd"
    );
    assert_eq!(cpu.labels.get("partition"), None);
    assert!(
        value(&out, "canopy_job_gpus_allocated", "5").is_none(),
        "unknown, not 0"
    );
}

#[test]
fn no_scheduler_reports_at_once_with_a_numeric_user() {
    let d = crate::TestDir::new();
    let (proc_root, cg) = tree(d.path());
    let opts = SlurmJobsOptions {
        scontrol: None,
        passwd: d.path().join("no-passwd"),
        ..SlurmJobsOptions::default()
    };
    let mut c = SlurmJobsCollector::new("n1", &proc_root, &cg, opts);
    let mut out = Vec::new();
    c.collect(&mut out).expect("collects");
    let cpu = out
        .iter()
        .find(|o| o.labels.name() == "canopy_job_cpu_seconds_total")
        .expect("series");
    assert_eq!(cpu.labels.get("user"), Some("1002"));
}

#[test]
fn proc_file_parsers_on_recorded_files() {
    let io =
        parse_proc_io(&std::fs::read_to_string(data("pid/io")).expect("fixture")).expect("parses");
    assert_eq!(
        (io.write_bytes, io.read_bytes, io.read_ops, io.write_ops),
        (314_597_376, 98_304, 321, 304)
    );
    let st = parse_stat_identity(&std::fs::read_to_string(data("pid/stat")).expect("fixture"))
        .expect("parses");
    assert_eq!((st.ppid, st.start_ticks), (5025, 312_844));
    let odd = parse_stat_identity("7 (a) b (c)) R 3 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0")
        .expect("parses");
    assert_eq!((odd.ppid, odd.start_ticks), (3, 99));
    assert!(parse_proc_io("rchar: 1\n").is_err());
    assert!(parse_proc_io("read_bytes: 1\nwrite_bytes: -1\n").is_err());
    assert!(parse_stat_identity("12 (x").is_err());
    assert!(parse_stat_identity("12 (x) R").is_err());
    assert!(super::proc_io::parse_pid_list("1\n\n2\nx\n").is_err());
}

#[test]
fn odd_names_and_unreadable_files_degrade_without_panic() {
    let d = crate::TestDir::new();
    let (proc_root, cg) = tree(d.path());
    // Odd directory names next to the real job: none is a job.
    for odd in [
        "memory/slurm_n1/uid_1002/job_",
        "memory/slurm_n1/uid_1002/job_99999999999999999999999",
        "memory/slurm_n1/uid_x/job_6",
        "memory/slurm_n1/uid_1002/job 7",
        "memory/slurm_n1/uid_1002/job_8\nx",
        "memory/slurmy/uid_1/not_a_job",
    ] {
        std::fs::create_dir_all(cg.join(odd)).expect("mkdir");
    }
    // An `io` that is a directory (EISDIR) and a garbage cgroup.procs.
    std::fs::remove_file(proc_root.join("101/io")).expect("rm");
    std::fs::create_dir_all(proc_root.join("101/io")).expect("mkdir");
    put(
        &cg.join("memory/slurm_n1/uid_1002/job_5/step_extern/cgroup.procs"),
        "12x\n",
    );
    let opts = SlurmJobsOptions {
        scontrol: None,
        passwd: d.path().join("passwd"),
        ..SlurmJobsOptions::default()
    };
    let mut c = SlurmJobsCollector::new("n1", &proc_root, &cg, opts);
    let mut out = Vec::new();
    let err = c.collect(&mut out).expect_err("the bad files are reported");
    assert!(!err.to_string().is_empty());
    let jobs: std::collections::BTreeSet<&str> =
        out.iter().filter_map(|o| o.labels.get("job_id")).collect();
    assert_eq!(jobs.into_iter().collect::<Vec<_>>(), ["5"]);
    // 100 and 102 still count; 101 is skipped.
    assert_eq!(
        value(&out, "canopy_job_io_write_bytes_total", "5"),
        Some((16_384 + (100 << 20)) as f64)
    );
    let errors: f64 = out
        .iter()
        .filter(|o| o.labels.name() == "canopy_leaf_collector_errors_total")
        .map(|o| o.value)
        .sum();
    assert!(errors >= 2.0, "{errors}");
}

#[test]
fn job_directories_are_listed_once_per_tick_across_collectors() {
    let d = crate::TestDir::new();
    let cpuacct = d.path().join("cg/cpuacct");
    put(&cpuacct.join("slurm_n1/uid_7/job_1/cpuacct.usage"), "1\n");
    let cache = cgroup_v1::JobDirsCache::new();
    let other = cache.clone();
    let jobs = |c: &cgroup_v1::JobDirsCache, tick: i64| {
        let mut seen = false;
        let dirs = c.job_dirs_seen(&cpuacct, tick, &mut seen).expect("listed");
        assert!(seen, "the slurm root is seen, listed or cached");
        dirs.into_iter().map(|(_, id, _)| id).collect::<Vec<_>>()
    };
    assert_eq!(jobs(&cache, 1000), vec![1]);
    put(&cpuacct.join("slurm_n1/uid_7/job_2/cpuacct.usage"), "1\n");
    assert_eq!(jobs(&other, 1000), vec![1], "the same tick: one listing");
    let mut next = jobs(&other, 2000);
    next.sort_unstable();
    assert_eq!(next, vec![1, 2], "the next tick lists again");
    // Nothing changed: later ticks reuse the listing (inotify says so).
    let walks = cache.walks();
    let sorted = |mut v: Vec<u64>| {
        v.sort_unstable();
        v
    };
    assert_eq!(sorted(jobs(&cache, 3000)), vec![1, 2]);
    assert_eq!(sorted(jobs(&other, 4000)), vec![1, 2]);
    assert_eq!(
        cache.walks(),
        walks,
        "unchanged directories: not listed again"
    );
    // A job of a new user (two levels below a watched directory): next tick.
    put(&cpuacct.join("slurm_n1/uid_9/job_3/cpuacct.usage"), "1\n");
    assert_eq!(sorted(jobs(&cache, 5000)), vec![1, 2, 3]);
    assert_eq!(cache.walks(), walks + 1);
    // A job made under the new user's directory once it is watched.
    put(&cpuacct.join("slurm_n1/uid_9/job_4/cpuacct.usage"), "1\n");
    assert_eq!(sorted(jobs(&cache, 6000)), vec![1, 2, 3, 4]);
    // Jobs removed (their series then go stale): gone at the next tick.
    std::fs::remove_dir_all(cpuacct.join("slurm_n1/uid_9")).expect("rm");
    assert_eq!(sorted(jobs(&other, 7000)), vec![1, 2]);
    std::fs::remove_dir_all(cpuacct.join("slurm_n1/uid_7/job_1")).expect("rm");
    assert_eq!(jobs(&cache, 8000), vec![2]);
    assert_eq!(jobs(&cache, 0), vec![2], "no tick time: always listed");
    // At most RELIST_EVERY ticks without a listing, changed or not.
    let walks = cache.walks();
    for k in 0..cgroup_v1::RELIST_EVERY {
        let _ = jobs(&cache, 9000 + 1000 * i64::try_from(k).expect("small"));
    }
    assert_eq!(cache.walks(), walks + 1, "one safety relisting");
}

#[test]
fn a_job_tree_is_listed_again_only_when_it_changed() {
    let d = crate::TestDir::new();
    let job = d.path().join("memory/slurm_n1/uid_7/job_1");
    put(&job.join("step_batch/cgroup.procs"), "1\n");
    let cache = cgroup_v1::JobDirsCache::new();
    let tree = |tick: i64| {
        let (mut dirs, errs) = cache.tree(&job, tick);
        assert!(errs.is_empty(), "{errs:?}");
        dirs.sort();
        dirs.iter()
            .map(|p| {
                p.strip_prefix(&job)
                    .expect("below")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(tree(1000), vec!["", "step_batch"]);
    let walks = cache.walks();
    assert_eq!(tree(2000), vec!["", "step_batch"]);
    assert_eq!(cache.walks(), walks, "unchanged: not listed again");
    // A new step and a task below it: seen at the next tick.
    put(&job.join("step_0/task_0/cgroup.procs"), "2\n");
    assert_eq!(
        tree(3000),
        vec!["", "step_0", "step_0/task_0", "step_batch"]
    );
    // A task made below the new (now watched) step, then removed.
    std::fs::create_dir(job.join("step_0/task_1")).expect("mkdir");
    assert_eq!(tree(4000).len(), 5);
    std::fs::remove_dir_all(job.join("step_0")).expect("rm");
    assert_eq!(tree(5000), vec!["", "step_batch"]);
    // No tick time: walked every call; a missing job is itself only.
    std::fs::remove_dir_all(&job).expect("rm job");
    assert_eq!(cache.tree(&job, 0).0, vec![job.clone()]);
}

#[test]
fn v2_job_directories_are_watched_too() {
    let d = crate::TestDir::new();
    let root = d.path().join("cg");
    std::fs::create_dir_all(&root).expect("root");
    let cache = cgroup_v1::JobDirsCache::new();
    let at = |tick: i64| {
        cache
            .v2_job_dirs(&root, tick)
            .expect("listed")
            .map(|(d, scope)| (d.into_iter().map(|(id, _)| id).collect::<Vec<_>>(), scope))
    };
    assert_eq!(at(1000), None, "no system.slice");
    std::fs::create_dir_all(root.join("system.slice/slurmstepd.scope")).expect("mkdir");
    assert_eq!(
        at(2000),
        Some((vec![], true)),
        "made: seen at the next tick"
    );
    let walks = cache.walks();
    assert_eq!(at(3000), Some((vec![], true)));
    assert_eq!(cache.walks(), walks, "unchanged: reused");
    put(
        &root.join("system.slice/slurmstepd.scope/job_8/cpu.stat"),
        "usage_usec 1\n",
    );
    assert_eq!(at(4000), Some((vec![8], true)));
    std::fs::remove_dir_all(root.join("system.slice/slurmstepd.scope/job_8")).expect("rm");
    assert_eq!(at(5000), Some((vec![], true)));
}
