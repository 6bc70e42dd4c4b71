//! Bad input for the leaf (issue 3, "Bad input"): processes that vanish
//! between being listed and being read, files the kernel refuses to read
//! (a real `EACCES`, even for root), and odd cgroup directory names
//! (spaces, unicode, not UTF-8, the 255-byte maximum). Each degrades the
//! value it concerns, counts, and leaves the rest of the tick alone.

#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::k8s_pods::{K8sPodsCollector, scan_pods};
use super::proc_io::read_proc;
use super::{Collector, Observation, SlurmJobsCollector, SlurmJobsOptions, cgroup_v1, cgroup_v2};
use crate::TestDir;

/// A sysctl file that is write-only: reading it fails with EACCES even for
/// root (proc sysctl checks the mode bits without CAP_DAC_OVERRIDE).
const EACCES_FILE: &str = "/proc/sys/vm/compact_memory";

fn put(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn proc_entry(root: &Path, pid: u32, ppid: u32, write: u64) {
    let stat = format!(
        "{pid} (sh) S {ppid} {pid} {pid} 0 -1 4194304 116 0 0 0 0 0 0 0 20 0 1 0 {} 3133440 411",
        1000 + pid
    );
    put(&root.join(format!("{pid}/stat")), &stat);
    put(
        &root.join(format!("{pid}/io")),
        &format!(
            "rchar: 1\nwchar: 1\nsyscr: 3\nsyscw: 4\nread_bytes: 10\nwrite_bytes: {write}\ncancelled_write_bytes: 0\n"
        ),
    );
}

/// Job 5 of uid 1002 with processes 100, 101 and 102 listed in its cgroup.
fn slurm_tree(d: &Path) -> (PathBuf, PathBuf) {
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
        &cg.join(format!("memory/{job}/step_0/cgroup.procs")),
        "100\n101\n102\n",
    );
    proc_entry(&proc_root, 100, 1, 1 << 20);
    (proc_root, cg)
}

fn collector(d: &Path, proc_root: &Path, cg: &Path) -> SlurmJobsCollector {
    let opts = SlurmJobsOptions {
        scontrol: None,
        passwd: d.join("passwd"),
        ..SlurmJobsOptions::default()
    };
    SlurmJobsCollector::new("n1", proc_root, cg, opts)
}

fn value(obs: &[Observation], name: &str, job: &str) -> Option<f64> {
    obs.iter()
        .find(|o| o.labels.name() == name && o.labels.get("job_id") == Some(job))
        .map(|o| o.value)
}

fn errors(obs: &[Observation], collector: &str) -> f64 {
    obs.iter()
        .filter(|o| {
            o.labels.name() == "canopy_leaf_collector_errors_total"
                && o.labels.get("collector") == Some(collector)
        })
        .map(|o| o.value)
        .sum()
}

#[test]
fn bad_input_vanished_processes_are_normal_not_errors() {
    // A real process that has exited and been reaped: its /proc is gone.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    assert!(read_proc(Path::new("/proc"), pid).unwrap().is_none());

    let d = TestDir::new();
    let (proc_root, cg) = slurm_tree(d.path());
    // 101 vanished after `stat` was read but before `io`; 102 is listed in
    // cgroup.procs but already gone from /proc.
    put(
        &proc_root.join("101/stat"),
        "101 (sh) S 100 101 101 0 -1 4194304 116 0 0 0 0 0 0 0 20 0 1 0 1101 3133440 411",
    );
    assert!(read_proc(&proc_root, 101).unwrap().is_none());
    assert!(read_proc(&proc_root, 102).unwrap().is_none());
    let mut c = collector(d.path(), &proc_root, &cg);
    let mut out = Vec::new();
    c.collect(&mut out)
        .expect("vanished processes are not errors");
    assert_eq!(
        value(&out, "canopy_job_io_write_bytes_total", "5"),
        Some((1 << 20) as f64)
    );
    assert_eq!(errors(&out, "slurm_jobs"), 0.0);
}

