//! The I/O and memory outside jobs: cgroup membership on the real formats,
//! the scan's accounting on a model `/proc`, and the live host.

use std::collections::HashMap;
use std::path::Path;

use super::outside_io::{
    FULL_EVERY_SCANS, Membership, OutsideIo, OutsideIoCollector, ProcReader, membership,
};
use super::outside_jobs::{OutsideJobsCollector, outside_memory};
use super::{Collector, Observation};
use crate::error::LeafError;

/// `/proc/<pid>/cgroup` of a task in Slurm 22.05's cgroup v1 job (Debian's
/// `slurm_<NodeName>` root), as read on this machine's Slurm.
const V1_JOB: &str = "12:pids:/slurm_n1/uid_1000/job_42/step_0/task_0
11:memory:/slurm_n1/uid_1000/job_42/step_0/task_0
4:cpu,cpuacct:/slurm_n1/uid_1000/job_42/step_0/task_0
1:name=systemd:/system.slice/slurmd.service
0::/system.slice/slurmd.service
";
/// A login shell on a cgroup v1 host.
const V1_OUTSIDE: &str = "12:pids:/user.slice/user-1000.slice/session-3.scope
11:memory:/user.slice/user-1000.slice/session-3.scope
4:cpu,cpuacct:/user.slice
1:name=systemd:/user.slice/user-1000.slice/session-3.scope
0::/user.slice/user-1000.slice/session-3.scope
";
/// A task of a job under Slurm's cgroup/v2 plugin.
const V2_JOB: &str = "0::/system.slice/slurmstepd.scope/job_7/step_batch/user/task_0\n";
/// slurmstepd itself on cgroup v2 (outside the job's own cgroup).
const V2_STEPD: &str = "0::/system.slice/slurmstepd.scope/system\n";
/// A container of a burstable pod (systemd driver).
const V2_POD: &str = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1c2d3e_4f50_6172_8394_a5b6c7d8e9f0.slice/cri-containerd-abc.scope\n";

#[test]
fn membership_of_real_cgroup_files() {
    assert_eq!(membership(V1_JOB), Membership::Job);
    assert_eq!(membership(V1_OUTSIDE), Membership::Outside);
    assert_eq!(membership(V2_JOB), Membership::Job);
    assert_eq!(membership(V2_STEPD), Membership::Outside);
    assert_eq!(membership(V2_POD), Membership::Job);
    assert_eq!(membership(""), Membership::Outside);
    assert_eq!(membership("garbage"), Membership::Outside);
}

/// One process of the model `/proc`.
#[derive(Clone, Debug)]
struct P {
    comm: &'static str,
    ppid: u32,
    start: u64,
    cgroup: &'static str,
    io: [u64; 4],
}

/// A model `/proc` serving the real file formats, counting reads.
#[derive(Default)]
struct Model {
    procs: HashMap<u32, P>,
    ino: HashMap<u32, u64>,
    next_ino: u64,
    reads: HashMap<&'static str, usize>,
    broken_io: Option<u32>,
    /// The text of the last read (the reader lends it out).
    last: String,
}

impl Model {
    fn spawn(&mut self, pid: u32, p: P) {
        self.next_ino += 1;
        self.ino.insert(pid, self.next_ino);
        self.procs.insert(pid, p);
    }
    fn listing(&self) -> Vec<(u32, u64)> {
        let mut l: Vec<(u32, u64)> = self.procs.keys().map(|p| (*p, self.ino[p])).collect();
        l.sort_unstable();
        l
    }
    fn io_mut(&mut self, pid: u32) -> &mut [u64; 4] {
        &mut self.procs.get_mut(&pid).expect("live").io
    }
    /// `pid` exits and `parent` reaps it: the kernel adds its counters to
    /// the parent's.
    fn reap(&mut self, pid: u32, parent: u32) {
        let gone = self.procs.remove(&pid).expect("live");
        let p = self.io_mut(parent);
        for (a, b) in p.iter_mut().zip(gone.io) {
            *a += b;
        }
    }
    fn count(&mut self, what: &'static str) {
        *self.reads.entry(what).or_default() += 1;
    }
}

