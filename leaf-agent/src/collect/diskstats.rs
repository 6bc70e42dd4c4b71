//! `/proc/diskstats`: per-disk I/O, whole disks only.
//!
//! Metrics (counters, label `device`): `canopy_node_disk_read_bytes_total`,
//! `canopy_node_disk_written_bytes_total`, `canopy_node_disk_reads_completed_total`,
//! `canopy_node_disk_writes_completed_total`, `canopy_node_disk_io_time_seconds_total`.
//! `loop*`, `ram*` and `zram*` devices and partitions are skipped.
//!
//! Where sysfs is mounted, each tick reads the whole disks' own
//! `/sys/class/block/<disk>/stat` files (the same counters, "efficient for
//! monitoring a small, known set of disks", the kernel's
//! Documentation/admin-guide/iostats.rst) instead of `/proc/diskstats`,
//! whose every read walks the kernel's whole block-device class under a
//! lock per device, partitions and loop devices included: that walk was
//! ~4 % of a leaf's CPU samples, over twice the rest of `diskstats`.
//! `/proc/diskstats` still says which disks there are: it is read again
//! every [`RELIST_EVERY_TICKS`] ticks and whenever a disk's `stat` fails
//! (a disk removed), so a disk added shows up within a minute.

use std::path::{Path, PathBuf};

use super::hot_file::HotFile;
use super::{Collector, Emit, Observation, SeriesCache, Sink, field, split_cols};
use crate::error::LeafError;

const FORMAT: &str = "/proc/diskstats";

/// `/proc/diskstats` counts sectors of 512 bytes whatever the device's
/// logical block size (see the kernel's Documentation/admin-guide/iostats.rst).
pub const SECTOR_BYTES: u64 = 512;

/// Counters of one block device from `/proc/diskstats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Device name, e.g. `nvme0n1`, `sda1`.
    pub device: String,
    /// Reads completed.
    pub reads_completed: u64,
    /// Sectors read (of [`SECTOR_BYTES`]).
    pub sectors_read: u64,
    /// Writes completed.
    pub writes_completed: u64,
    /// Sectors written (of [`SECTOR_BYTES`]).
    pub sectors_written: u64,
    /// Milliseconds spent doing I/O (column 10; `None` on very old kernels).
    pub io_time_ms: Option<u64>,
}

/// Parses the text of `/proc/diskstats`: `major minor name` then 11 (kernels
/// before 4.18), 15 or 17 (5.5 and later) counters. Every device is returned.
pub fn parse_diskstats(text: &str) -> Result<Vec<DiskStats>, LeafError> {
    let mut disks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let mut cols = [""; 13];
        let count = split_cols(line, &mut cols);
        if count == 0 {
            continue;
        }
        if count < 10 {
            return Err(LeafError::parse(
                FORMAT,
                n,
                format!("{count} columns, want at least 10"),
            ));
        }
        let col =
            |i: usize, what: &str| field::<u64>(FORMAT, n, what, (i < count).then(|| cols[i]));
        col(0, "major")?;
        col(1, "minor")?;
        disks.push(DiskStats {
            device: cols[2].to_string(),
            reads_completed: col(3, "reads completed")?,
            sectors_read: col(5, "sectors read")?,
            writes_completed: col(7, "writes completed")?,
            sectors_written: col(9, "sectors written")?,
            io_time_ms: (count > 12).then(|| col(12, "io time")).transpose()?,
        });
    }
    Ok(disks)
}