#[test]
fn bad_input_permission_denied_is_counted_and_the_rest_kept() {
    let denied = std::fs::read_to_string(EACCES_FILE)
        .expect_err("reading a write-only sysctl file must fail");
    assert_eq!(
        denied.kind(),
        std::io::ErrorKind::PermissionDenied,
        "{EACCES_FILE} should refuse reads with EACCES on Linux"
    );
    let d = TestDir::new();
    let (proc_root, cg) = slurm_tree(d.path());
    // The job's CPU file and one process's io answer EACCES.
    let usage = cg.join("cpuacct/slurm_n1/uid_1002/job_5/cpuacct.usage");
    std::fs::remove_file(&usage).unwrap();
    std::os::unix::fs::symlink(EACCES_FILE, &usage).unwrap();
    proc_entry(&proc_root, 101, 100, 7 << 20);
    std::fs::remove_file(proc_root.join("101/io")).unwrap();
    std::os::unix::fs::symlink(EACCES_FILE, proc_root.join("101/io")).unwrap();
    let mut c = collector(d.path(), &proc_root, &cg);
    let mut out = Vec::new();
    let err = c
        .collect(&mut out)
        .expect_err("returned for the rate-limited log");
    assert!(err.to_string().contains("ermission denied"), "{err}");
    // Memory and process 100's I/O still there; the CPU value is lost.
    assert_eq!(value(&out, "canopy_job_memory_bytes", "5"), Some(4096.0));
    assert_eq!(
        value(&out, "canopy_job_io_write_bytes_total", "5"),
        Some((1 << 20) as f64)
    );
    assert!(errors(&out, "slurm_jobs") >= 2.0);

    // A pod whose memory file is refused: counted, CPU kept.
    let k = d.path().join("k8s");
    let pod = k.join("kubepods/besteffort/pod11111111-2222-3333-4444-555555555555");
    put(&k.join("cgroup.controllers"), "cpu memory\n");
    put(&pod.join("cpu.stat"), "usage_usec 5000000\n");
    std::os::unix::fs::symlink(EACCES_FILE, pod.join("memory.current")).unwrap();
    let mut kc = K8sPodsCollector::new("n1", &k, None);
    let mut out = Vec::new();
    assert!(kc.collect(&mut out).is_err());
    let uid = "11111111-2222-3333-4444-555555555555";
    assert_eq!(value(&out, "canopy_job_cpu_seconds_total", uid), Some(5.0));
    assert_eq!(value(&out, "canopy_job_memory_bytes", uid), None);
    assert_eq!(errors(&out, "k8s_pods"), 1.0);
}

#[test]
fn bad_input_odd_cgroup_names_are_skipped_and_real_jobs_still_found() {
    let d = TestDir::new();
    let cg = d.path().join("cg");
    put(
        &cg.join("cpuacct/slurm_n1/uid_1002/job_5/cpuacct.usage"),
        "1000000000\n",
    );
    put(
        &cg.join("system.slice/slurmstepd.scope/job_6/cpu.stat"),
        "usage_usec 2000000\n",
    );
    let uid = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
    put(&cg.join("cgroup.controllers"), "cpu\n");
    put(
        &cg.join(format!("kubepods/pod{uid}/cpu.stat")),
        "usage_usec 3000000\n",
    );
    let long = format!("job_{}", "9".repeat(251)); // 255 bytes, overflows u64
    let long_x = "x".repeat(255);
    let names: Vec<&OsStr> = vec![
        OsStr::new("job_5 copy"),
        OsStr::new("job_ü"),
        OsStr::new("jöb_7"),
        OsStr::new("job_８"), // a full-width digit is not ASCII
        OsStr::new(long.as_str()),
        OsStr::new(long_x.as_str()),
        OsStr::from_bytes(b"job_\xff\xfe"), // not UTF-8
        OsStr::new(" job_9"),
    ];
    for parent in [
        "cpuacct/slurm_n1/uid_1002",
        "cpuacct/slurm_n1",
        "system.slice/slurmstepd.scope",
        "system.slice",
        "kubepods",
        "kubepods/burstable",
    ] {
        for n in &names {
            std::fs::create_dir_all(cg.join(parent).join(n)).unwrap();
        }
    }
    let (v1, errs) = cgroup_v1::scan_jobs(&cg);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(v1.iter().map(|j| j.job_id).collect::<Vec<_>>(), [5]);
    let (v2, errs) = cgroup_v2::scan_jobs(&cg);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(v2.iter().map(|j| j.job.job_id).collect::<Vec<_>>(), [6]);
    let (pods, errs) = scan_pods(&cg);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].pod.uid, uid);
    // Paths with odd bytes in /proc/<pid>/cgroup do not confuse the
    // GPU PID -> job mapping.
    use super::gpu::job_from_proc_cgroup;
    assert_eq!(
        job_from_proc_cgroup("0::/system.slice/slurmstepd.scope/job_ü/step_0\n"),
        None
    );
    assert_eq!(
        job_from_proc_cgroup("0::/a b/slurmstepd.scope/job_12/step_0 x\n").as_deref(),
        Some("12")
    );
    assert_eq!(job_from_proc_cgroup(&"/".repeat(100_000)), None);
}
