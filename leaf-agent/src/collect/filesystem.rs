//! Filesystem usage: the mounts of `/proc/self/mountinfo`, each real
//! filesystem asked with `statvfs(2)` on a worker thread with a timeout
//! ([`super::fs_worker`]), so a hung NFS or Lustre mount never blocks the
//! tick: it is marked stale (`canopy_node_filesystem_device_error` 1) and
//! not asked again until its hung call returns.
//!
//! `mountinfo` format (proc(5), `fs/proc_namespace.c` `show_mountinfo`):
//! `<id> <parent> <maj:min> <root> <mount point> <options> [optional
//! fields...] - <fstype> <source> <super options>`; the root, mount point,
//! type and source escape space, tab, newline and backslash as `\ooo`
//! octal (`mangle_path`). The `procfs` crate's `MountInfo` does not undo
//! these escapes (eminence/procfs#262, open), so a mount point with a space
//! would be misnamed: hence this small parser.
//!
//! Pseudo filesystems are skipped by type and mount point, with
//! node_exporter's defaults (`collector/filesystem_linux.go`); both lists
//! are configurable. A mount point mounted over keeps its last mount.
//!
//! Metrics (gauges, labels `mountpoint`, `fstype`, `device`):
//! `canopy_node_filesystem_{size,free,avail}_bytes`,
//! `canopy_node_filesystem_files`, `canopy_node_filesystem_files_free`,
//! `canopy_node_filesystem_readonly`, `canopy_node_filesystem_device_error`
//! (1 when `statvfs` failed or hangs; the sizes are then absent). Failures
//! count in `canopy_leaf_collector_errors_total{collector="filesystem",kind}`
//! and log once per mount when it starts failing.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::emit::EveryFew;
use super::fs_worker::{FsStat, StatFn, StatOutcome, StatPool};
use super::hot_file::HotFile;
use super::mount_watch::MountWatch;
use super::{Collector, Emit, Observation, Sink};
use crate::error::LeafError;

/// One line of `mountinfo`, unescaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Mount point (field 5).
    pub mountpoint: String,
    /// Filesystem type, `type[.subtype]` (first field after `-`).
    pub fstype: String,
    /// Mount source, e.g. `/dev/sda1`, `server:/export` (second after `-`).
    pub source: String,
    /// Mounted read-only (`ro` in the per-mount options, field 6).
    pub read_only: bool,
}