/// True when `name` is a partition of another device in `all`: `sda1` of
/// `sda`, `nvme0n1p1` of `nvme0n1`, `mmcblk0p2` of `mmcblk0`.
pub fn is_partition(name: &str, all: &[&str]) -> bool {
    all.iter().any(|parent| {
        let Some(rest) = name.strip_prefix(parent) else {
            return false;
        };
        let digits = if parent.ends_with(|c: char| c.is_ascii_digit()) {
            match rest.strip_prefix('p') {
                Some(d) => d,
                None => return false,
            }
        } else {
            rest
        };
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

/// True for devices that are not disks: loop devices, ramdisks, zram swap.
pub fn is_virtual(name: &str) -> bool {
    ["loop", "ram", "zram"].iter().any(|p| name.starts_with(p))
}

/// Appends the observations for parsed `/proc/diskstats`, whole disks only.
pub fn observations(node: &str, disks: &[DiskStats], out: &mut impl Emit) {
    let names: Vec<&str> = disks.iter().map(|d| d.device.as_str()).collect();
    for d in disks {
        if is_virtual(&d.device) || is_partition(&d.device, &names) {
            continue;
        }
        emit_disk(node, d, out);
    }
}

/// The series of one whole disk.
fn emit_disk(node: &str, d: &DiskStats, out: &mut impl Emit) {
    let l = [("device", d.device.as_str())];
    let series = [
        (
            "canopy_node_disk_read_bytes_total",
            d.sectors_read.saturating_mul(SECTOR_BYTES),
        ),
        (
            "canopy_node_disk_written_bytes_total",
            d.sectors_written.saturating_mul(SECTOR_BYTES),
        ),
        ("canopy_node_disk_reads_completed_total", d.reads_completed),
        (
            "canopy_node_disk_writes_completed_total",
            d.writes_completed,
        ),
    ];
    for (name, v) in series {
        out.counter(name, node, &l, v as f64);
    }
    if let Some(ms) = d.io_time_ms {
        out.counter(
            "canopy_node_disk_io_time_seconds_total",
            node,
            &l,
            ms as f64 / 1000.0,
        );
    }
}

/// The counters of disk `device` from its sysfs `stat` file: the 11, 15 or
/// 17 counters of a `/proc/diskstats` line without its first three columns.
pub fn parse_block_stat(device: &str, text: &str) -> Result<DiskStats, LeafError> {
    let mut d = DiskStats {
        device: device.to_string(),
        ..DiskStats::default()
    };
    parse_block_stat_into(text, &mut d)?;
    Ok(d)
}

/// [`parse_block_stat`] into `d`, whose device is kept (no allocation).
fn parse_block_stat_into(text: &str, d: &mut DiskStats) -> Result<(), LeafError> {
    const FORMAT: &str = "/sys/class/block/*/stat";
    let mut cols = [""; 10];
    let count = split_cols(text, &mut cols);
    if count < 7 {
        return Err(LeafError::parse(
            FORMAT,
            1,
            format!("{count} columns, want at least 7"),
        ));
    }
    let col = |i: usize, what: &str| field::<u64>(FORMAT, 1, what, (i < count).then(|| cols[i]));
    // All or nothing: `d` keeps its last values on an error.
    let (reads, read, writes, written) = (
        col(0, "reads completed")?,
        col(2, "sectors read")?,
        col(4, "writes completed")?,
        col(6, "sectors written")?,
    );
    d.io_time_ms = (count > 9).then(|| col(9, "io time")).transpose()?;
    d.reads_completed = reads;
    d.sectors_read = read;
    d.writes_completed = writes;
    d.sectors_written = written;
    Ok(())
}

/// Ticks between two reads of `/proc/diskstats` for the list of disks when
/// their sysfs `stat` files are read (a disk added is seen this late at
/// most; one removed at once, its `stat` failing).
pub const RELIST_EVERY_TICKS: u32 = 60;

/// Reads `<proc_root>/diskstats` each tick, or (see
/// [`DiskStatsCollector::with_sysfs`]) the disks' sysfs `stat` files.
#[derive(Debug)]
pub struct DiskStatsCollector {
    node: String,
    file: HotFile,
    /// `<sys_root>/class/block`, when the disks' `stat` files are read.
    sys_block: Option<PathBuf>,
    /// The whole disks of the last listing, with their counters as last
    /// read and their `stat` files; empty when the next tick reads
    /// `/proc/diskstats`.
    disks: Vec<(DiskStats, HotFile)>,
    /// Ticks since `/proc/diskstats` was last read.
    since_list: u32,
    /// Label sets and keys of the last tick's series.
    series: SeriesCache,
}

impl DiskStatsCollector {
    /// A collector for `node` reading `<proc_root>/diskstats` every tick.
    pub fn new(node: &str, proc_root: &Path) -> Self {
        DiskStatsCollector {
            node: node.to_string(),
            file: HotFile::lines(proc_root.join("diskstats")),
            sys_block: None,
            disks: Vec::new(),
            since_list: 0,
            series: SeriesCache::new(),
        }
    }

    /// Reads the whole disks' `<sys_root>/class/block/<disk>/stat` between
    /// listings (see the module documentation); where they cannot be read
    /// (no sysfs), `/proc/diskstats` every tick, as [`DiskStatsCollector::new`].
    pub fn with_sysfs(mut self, sys_root: &Path) -> Self {
        self.sys_block = Some(sys_root.join("class").join("block"));
        self
    }
}

impl Collector for DiskStatsCollector {
    fn name(&self) -> &'static str {
        "proc_diskstats"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        self.report(out)
    }

    /// By key, with the label sets kept from the previous tick.
    fn collect_into(&mut self, sink: &mut Sink<'_>) -> Result<(), LeafError> {
        let mut series = std::mem::take(&mut self.series);
        let r = self.report(&mut series.recorder(sink));
        self.series = series;
        r
    }
}

impl DiskStatsCollector {
    /// One tick's series into `out`.
    fn report(&mut self, out: &mut impl Emit) -> Result<(), LeafError> {
        self.since_list = self.since_list.saturating_add(1);
        if !self.disks.is_empty() && self.since_list < RELIST_EVERY_TICKS && self.read_sysfs() {
            // Whole, non-virtual disks only (the listing kept those).
            for (d, _) in &self.disks {
                emit_disk(&self.node, d, out);
            }
            return Ok(());
        }
        let disks = parse_diskstats(self.file.read()?)?;
        observations(&self.node, &disks, out);
        self.list(&disks);
        Ok(())
    }

    /// Every listed disk's counters from its `stat`; false (and the list
    /// dropped) when one failed: the tick then reads `/proc/diskstats`.
    fn read_sysfs(&mut self) -> bool {
        for (d, file) in &mut self.disks {
            if let Err(e) = file.read().and_then(|t| parse_block_stat_into(t, d)) {
                tracing::debug!(device = %d.device, error = %e, "disk stat unreadable; listing the disks again");
                self.disks.clear();
                return false;
            }
        }
        true
    }

    /// Keeps the whole disks of `all` (just read from `/proc/diskstats`)
    /// for the next ticks' sysfs reads, their files kept open across
    /// listings. A disk whose `stat` cannot be read now leaves the list
    /// empty: `/proc/diskstats` is read every tick until the next listing.
    fn list(&mut self, all: &[DiskStats]) {
        self.since_list = 0;
        let Some(dir) = &self.sys_block else {
            return;
        };
        let names: Vec<&str> = all.iter().map(|d| d.device.as_str()).collect();
        let mut old = std::mem::take(&mut self.disks);
        for d in all {
            if is_virtual(&d.device) || is_partition(&d.device, &names) {
                continue;
            }
            let file = match old.iter().position(|(o, _)| o.device == d.device) {
                Some(i) => old.swap_remove(i).1,
                // sysfs spells a `/` in a device name `!` (`cciss!c0d0`).
                None => HotFile::single(dir.join(d.device.replace('/', "!")).join("stat")),
            };
            self.disks.push((d.clone(), file));
        }
        // One read now: a disk without a readable `stat` (no sysfs) keeps
        // the collector on `/proc/diskstats`.
        if !self.read_sysfs() {
            tracing::debug!("disk stat files unreadable; reading /proc/diskstats every tick");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(rel)
    }

    fn tick(c: &mut DiskStatsCollector) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        c.collect(&mut out).expect("disk stats");
        out.iter()
            .map(|o| {
                let dev = o.labels.get("device").unwrap_or_default();
                (format!("{}{{{dev}}}", o.labels.name()), o.value)
            })
            .collect()
    }

    /// `proc/diskstats` and `sys/class/block` of the fixtures in a scratch
    /// directory, for the test to edit.
    fn scratch(name: &str) -> (PathBuf, PathBuf, PathBuf) {
        let root = std::env::temp_dir().join(format!("canopy-disk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (proc_root, sys_root) = (root.join("proc"), root.join("sys"));
        std::fs::create_dir_all(&proc_root).expect("proc dir");
        std::fs::create_dir_all(sys_root.join("class/block/vda")).expect("sys dir");
        std::fs::copy(data("proc/diskstats"), proc_root.join("diskstats")).expect("diskstats");
        std::fs::copy(
            data("sys/class/block/vda/stat"),
            sys_root.join("class/block/vda/stat"),
        )
        .expect("stat");
        (root, proc_root, sys_root)
    }

    #[test]
    fn block_stat_is_a_diskstats_line_without_its_name() {
        let all =
            parse_diskstats(&std::fs::read_to_string(data("proc/diskstats")).expect("fixture"))
                .expect("diskstats");
        let vda = all.iter().find(|d| d.device == "vda").expect("vda");
        let sys = std::fs::read_to_string(data("sys/class/block/vda/stat")).expect("fixture");
        assert_eq!(&parse_block_stat("vda", &sys).expect("stat"), vda);
        // 11 counters (kernels before 4.18) still carry the I/O time.
        let old = parse_block_stat(
            "sda",
            "2048 10 409600 3000 1024 5 204800 1500 0 4000 4500\n",
        )
        .expect("11 counters");
        assert_eq!((old.sectors_written, old.io_time_ms), (204_800, Some(4000)));
        assert!(parse_block_stat("sda", "1 2 3 4 5 6").is_err());
        assert!(parse_block_stat("sda", "1 2 x 4 5 6 7 8 9 10 11").is_err());
        assert!(parse_block_stat("sda", "").is_err());
    }

    #[test]
    fn sysfs_reports_what_diskstats_does() {
        let mut plain = DiskStatsCollector::new("n1", &data("proc"));
        let mut sys = DiskStatsCollector::new("n1", &data("proc")).with_sysfs(&data("sys"));
        for _ in 0..3 {
            let want = tick(&mut plain);
            assert_eq!(want.len(), 5, "vda's five series");
            assert_eq!(tick(&mut sys), want);
        }
    }

    #[test]
    fn ticks_between_listings_read_the_disks_stat_files() {
        let (root, proc_root, sys_root) = scratch("switch");
        let stat = sys_root.join("class/block/vda/stat");
        let read = |c: &mut DiskStatsCollector| {
            tick(c)
                .into_iter()
                .find(|(n, _)| n == "canopy_node_disk_reads_completed_total{vda}")
                .map(|(_, v)| v)
        };
        let mut c = DiskStatsCollector::new("n1", &proc_root).with_sysfs(&sys_root);
        assert_eq!(read(&mut c), Some(17838.0), "the listing tick");
        // The next ticks read sysfs (here made to differ from diskstats).
        std::fs::write(&stat, "17900 0 2714300 0 3650 0 3971400 0 0 4710 0\n").expect("stat");
        assert_eq!(read(&mut c), Some(17900.0));
        // Its `stat` unusable (a removed disk's fails to read; a kept
        // descriptor of a plain file reads on, so here it turns empty):
        // that tick lists again, from diskstats.
        std::fs::write(&stat, "").expect("stat");
        assert_eq!(read(&mut c), Some(17838.0));
        // Without sysfs every tick reads diskstats, which moves.
        let text = std::fs::read_to_string(proc_root.join("diskstats")).expect("diskstats");
        std::fs::write(
            proc_root.join("diskstats"),
            text.replace(" vda 17838 ", " vda 17839 "),
        )
        .expect("diskstats");
        assert_eq!(read(&mut c), Some(17839.0));
        // Back in sysfs: used again once listed (a listing after at most
        // `RELIST_EVERY_TICKS` ticks, then the sysfs reads).
        std::fs::write(&stat, "17950 0 2714300 0 3650 0 3971400 0 0 4710 0\n").expect("stat");
        let mut seen = Vec::new();
        for _ in 0..=RELIST_EVERY_TICKS + 1 {
            seen.push(read(&mut c));
        }
        assert_eq!(seen.last(), Some(&Some(17950.0)), "{seen:?}");
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn a_disk_added_shows_up_at_the_next_listing() {
        let (root, proc_root, sys_root) = scratch("added");
        let mut c = DiskStatsCollector::new("n1", &proc_root).with_sysfs(&sys_root);
        let devices = |c: &mut DiskStatsCollector| {
            let mut d: Vec<String> = tick(c)
                .into_iter()
                .filter_map(|(n, _)| {
                    n.strip_prefix("canopy_node_disk_reads_completed_total{")
                        .map(|d| d.trim_end_matches('}').to_string())
                })
                .collect();
            d.sort();
            d
        };
        assert_eq!(devices(&mut c), ["vda"]);
        let mut text = std::fs::read_to_string(proc_root.join("diskstats")).expect("diskstats");
        text.push_str(" 259       0 nvme0n1 1 0 8 0 2 0 16 0 0 3 0\n");
        std::fs::write(proc_root.join("diskstats"), text).expect("diskstats");
        std::fs::create_dir_all(sys_root.join("class/block/nvme0n1")).expect("dir");
        std::fs::write(
            sys_root.join("class/block/nvme0n1/stat"),
            "1 0 8 0 2 0 16 0 0 3 0\n",
        )
        .expect("stat");
        let mut ticks = 1;
        while devices(&mut c) != ["nvme0n1", "vda"] {
            ticks += 1;
            assert!(
                ticks <= RELIST_EVERY_TICKS,
                "not listed after {ticks} ticks"
            );
        }
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn on_this_host_sysfs_gives_the_disks_and_counters_of_diskstats() {
        let (proc_root, sys_root) = (Path::new("/proc"), Path::new("/sys"));
        if !proc_root.join("diskstats").exists() || !sys_root.join("class/block").is_dir() {
            return;
        }
        let mut plain = DiskStatsCollector::new("n1", proc_root);
        let mut sys = DiskStatsCollector::new("n1", proc_root).with_sysfs(sys_root);
        tick(&mut sys); // the listing tick
        let before = tick(&mut plain);
        let after = tick(&mut sys); // from sysfs
        assert!(!sys.disks.is_empty(), "this host's disks read from sysfs");
        let names = |v: &[(String, f64)]| v.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
        assert_eq!(names(&after), names(&before));
        for ((n, b), (_, a)) in before.iter().zip(&after) {
            assert!(a >= b, "{n}: {a} after {b}");
        }
    }
}
