//! Jobs without cgroups (`proctrack/linuxproc`): every process under `/proc`
//! is mapped to a job through its slurmstepd ancestor
//! ([`crate::attrib::linuxproc`]); a job's CPU time is `utime + stime +
//! cutime + cstime` of its processes and its I/O their `/proc/<pid>/io`,
//! both carried monotonically by the caller.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;

use super::proc_io::{IoCounters, ProcIdentity, parse_proc_io};
use crate::attrib::CpuTicks;
use crate::attrib::linuxproc::{ProcNode, assign_jobs, parse_slurmstepd_cmdline};
use crate::error::LeafError;

const FORMAT: &str = "/proc/<pid>/stat";

/// The `/proc/<pid>/stat` fields linuxproc attribution needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatLine {
    /// Field 2, the command name without parentheses.
    pub comm: String,
    /// Parent and start time.
    pub id: ProcIdentity,
    /// Fields 14-17: `utime + stime + cutime + cstime`, clock ticks.
    pub cpu_ticks: u64,
}

/// Parses a whole `/proc/<pid>/stat` line.
pub fn parse_stat_line(text: &str) -> Result<StatLine, LeafError> {
    let open = text
        .find('(')
        .ok_or_else(|| LeafError::parse(FORMAT, 1, "no '('"))?;
    let close = text
        .rfind(')')
        .filter(|c| *c > open)
        .ok_or_else(|| LeafError::parse(FORMAT, 1, "no ')'"))?;
    let comm = text[open + 1..close].to_string();
    let f: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // f[0] is field 3 (state): field n is f[n - 3].
    let num = |n: usize, what: &str| -> Result<u64, LeafError> {
        super::field(FORMAT, 1, what, f.get(n - 3).copied())
    };
    let cpu = [
        num(14, "utime")?,
        num(15, "stime")?,
        num(16, "cutime")?,
        num(17, "cstime")?,
    ];
    Ok(StatLine {
        comm,
        id: ProcIdentity {
            ppid: u32::try_from(num(4, "ppid")?)
                .map_err(|_| LeafError::parse(FORMAT, 1, "ppid"))?,
            start_ticks: num(22, "starttime")?,
        },
        cpu_ticks: cpu.iter().fold(0u64, |a, b| a.saturating_add(*b)),
    })
}

/// One job's processes as read at one tick.
pub type JobProcs = Vec<(u32, ProcIdentity, CpuTicks, IoCounters)>;

/// What one scan of `/proc` found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Job id -> its processes (slurmstepd included).
    pub jobs: BTreeMap<u64, JobProcs>,
    /// Whether any slurmstepd runs at all.
    pub saw_stepd: bool,
    /// Files that could not be read or parsed.
    pub errors: Vec<LeafError>,
    /// `stat` files read.
    pub stat_reads: u64,
    /// Processes taken from the memo without reading (see [`ProcMemo`]).
    pub reused: u64,
}

fn read_opt(p: &Path) -> Result<Option<Vec<u8>>, LeafError> {
    match std::fs::read(p) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(3) => Ok(None),
        Err(e) => Err(LeafError::io(p, e)),
    }
}

/// Reads and parses one of a process's files; a vanished process is
/// `None`, other failures are recorded in `s`.
fn read_parsed<T>(p: &Path, s: &mut Scan, parse: fn(&str) -> Result<T, LeafError>) -> Option<T> {
    match read_opt(p).and_then(|b| b.map(|b| parse(&String::from_utf8_lossy(&b))).transpose()) {
        Ok(v) => v,
        Err(e) => {
            s.errors.push(e);
            None
        }
    }
}

/// Reads and parses a process's `stat` (see [`read_parsed`]), counted.
fn read_stat(p: &Path, s: &mut Scan) -> Option<StatLine> {
    s.stat_reads += 1;
    read_parsed(p, s, parse_stat_line)
}

/// Scans after which one reads every process again, whatever the memo
/// says (a bound on any way a process could change unseen).
const FULL_SCAN_EVERY: u32 = 60;

/// What a scan learnt of one process, kept for the next.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// The inode of its `/proc/<pid>` directory when it was read.
    ino: u64,
    ppid: u32,
    /// `Some(job)` for a slurmstepd.
    stepd_job: Option<u64>,
    /// Read again at every scan: a slurmstepd, a process whose command is
    /// `slurmd` (slurmd forks, then the child execs slurmstepd: until then
    /// it is a `slurmd`), or one that was in a job.
    volatile: bool,
}