/// Undoes the kernel's `\ooo` octal escapes (`mangle_path`). A backslash
/// not followed by three octal digits is kept as it is.
pub fn unescape_octal(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = |c: u8| (b'0'..=b'7').contains(&c);
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..=i + 3].iter().all(|c| oct(*c)) {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            out.push(u8::try_from(v).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Filesystem types whose `statvfs` answers from memory and cannot hang on
/// a server: asked on the sampler's thread, without the worker thread's two
/// wake-ups per mount and tick. Everything else (NFS, Lustre, GPFS, CIFS,
/// FUSE, Ceph, unknown types) goes through the worker with its timeout.
pub fn is_local_fstype(fstype: &str) -> bool {
    matches!(
        fstype,
        "ext2" | "ext3" | "ext4" | "xfs" | "btrfs" | "tmpfs" | "ramfs" | "vfat" | "exfat" | "f2fs"
    )
}

/// Parses `mountinfo`; see the module docs for the format.
pub fn parse_mountinfo(text: &str) -> Result<Vec<Mount>, LeafError> {
    const FORMAT: &str = "mountinfo";
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(' ').collect();
        let bad = |why: &str| LeafError::parse(FORMAT, i + 1, why.to_string());
        if f.len() < 10 {
            return Err(bad("fewer than 10 fields"));
        }
        // Optional fields (shared:N, master:N...) run until a lone `-`.
        let sep = f[6..]
            .iter()
            .position(|x| *x == "-")
            .map(|p| p + 6)
            .ok_or_else(|| bad("no `-` separator"))?;
        if f.len() < sep + 3 {
            return Err(bad("no filesystem type or source after `-`"));
        }
        out.push(Mount {
            mountpoint: unescape_octal(f[4]),
            fstype: unescape_octal(f[sep + 1]),
            source: unescape_octal(f[sep + 2]),
            read_only: f[5].split(',').any(|o| o == "ro"),
        });
    }
    Ok(out)
}

/// node_exporter's default excluded filesystem types.
pub const DEFAULT_EXCLUDED_FSTYPES: &[&str] = &[
    "autofs",
    "binfmt_misc",
    "bpf",
    "cgroup",
    "cgroup2",
    "configfs",
    "debugfs",
    "devpts",
    "devtmpfs",
    "fusectl",
    "hugetlbfs",
    "iso9660",
    "mqueue",
    "nsfs",
    "overlay",
    "proc",
    "procfs",
    "pstore",
    "rpc_pipefs",
    "securityfs",
    "selinuxfs",
    "squashfs",
    "erofs",
    "sysfs",
    "tracefs",
];

/// node_exporter's default excluded mount points: these and everything
/// below them.
pub const DEFAULT_EXCLUDED_MOUNTPOINTS: &[&str] = &[
    "/dev",
    "/proc",
    "/sys",
    "/run/credentials",
    "/var/lib/docker",
    "/var/lib/containers/storage",
];

/// Which mounts are reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsFilter {
    /// Filesystem types never reported (exact names; add `tmpfs` to leave
    /// out `/run`, `/tmp` on tmpfs and the like).
    pub exclude_fstypes: Vec<String>,
    /// Mount points never reported, with everything below them.
    pub exclude_mountpoints: Vec<String>,
}