impl Model {
    fn lend(&mut self, text: Option<String>) -> Option<&str> {
        self.last = text?;
        Some(&self.last)
    }
}

impl ProcReader for Model {
    fn stat(&mut self, pid: u32) -> Result<Option<&str>, LeafError> {
        self.count("stat");
        let t = self.procs.get(&pid).map(|p| {
            // Fields 3.. of a real line; 4 is ppid, 22 starttime.
            format!(
                "{pid} ({}) S {} {pid} {pid} 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 {} 1000 200 \
                 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0",
                p.comm, p.ppid, p.start
            )
        });
        Ok(self.lend(t))
    }
    fn cgroup(&mut self, pid: u32) -> Result<Option<&str>, LeafError> {
        self.count("cgroup");
        let t = self.procs.get(&pid).map(|p| p.cgroup.to_string());
        Ok(self.lend(t))
    }
    fn io(&mut self, pid: u32) -> Result<Option<&str>, LeafError> {
        self.count("io");
        if self.broken_io == Some(pid) {
            return Err(LeafError::parse("/proc/<pid>/io", 1, "test"));
        }
        let t = self.procs.get(&pid).map(|p| {
            format!(
                "rchar: 0\nwchar: 0\nsyscr: {}\nsyscw: {}\nread_bytes: {}\nwrite_bytes: {}\n\
                 cancelled_write_bytes: 0\n",
                p.io[2], p.io[3], p.io[0], p.io[1]
            )
        });
        Ok(self.lend(t))
    }
}

fn p(comm: &'static str, ppid: u32, cgroup: &'static str, io: [u64; 4]) -> P {
    P {
        comm,
        ppid,
        start: 100,
        cgroup,
        io,
    }
}

fn totals(a: &OutsideIo) -> [u64; 4] {
    let t = a.total();
    [t.read_bytes, t.write_bytes, t.read_ops, t.write_ops]
}

/// A node: init, kthreadd and a kernel thread, a daemon, a job task in a
/// cgroup, and a linuxproc job (slurmstepd and its child, no cgroup).
fn node() -> Model {
    let mut m = Model::default();
    m.spawn(1, p("systemd", 0, V1_OUTSIDE, [100, 10, 1, 1]));
    m.spawn(2, p("kthreadd", 0, "", [7, 7, 7, 7]));
    m.spawn(3, p("kworker/0:0", 2, "", [5, 5, 5, 5]));
    m.spawn(10, p("sshd", 1, V1_OUTSIDE, [1000, 200, 30, 40]));
    m.spawn(20, p("dd", 1, V1_JOB, [1 << 20, 1 << 30, 9, 9]));
    m.spawn(30, p("slurmstepd", 1, V1_OUTSIDE, [50, 50, 5, 5]));
    m.spawn(31, p("a.out", 30, V1_OUTSIDE, [4096, 8192, 2, 2]));
    m
}

#[test]
fn sums_processes_outside_jobs_only() {
    let mut m = node();
    let mut a = OutsideIo::new();
    let (c, errs) = a.scan_with(&m.listing(), &mut m);
    assert!(errs.is_empty(), "{errs:?}");
    // init and sshd: not the kernel threads, the cgroup job's task, the
    // slurmstepd or its child.
    assert_eq!(c.outside, 2);
    assert_eq!(totals(&a), [1100, 210, 31, 41]);
    // Kernel threads: one stat each, no cgroup, no io.
    assert_eq!(c.stat_reads, 7);
    assert_eq!(c.cgroup_reads, 5);
    assert_eq!(c.io_reads, 2);
}