/// What `/proc` looked like at the last scan, so the next one re-reads only
/// processes that may have changed in a way attribution sees.
///
/// procfs gives each `/proc/<pid>` directory an inode from a counter that
/// only grows (`get_next_ino`), bound to the task's `struct pid`: a PID
/// reused by a new process gets a new inode, and the listing's `d_ino`
/// tells the two apart at no cost (an inode dropped from the cache under
/// memory pressure only makes a process read again). A process listed with
/// the inode it had at the last scan, outside any job, neither `slurmd`
/// nor slurmstepd, and whose parent is also the same process as then,
/// keeps its parent (a parent changes only when it exits) and its place
/// outside jobs (only a `slurmd`'s fresh child execs slurmstepd), so its
/// `stat` is not read again. On a node without jobs a scan then reads only
/// the processes started since the last (reading every one was ~12 % of a
/// leaf's CPU with 75 processes). Every [`FULL_SCAN_EVERY`] scans, one
/// reads everything.
///
/// When the newest PID (`/proc/sys/kernel/ns_last_pid`) has not moved since
/// the last scan, no process was started, and when none remembered is
/// `slurmd`, slurmstepd or in a job, nothing attribution sees can have
/// changed: the scan does not even list `/proc`.
#[derive(Debug, Default)]
pub struct ProcMemo {
    seen: HashMap<u32, Seen>,
    since_full: u32,
    /// `ns_last_pid` when the last scan began.
    last_pid: Option<u32>,
}

impl ProcMemo {
    /// Processes remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// Lists `proc_root`'s processes with their directories' inodes (at most
/// `max_procs`).
fn list(proc_root: &Path, max_procs: usize) -> Result<Vec<(u32, u64)>, LeafError> {
    use std::os::unix::fs::DirEntryExt;
    let rd = std::fs::read_dir(proc_root).map_err(|e| LeafError::io(proc_root, e))?;
    Ok(rd
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((pid, e.ino()))
        })
        .take(max_procs)
        .collect())
}

/// Scans `proc_root` (at most `max_procs` processes), reading again only
/// what may have changed since the scan `memo` remembers (see
/// [`ProcMemo`]), and updates `memo`.
pub fn scan_memo(proc_root: &Path, max_procs: usize, memo: &mut ProcMemo) -> Scan {
    // Read before listing: a process started during the listing moves it.
    let last_pid = std::fs::read_to_string(proc_root.join("sys/kernel/ns_last_pid"))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok());
    let quiet = last_pid.is_some()
        && last_pid == memo.last_pid
        && !memo.seen.is_empty()
        && memo.since_full < FULL_SCAN_EVERY
        && memo.seen.values().all(|s| !s.volatile);
    memo.last_pid = last_pid;
    if quiet {
        memo.since_full += 1;
        return Scan {
            reused: memo.seen.len() as u64,
            ..Scan::default()
        };
    }
    match list(proc_root, max_procs) {
        Ok(listing) => scan_listed(proc_root, &listing, memo),
        Err(e) => {
            *memo = ProcMemo::default();
            Scan {
                errors: vec![e],
                ..Scan::default()
            }
        }
    }
}