impl Default for FsFilter {
    fn default() -> Self {
        FsFilter {
            exclude_fstypes: DEFAULT_EXCLUDED_FSTYPES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            exclude_mountpoints: DEFAULT_EXCLUDED_MOUNTPOINTS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

impl FsFilter {
    /// Whether `m` is reported.
    pub fn keeps(&self, m: &Mount) -> bool {
        let under = |p: &String| {
            m.mountpoint == *p
                || m.mountpoint
                    .strip_prefix(p.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        };
        !self.exclude_fstypes.contains(&m.fstype) && !self.exclude_mountpoints.iter().any(under)
    }

    /// The mounts to report, one per mount point (the last mounted wins,
    /// since it hides the ones below), in mount point order.
    pub fn select(&self, mounts: Vec<Mount>) -> Vec<Mount> {
        let mut by_point: BTreeMap<String, Mount> = BTreeMap::new();
        for m in mounts {
            by_point.insert(m.mountpoint.clone(), m);
        }
        by_point.into_values().filter(|m| self.keeps(m)).collect()
    }
}

/// Appends the gauges of one mount: its sizes when `stat` is known, and
/// its error flag.
pub fn observations(node: &str, m: &Mount, stat: Option<&FsStat>, out: &mut impl Emit) {
    let l = [
        ("mountpoint", m.mountpoint.as_str()),
        ("fstype", m.fstype.as_str()),
        ("device", m.source.as_str()),
    ];
    if let Some(s) = stat {
        let g = [
            ("canopy_node_filesystem_size_bytes", s.size_bytes),
            ("canopy_node_filesystem_free_bytes", s.free_bytes),
            ("canopy_node_filesystem_avail_bytes", s.avail_bytes),
            ("canopy_node_filesystem_files", s.files),
            ("canopy_node_filesystem_files_free", s.files_free),
        ];
        for (name, v) in g {
            out.gauge(name, node, &l, v as f64);
        }
    }
    out.gauge(
        "canopy_node_filesystem_readonly",
        node,
        &l,
        if m.read_only { 1.0 } else { 0.0 },
    );
    out.gauge(
        "canopy_node_filesystem_device_error",
        node,
        &l,
        if stat.is_some() { 0.0 } else { 1.0 },
    );
}

/// Settings of [`FilesystemCollector`].
#[derive(Clone, Debug)]
pub struct FilesystemOptions {
    /// Which mounts are reported.
    pub filter: FsFilter,
    /// How long one `statvfs` may take before its mount is marked stale.
    pub timeout: Duration,
    /// Hung calls tolerated at once; past this, no new call is made.
    pub max_hung: usize,
    /// Where the host's `/` is seen (`/` normally; `/host` in a container
    /// with the host's root mounted there).
    pub rootfs: PathBuf,
    /// The mounts are read and asked once every this many ticks (at least
    /// 1); the ticks between repeat the last values by key, with no
    /// syscall. Filesystem usage moves slowly, and the `statvfs` calls and
    /// the mount-table poll were ~3 % of a 1 s leaf's CPU (issue 3).
    /// Only the sampler's keyed path ([`Collector::collect_into`]) skips
    /// ticks; [`Collector::collect`] always reads.
    pub every_ticks: u32,
}

/// Default of [`FilesystemOptions::every_ticks`]: 10 ticks (10 s at the
/// default 1 s tick; node_exporter is commonly scraped every 15-60 s).
pub const DEFAULT_FS_EVERY_TICKS: u32 = 10;

impl Default for FilesystemOptions {
    fn default() -> Self {
        FilesystemOptions {
            filter: FsFilter::default(),
            timeout: Duration::from_millis(500),
            max_hung: 16,
            rootfs: PathBuf::from("/"),
            every_ticks: DEFAULT_FS_EVERY_TICKS,
        }
    }
}

/// Reads `<proc_root>/self/mountinfo` and stats each kept mount each tick.
#[derive(Debug)]
pub struct FilesystemCollector {
    node: String,
    mountinfo: HotFile,
    /// Local filesystems are asked on the sampler's thread (see
    /// [`is_local_fstype`]); off when a test injects its stat function.
    inline_local: bool,
    /// The last `mountinfo` text and the mounts selected from it.
    last: Option<(String, Vec<Mount>)>,
    /// Says when `mountinfo` may have changed.
    watch: MountWatch,
    opts: FilesystemOptions,
    pool: StatPool,
    /// Mount points currently failing (logged once when they start).
    failing: HashSet<String>,
    errors: BTreeMap<&'static str, u64>,
    /// The last read's series, repeated by key until the next read (see
    /// [`FilesystemOptions::every_ticks`]).
    few: EveryFew,
}

impl FilesystemCollector {
    /// A collector for `node` using the real `statvfs`.
    pub fn new(node: &str, proc_root: &Path, opts: FilesystemOptions) -> Self {
        let mut c = Self::with_stat(node, proc_root, opts, Arc::new(super::fs_worker::statvfs));
        c.inline_local = true;
        c
    }

    /// A collector with another stat function (tests: a hung mount).
    pub fn with_stat(node: &str, proc_root: &Path, opts: FilesystemOptions, stat: StatFn) -> Self {
        FilesystemCollector {
            node: node.to_string(),
            mountinfo: HotFile::new(proc_root.join("self").join("mountinfo")),
            watch: MountWatch::new(proc_root.join("self").join("mountinfo")),
            inline_local: false,
            last: None,
            pool: StatPool::new(stat, opts.timeout, opts.max_hung),
            opts,
            failing: HashSet::new(),
            errors: BTreeMap::new(),
            few: EveryFew::new(),
        }
    }

    /// Mount points whose `statvfs` is still hung.
    pub fn stale_paths(&self) -> Vec<PathBuf> {
        self.pool.stale_paths()
    }

    fn fail(&mut self, m: &Mount, kind: &'static str, why: &dyn std::fmt::Display) {
        *self.errors.entry(kind).or_default() += 1;
        if self.failing.insert(m.mountpoint.clone()) {
            tracing::warn!(
                mountpoint = %m.mountpoint,
                fstype = %m.fstype,
                reason = %why,
                "filesystem: statvfs failed; reporting device_error=1 until it answers again"
            );
        }
    }

    fn path_of(&self, mountpoint: &str) -> PathBuf {
        self.opts
            .rootfs
            .join(mountpoint.strip_prefix('/').unwrap_or(mountpoint))
    }
}

impl Collector for FilesystemCollector {
    fn name(&self) -> &'static str {
        "filesystem"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        self.report(out)
    }

    /// By key, with the label sets kept from the previous tick; the
    /// mounts are read every [`FilesystemOptions::every_ticks`] ticks, the
    /// last values repeated in between.
    fn collect_into(&mut self, sink: &mut Sink<'_>) -> Result<(), LeafError> {
        let mut few = std::mem::take(&mut self.few);
        let r = few.tick(self.opts.every_ticks, sink, |out| self.report(out));
        self.few = few;
        r
    }
}

impl FilesystemCollector {
    /// One tick's series into `out`.
    fn report(&mut self, out: &mut impl Emit) -> Result<(), LeafError> {
        // The kernel renders the whole table on every read: read it only
        // when it may have changed (see `mount_watch`).
        let read = self.watch.must_read() || self.last.is_none();
        self.watch.tick(read);
        let text = read.then(|| self.mountinfo.read());
        let parsed = match text {
            None => Ok(self.last.as_ref().map(|l| l.1.clone()).unwrap_or_default()),
            // Mounts rarely change: the same text keeps the same selection.
            Some(Ok(t)) if self.last.as_ref().is_some_and(|l| l.0 == t) => {
                Ok(self.last.as_ref().map(|l| l.1.clone()).unwrap_or_default())
            }
            Some(Ok(t)) => parse_mountinfo(t).map(|m| {
                let m = self.opts.filter.select(m);
                self.last = Some((t.to_string(), m.clone()));
                m
            }),
            Some(Err(e)) => Err(e),
        };
        let mounts = match parsed {
            Ok(m) => m,
            Err(e) => {
                self.last = None;
                *self.errors.entry("mountinfo").or_default() += 1;
                self.push_errors(out);
                return Err(e);
            }
        };
        for m in &mounts {
            let path = self.path_of(&m.mountpoint);
            let outcome = if self.inline_local && is_local_fstype(&m.fstype) {
                match super::fs_worker::statvfs(&path) {
                    Ok(s) => StatOutcome::Done(s),
                    Err(e) => StatOutcome::Failed(e),
                }
            } else {
                self.pool.stat(&path)
            };
            let stat = match outcome {
                StatOutcome::Done(s) => {
                    if self.failing.remove(&m.mountpoint) {
                        tracing::info!(mountpoint = %m.mountpoint, "filesystem answers again");
                    }
                    Some(s)
                }
                StatOutcome::Failed(e) => {
                    self.fail(m, "statvfs", &e);
                    None
                }
                StatOutcome::TimedOut => {
                    self.fail(m, "stale", &"statvfs did not answer in time (hung mount?)");
                    None
                }
                StatOutcome::TooManyHung => {
                    self.fail(m, "stale", &"too many hung statvfs calls; not asked");
                    None
                }
                // Counted once when it timed out.
                StatOutcome::Stale => None,
            };
            observations(&self.node, m, stat.as_ref(), out);
        }
        self.failing
            .retain(|p| mounts.iter().any(|m| m.mountpoint == *p));
        self.push_errors(out);
        Ok(())
    }
}

impl FilesystemCollector {
    fn push_errors(&self, out: &mut impl Emit) {
        for (kind, n) in &self.errors {
            out.counter(
                "canopy_leaf_collector_errors_total",
                &self.node,
                &[("collector", "filesystem"), ("kind", kind)],
                *n as f64,
            );
        }
    }
}