#[test]
fn totals_never_go_down_when_a_process_exits_or_is_reaped() {
    let mut m = node();
    m.spawn(11, p("rsync", 10, V1_OUTSIDE, [0, 0, 0, 0]));
    let mut a = OutsideIo::new();
    a.scan_with(&m.listing(), &mut m);
    let t0 = totals(&a);
    *m.io_mut(11) = [5000, 6000, 50, 60];
    a.scan_with(&m.listing(), &mut m);
    assert_eq!(totals(&a)[0], t0[0] + 5000);
    // rsync exits and sshd reaps it: its counters land in sshd's, which
    // must not count them twice.
    m.reap(11, 10);
    a.scan_with(&m.listing(), &mut m);
    assert_eq!(
        totals(&a),
        [t0[0] + 5000, t0[1] + 6000, t0[2] + 50, t0[3] + 60]
    );
    // sshd itself exits, reaped by init (outside too): no dip, no double.
    m.reap(10, 1);
    a.scan_with(&m.listing(), &mut m);
    assert_eq!(
        totals(&a),
        [t0[0] + 5000, t0[1] + 6000, t0[2] + 50, t0[3] + 60]
    );
    // A process that exits and is never seen reaped: no dip either.
    m.spawn(12, p("cron", 1, V1_OUTSIDE, [0, 0, 0, 0]));
    a.scan_with(&m.listing(), &mut m);
    *m.io_mut(12) = [1, 2, 3, 4];
    a.scan_with(&m.listing(), &mut m);
    let before = totals(&a);
    m.procs.remove(&12);
    a.scan_with(&m.listing(), &mut m);
    assert_eq!(totals(&a), before);
}

#[test]
fn a_fresh_fork_moved_into_a_job_leaves_the_outside_account() {
    let mut m = node();
    let mut a = OutsideIo::new();
    a.scan_with(&m.listing(), &mut m);
    let t0 = totals(&a);
    // slurmd's fresh child, caught before its move into the job's cgroup.
    m.spawn(40, p("slurmd", 1, V1_OUTSIDE, [0, 0, 1, 0]));
    a.scan_with(&m.listing(), &mut m);
    assert_eq!(totals(&a)[2], t0[2] + 1);
    // Moved: its cgroup is read again (not yet settled), and its I/O
    // from then on belongs to the job.
    m.procs.get_mut(&40).expect("live").cgroup = V1_JOB;
    *m.io_mut(40) = [1 << 20, 0, 100, 0];
    let (c, _) = a.scan_with(&m.listing(), &mut m);
    assert!(c.cgroup_reads >= 1);
    assert_eq!(totals(&a)[0], t0[0]);
    assert_eq!(totals(&a)[2], t0[2] + 1);
}

#[test]
fn settled_processes_cost_one_read_a_scan() {
    let mut m = node();
    let mut a = OutsideIo::new();
    a.scan_with(&m.listing(), &mut m);
    a.scan_with(&m.listing(), &mut m);
    // Two scans agreed that init, sshd, slurmstepd and its child are
    // outside every job's cgroup: only the io of init and sshd is read,
    // plus the cgroup of the job's task (a job can never settle as out).
    let (c, _) = a.scan_with(&m.listing(), &mut m);
    assert_eq!((c.stat_reads, c.cgroup_reads, c.io_reads), (0, 1, 2));
    // A reused PID (new inode) is a new process: its stat is read.
    let old = m.procs.remove(&10).expect("live");
    m.spawn(10, P { start: 999, ..old });
    let (c, _) = a.scan_with(&m.listing(), &mut m);
    assert_eq!(c.stat_reads, 1);
    assert_eq!(c.cgroup_reads, 2);
    // Every FULL_EVERY_SCANS scans, every stat again (parents change).
    let mut fulls = 0;
    for _ in 0..FULL_EVERY_SCANS {
        let (c, _) = a.scan_with(&m.listing(), &mut m);
        if c.stat_reads == m.procs.len() {
            fulls += 1;
        }
    }
    assert_eq!(fulls, 1);
}

#[test]
fn an_unreadable_process_is_left_out_and_reported() {
    let mut m = node();
    m.broken_io = Some(10);
    let mut a = OutsideIo::new();
    let (c, errs) = a.scan_with(&m.listing(), &mut m);
    assert_eq!(errs.len(), 1);
    assert_eq!(c.outside, 1);
    assert_eq!(totals(&a), [100, 10, 1, 1]);
}