/// [`scan_memo`] over a listing of `(pid, inode)` already made.
fn scan_listed(proc_root: &Path, listing: &[(u32, u64)], memo: &mut ProcMemo) -> Scan {
    let mut s = Scan::default();
    if memo.since_full >= FULL_SCAN_EVERY {
        memo.seen.clear();
    }
    memo.since_full = if memo.seen.is_empty() {
        0
    } else {
        memo.since_full + 1
    };
    let inos: HashMap<u32, u64> = listing.iter().copied().collect();
    // The same process as at the last scan.
    let same = |pid: u32| {
        memo.seen
            .get(&pid)
            .is_some_and(|o| inos.get(&pid) == Some(&o.ino))
    };
    let mut nodes = Vec::with_capacity(listing.len());
    let mut stats = BTreeMap::new();
    let mut seen = HashMap::with_capacity(listing.len());
    for &(pid, ino) in listing {
        // What the last scan saw of this same process (same inode).
        let old = memo.seen.get(&pid).filter(|o| o.ino == ino).copied();
        if let Some(old) = old
            && !old.volatile
            && (old.ppid == 0 || same(old.ppid))
        {
            nodes.push(ProcNode {
                pid,
                ppid: old.ppid,
                stepd_job: None,
            });
            seen.insert(pid, old);
            s.reused += 1;
            continue;
        }
        let dir = proc_root.join(pid.to_string());
        let Some(st) = read_stat(&dir.join("stat"), &mut s) else {
            continue;
        };
        let mut stepd_job = None;
        if st.comm == "slurmstepd" {
            s.saw_stepd = true;
            // A slurmstepd's job does not change while it runs.
            stepd_job =
                old.and_then(|o| o.stepd_job)
                    .or_else(|| match read_opt(&dir.join("cmdline")) {
                        Ok(Some(cmd)) => parse_slurmstepd_cmdline(&cmd).map(|(j, _)| j),
                        _ => None,
                    });
        }
        seen.insert(
            pid,
            Seen {
                ino,
                ppid: st.id.ppid,
                stepd_job,
                volatile: st.comm == "slurmstepd" || st.comm == "slurmd",
            },
        );
        nodes.push(ProcNode {
            pid,
            ppid: st.id.ppid,
            stepd_job,
        });
        stats.insert(pid, st);
    }
    memo.seen = seen;
    if !s.saw_stepd {
        return s;
    }
    let assigned = assign_jobs(&nodes);
    for pid in assigned.keys() {
        if let Some(m) = memo.seen.get_mut(pid) {
            m.volatile = true;
        }
    }
    for (pid, job) in assigned {
        let st = match stats.entry(pid) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            // Not read this scan (a process cannot join a job unread; if
            // one did, read it so its CPU counts).
            std::collections::btree_map::Entry::Vacant(e) => {
                let Some(st) = read_stat(&proc_root.join(pid.to_string()).join("stat"), &mut s)
                else {
                    continue;
                };
                e.insert(st)
            }
        };
        let p = proc_root.join(pid.to_string()).join("io");
        let Some(io) = read_parsed(&p, &mut s, parse_proc_io) else {
            continue;
        };
        s.jobs
            .entry(job)
            .or_default()
            .push((pid, st.id, CpuTicks(st.cpu_ticks), io));
    }
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use proptest::prelude::*;

    use super::{ProcMemo, Scan, list, scan_listed, scan_memo};

    /// procfs keeps a process's directory inode from listing to listing.
    #[test]
    fn a_live_process_keeps_its_proc_inode() {
        let me = std::process::id();
        let ino = |l: Vec<(u32, u64)>| l.into_iter().find(|(p, _)| *p == me).map(|(_, i)| i);
        let a = ino(list(Path::new("/proc"), usize::MAX).expect("lists /proc"));
        let b = ino(list(Path::new("/proc"), usize::MAX).expect("lists /proc"));
        assert!(a.is_some_and(|i| i > 0));
        assert_eq!(a, b);
    }

    /// Reads everything, as a scan without a memo does.
    fn scan(root: &Path, listing: &[(u32, u64)]) -> Scan {
        scan_listed(root, listing, &mut ProcMemo::default())
    }

    /// A process of the model kernel.
    #[derive(Clone, Debug)]
    struct P {
        comm: String,
        ppid: u32,
        ticks: u64,
        write: u64,
        cmdline: String,
        /// Forked by a `slurmd` and not exec'd since: may exec slurmstepd.
        slurmd_child: bool,
        /// Its `/proc/<pid>` inode: new for every process.
        ino: u64,
    }

    /// A model of the kernel's process table and PID allocator, written out
    /// as a `/proc` directory.
    struct Kernel {
        procs: BTreeMap<u32, P>,
        last: u32,
        pid_max: u32,
        starts: u64,
    }

    const LOW: u32 = 4;

    impl Kernel {
        fn new(pid_max: u32) -> Self {
            let mut procs = BTreeMap::new();
            let p = |comm: &str, ppid| P {
                comm: comm.into(),
                ppid,
                ticks: 1,
                write: 0,
                cmdline: comm.into(),
                slurmd_child: false,
                ino: u64::from(ppid) + 100,
            };
            procs.insert(1, p("init", 0));
            procs.insert(2, p("slurmd", 1));
            procs.insert(3, p("sshd", 2));
            procs.get_mut(&3).expect("sshd").ppid = 1;
            Kernel {
                procs,
                last: 3,
                pid_max,
                starts: 0,
            }
        }

        /// The next free PID after `last`, wrapping to [`LOW`].
        fn alloc(&mut self) -> Option<u32> {
            let mut pid = self.last;
            for _ in 0..self.pid_max {
                pid = if pid + 1 > self.pid_max { LOW } else { pid + 1 };
                if !self.procs.contains_key(&pid) {
                    self.last = pid;
                    return Some(pid);
                }
            }
            None
        }

        fn nth(&self, i: usize) -> u32 {
            *self
                .procs
                .keys()
                .nth(i % self.procs.len())
                .expect("init lives")
        }

        fn step(&mut self, ev: &Ev) {
            match *ev {
                Ev::Fork(i) => {
                    let parent = self.nth(i);
                    let mut child = self.procs[&parent].clone();
                    child.ppid = parent;
                    child.ticks = 0;
                    child.write = 0;
                    child.slurmd_child = child.comm == "slurmd";
                    if let Some(pid) = self.alloc() {
                        self.starts += 1;
                        child.ino = 1000 + self.starts;
                        self.procs.insert(pid, child);
                    }
                }
                Ev::Exit(i) => {
                    let pid = self.nth(i);
                    if pid > 3 {
                        self.procs.remove(&pid);
                        for p in self.procs.values_mut() {
                            if p.ppid == pid {
                                p.ppid = 1;
                            }
                        }
                    }
                }
                Ev::Exec(i, to) => {
                    let pid = self.nth(i);
                    let p = self.procs.get_mut(&pid).expect("listed");
                    if pid <= 3 {
                        return;
                    }
                    match to {
                        // Only a slurmd's fresh child execs slurmstepd.
                        0 if p.slurmd_child => {
                            p.comm = "slurmstepd".into();
                            p.cmdline = format!("slurmstepd: [{}.batch]", 100 + pid);
                        }
                        0 => return,
                        1 => p.comm = "slurmd".into(),
                        2 => p.comm = "sh".into(),
                        _ => p.comm = "dd".into(),
                    }
                    p.slurmd_child = false;
                }
                Ev::Work(i, t, w) => {
                    let pid = self.nth(i);
                    let p = self.procs.get_mut(&pid).expect("listed");
                    p.ticks += t;
                    p.write += w;
                }
            }
        }

        /// `/proc`'s listing: PIDs and inodes.
        fn listing(&self) -> Vec<(u32, u64)> {
            self.procs.iter().map(|(pid, p)| (*pid, p.ino)).collect()
        }

        fn write(&self, root: &Path) {
            let _ = std::fs::remove_dir_all(root);
            for (pid, p) in &self.procs {
                let dir = root.join(pid.to_string());
                std::fs::create_dir_all(&dir).expect("mkdir");
                let stat = format!(
                    "{pid} ({}) S {} 0 0 0 0 0 0 0 0 0 {} 0 0 0 20 0 1 0 {} 0 0",
                    p.comm,
                    p.ppid,
                    p.ticks,
                    1000 + pid
                );
                std::fs::write(dir.join("stat"), stat).expect("stat");
                let io = format!(
                    "read_bytes: 0\nwrite_bytes: {}\nsyscr: 0\nsyscw: 1\n",
                    p.write
                );
                std::fs::write(dir.join("io"), io).expect("io");
                std::fs::write(dir.join("cmdline"), format!("{}\0", p.cmdline)).expect("cmdline");
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Ev {
        Fork(usize),
        Exit(usize),
        Exec(usize, u8),
        Work(usize, u64, u64),
    }

    fn ev() -> impl Strategy<Value = Ev> {
        prop_oneof![
            3 => any::<usize>().prop_map(Ev::Fork),
            2 => any::<usize>().prop_map(Ev::Exit),
            3 => (any::<usize>(), 0u8..4).prop_map(|(i, t)| Ev::Exec(i, t)),
            2 => (any::<usize>(), 0u64..50, 0u64..4096).prop_map(|(i, t, w)| Ev::Work(i, t, w)),
        ]
    }

    /// What attribution uses of a scan, in a stable order.
    fn view(s: &Scan) -> (bool, String) {
        let mut jobs = s.jobs.clone();
        for procs in jobs.values_mut() {
            procs.sort_by_key(|p| p.0);
        }
        (s.saw_stepd, format!("{jobs:?}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// A scan that remembers the last one sees the same jobs, processes,
        /// CPU and I/O as one that reads everything, through forks, exits,
        /// execs (slurmd's children becoming slurmstepd), work, and a PID
        /// space that wraps.
        #[test]
        fn memo_scans_see_what_full_scans_see(
            pid_max in 10u32..48,
            rounds in prop::collection::vec(prop::collection::vec(ev(), 0..10), 1..16),
        ) {
            let d = crate::TestDir::new();
            let root = d.path().join("proc");
            let mut k = Kernel::new(pid_max);
            let mut memo = ProcMemo::default();
            let mut reused = 0;
            for evs in &rounds {
                for e in evs {
                    k.step(e);
                }
                k.write(&root);
                let full = scan(&root, &k.listing());
                let inc = scan_listed(&root, &k.listing(), &mut memo);
                prop_assert!(full.errors.is_empty() && inc.errors.is_empty());
                prop_assert_eq!(view(&inc), view(&full));
                prop_assert_eq!(memo.len(), k.procs.len());
                reused += inc.reused;
            }
            // The model's processes outlive a round often enough that a
            // run of several rounds reuses some (the memo is not inert).
            if rounds.len() > 3 && k.procs.len() > 3 {
                prop_assert!(reused > 0, "nothing reused in {} rounds", rounds.len());
            }
        }
    }

    /// Every `FULL_SCAN_EVERY` scans one reads every process again, whatever
    /// the memo says.
    #[test]
    fn a_full_scan_comes_every_sixty_scans() {
        let d = crate::TestDir::new();
        let root = d.path().join("proc");
        let mut k = Kernel::new(1 << 15);
        for i in 0..10 {
            k.step(&Ev::Fork(2 + i % 2)); // children of sshd (pid 3) and its child
        }
        k.write(&root);
        let n = k.procs.len() as u64;
        let slurmd = k.procs.values().filter(|p| p.comm == "slurmd").count() as u64;
        let mut memo = ProcMemo::default();
        // A full scan, then FULL_SCAN_EVERY that use the memo, and again.
        let every = super::FULL_SCAN_EVERY as usize + 1;
        let reads: Vec<u64> = (0..=2 * every)
            .map(|_| scan_listed(&root, &k.listing(), &mut memo).stat_reads)
            .collect();
        let full: Vec<usize> = (0..reads.len()).filter(|&i| reads[i] == n).collect();
        assert_eq!(full, vec![0, every, 2 * every], "{reads:?}");
        assert!(reads.iter().all(|&r| r == n || r == slurmd), "{reads:?}");
    }

    /// With no new PID since the last scan and nothing that could become or
    /// be a job's, a scan reads nothing, not even the listing.
    #[test]
    fn no_new_pid_and_no_slurm_process_skips_the_scan() {
        let d = crate::TestDir::new();
        let root = d.path().join("proc");
        let mut k = Kernel::new(1 << 15);
        k.procs.remove(&2); // no slurmd
        k.step(&Ev::Fork(1)); // sshd -> a child
        k.write(&root);
        let last = root.join("sys/kernel/ns_last_pid");
        std::fs::create_dir_all(root.join("sys/kernel")).expect("mkdir");
        std::fs::write(&last, "500\n").expect("ns_last_pid");
        let mut memo = ProcMemo::default();
        let n = k.procs.len() as u64;
        assert_eq!(scan_memo(&root, 1 << 16, &mut memo).stat_reads, n);
        // Nothing started: nothing read. The listing is not made either: a
        // process directory added behind the kernel's back is not seen.
        std::fs::create_dir_all(root.join("900")).expect("mkdir");
        std::fs::write(
            root.join("900/stat"),
            "900 (slurmstepd) S 1 0 0 0 0 0 0 0 0 0 1 0 0 0 20 0 1 0 9 0 0",
        )
        .expect("stat");
        std::fs::write(root.join("900/cmdline"), "slurmstepd: [7.batch]\0").expect("cmdline");
        std::fs::write(
            root.join("900/io"),
            "read_bytes: 0\nwrite_bytes: 0\nsyscr: 0\nsyscw: 0\n",
        )
        .expect("io");
        let quiet = scan_memo(&root, 1 << 16, &mut memo);
        assert_eq!(
            (quiet.stat_reads, quiet.reused, quiet.saw_stepd),
            (0, n, false)
        );
        // A new PID: listed and read, and the slurmstepd is seen.
        std::fs::write(&last, "900\n").expect("ns_last_pid");
        let s = scan_memo(&root, 1 << 16, &mut memo);
        assert_eq!(s.stat_reads, 1);
        assert!(s.saw_stepd && s.jobs.contains_key(&7));
        // A slurmstepd is remembered: the next scan reads it again even
        // though no PID moved.
        let s = scan_memo(&root, 1 << 16, &mut memo);
        assert!(s.stat_reads >= 1 && s.saw_stepd);
    }

    /// A remembered process whose parent exited and whose parent's PID went
    /// to a job's process is read again, not attributed to that job.
    #[test]
    fn an_orphan_is_not_adopted_by_its_parents_pid() {
        let d = crate::TestDir::new();
        let root = d.path().join("proc");
        let mut k = Kernel::new(1 << 15);
        let pos = |k: &Kernel, pid: u32| k.procs.keys().position(|p| *p == pid).expect("listed");
        k.step(&Ev::Fork(pos(&k, 3))); // sshd -> bash
        let bash = k.last;
        k.step(&Ev::Fork(pos(&k, bash))); // bash -> sleep
        let sleep = k.last;
        k.step(&Ev::Fork(pos(&k, 2))); // slurmd -> its child
        let stepd = k.last;
        k.step(&Ev::Exec(pos(&k, stepd), 0));
        k.write(&root);
        let mut memo = ProcMemo::default();
        let _ = scan_listed(&root, &k.listing(), &mut memo);
        let _ = scan_listed(&root, &k.listing(), &mut memo); // sleep is now reused
        // bash exits (sleep goes to init), and the job's next process gets
        // bash's PID.
        k.step(&Ev::Exit(pos(&k, bash)));
        k.last = bash - 1;
        k.step(&Ev::Fork(pos(&k, stepd)));
        assert_eq!(k.last, bash);
        k.write(&root);
        let s = scan_listed(&root, &k.listing(), &mut memo);
        let job = s.jobs.get(&(100 + u64::from(stepd))).expect("the job");
        assert!(job.iter().any(|p| p.0 == bash), "the job's new process");
        assert!(
            job.iter().all(|p| p.0 != sleep),
            "the orphan is not in the job"
        );
        assert_eq!(view(&s), view(&scan(&root, &k.listing())));
    }

    #[test]
    fn a_quiet_node_rereads_only_new_and_slurmd_processes() {
        let d = crate::TestDir::new();
        let root = d.path().join("proc");
        let mut k = Kernel::new(1 << 15);
        for i in 0..40 {
            k.step(&Ev::Fork(1 + i % 2)); // children of slurmd (pid 2) and sshd (3)
        }
        k.write(&root);
        let mut memo = ProcMemo::default();
        let first = scan_listed(&root, &k.listing(), &mut memo);
        assert_eq!(first.stat_reads, k.procs.len() as u64);
        assert_eq!(first.reused, 0);
        // Nothing started: only the slurmd-named processes are read again.
        let slurmd = k.procs.values().filter(|p| p.comm == "slurmd").count() as u64;
        let again = scan_listed(&root, &k.listing(), &mut memo);
        assert_eq!(again.stat_reads, slurmd);
        assert_eq!(again.reused, k.procs.len() as u64 - slurmd);
        // One new process: read as well.
        k.step(&Ev::Fork(2)); // sshd's
        k.write(&root);
        let third = scan_listed(&root, &k.listing(), &mut memo);
        assert_eq!(third.stat_reads, slurmd + 1);
        // A PID taken by a new process (a new inode) is read again.
        let sshd_child = *k
            .procs
            .iter()
            .find(|(_, p)| p.ppid == 3)
            .expect("a child of sshd")
            .0;
        k.procs.get_mut(&sshd_child).expect("listed").ino += 1 << 20;
        let fourth = scan_listed(&root, &k.listing(), &mut memo);
        assert_eq!(fourth.stat_reads, slurmd + 1);
        // A slurmd child that became slurmstepd is seen at once.
        k.write(&root);
        let _ = scan_listed(&root, &k.listing(), &mut memo);
        let child = *k
            .procs
            .iter()
            .find(|(_, p)| p.slurmd_child)
            .expect("a slurmd child")
            .0;
        let i = k.procs.keys().position(|p| *p == child).expect("listed");
        k.step(&Ev::Exec(i, 0));
        k.write(&root);
        let s = scan_listed(&root, &k.listing(), &mut memo);
        assert!(s.saw_stepd);
        assert!(s.jobs.contains_key(&(100 + u64::from(child))));
    }
}