#[test]
fn the_live_host_counts_this_test_s_reads() {
    // This test process is in no job: reads it makes show in read_ops.
    let mut c = OutsideIoCollector::new("self", Path::new("/proc"), 1);
    let ops = |c: &mut OutsideIoCollector| {
        let mut out = Vec::new();
        c.collect(&mut out).expect("scan /proc");
        out.iter()
            .find(|o| o.labels.name() == "canopy_job_io_read_ops_total")
            .map(|o| (o.value, o.labels.get("job_id").is_none()))
            .expect("the job_id=\"\" read ops series")
    };
    let (before, no_job_id) = ops(&mut c);
    assert!(no_job_id);
    let f = std::fs::File::open("/proc/self/stat").expect("open");
    let mut buf = [0u8; 64];
    for _ in 0..5000 {
        let _ = std::os::unix::fs::FileExt::read_at(&f, &mut buf, 0);
    }
    let (after, _) = ops(&mut c);
    assert!(after >= before + 5000.0, "{before} -> {after}");
}

#[test]
fn memory_outside_jobs_is_used_memory_no_job_is_charged_for() {
    assert_eq!(outside_memory(100.0, 30.0, 50.0), 20.0);
    assert_eq!(outside_memory(100.0, 30.0, 80.0), 0.0);
    assert_eq!(outside_memory(f64::NAN, 30.0, 0.0), 0.0);
    let g = |name: &str, labels: &[(&str, &str)], v: f64| Observation::gauge(name, "n1", labels, v);
    let mut out = vec![
        g("canopy_node_memory_total_bytes", &[], 64e9),
        g("canopy_node_memory_free_bytes", &[], 20e9),
        g("canopy_job_memory_bytes", &[("job_id", "42")], 30e9),
        g("canopy_job_memory_bytes", &[("job_id", "ns/pod")], 4e9),
    ];
    OutsideJobsCollector::new("n1")
        .collect(&mut out)
        .expect("derive");
    let outside: Vec<f64> = out
        .iter()
        .filter(|o| {
            o.labels.name() == "canopy_job_memory_bytes" && o.labels.get("job_id").is_none()
        })
        .map(|o| o.value)
        .collect();
    assert_eq!(outside, vec![10e9]);
}

#[test]
fn memory_outside_jobs_reads_the_shared_reading_when_recorded_by_key() {
    // The agent's meminfo collector records by key: its series are not in
    // the buffer, its reading comes through the share.
    let share = super::meminfo::MemShare::new();
    let mut c = OutsideJobsCollector::new("n1").with_memory(share.clone());
    let job = || {
        vec![Observation::gauge(
            "canopy_job_memory_bytes",
            "n1",
            &[("job_id", "42")],
            3e9,
        )]
    };
    let outside = |out: &[Observation]| -> Vec<f64> {
        out.iter()
            .filter(|o| o.labels.name() == "canopy_job_memory_bytes")
            .filter(|o| o.labels.get("job_id").is_none())
            .map(|o| o.value)
            .collect()
    };
    let mut out = job();
    c.collect(&mut out).expect("derive");
    assert!(outside(&out).is_empty(), "nothing read yet");
    share.set(16_000_000_000, 4_000_000_000);
    let mut out = job();
    c.collect(&mut out).expect("derive");
    assert_eq!(outside(&out), vec![9e9]);
}

#[test]
fn proc_files_list_and_read_a_proc_tree() {
    use super::outside_io::ProcFiles;
    let dir = crate::TestDir::new();
    let p = dir.path().join("42");
    std::fs::create_dir_all(&p).expect("mkdir");
    std::fs::create_dir_all(dir.path().join("self")).expect("mkdir");
    std::fs::write(p.join("io"), "read_bytes: 7\nwrite_bytes: 9\n").expect("write");
    std::fs::write(p.join("cgroup"), b"0::/odd\xff/name\n").expect("write");
    let mut f = ProcFiles::new(dir.path());
    let listing = f.list().expect("list");
    assert_eq!(listing.len(), 1, "{listing:?}");
    assert_eq!(listing[0].0, 42);
    assert_eq!(
        f.io(42).expect("read"),
        Some("read_bytes: 7\nwrite_bytes: 9\n")
    );
    // Not UTF-8: read lossily (membership only looks for job and pod names).
    assert_eq!(f.cgroup(42).expect("read"), Some("0::/odd\u{fffd}/name\n"));
    // A process gone: None, not an error.
    assert_eq!(f.io(43).expect("read"), None);
}
