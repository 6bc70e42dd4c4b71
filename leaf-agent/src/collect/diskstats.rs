//! `/proc/diskstats`: per-disk I/O, whole disks only.
//!
//! Metrics (counters, label `device`): `canopy_node_disk_read_bytes_total`,
//! `canopy_node_disk_written_bytes_total`, `canopy_node_disk_reads_completed_total`,
//! `canopy_node_disk_writes_completed_total`, `canopy_node_disk_io_time_seconds_total`.
//! `loop*`, `ram*` and `zram*` devices and partitions are skipped.

use std::path::Path;

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
}

/// Reads `<proc_root>/diskstats` each tick.
#[derive(Debug)]
pub struct DiskStatsCollector {
    node: String,
    file: HotFile,
    /// Label sets and keys of the last tick's series.
    series: SeriesCache,
}

impl DiskStatsCollector {
    /// A collector for `node` reading `<proc_root>/diskstats`.
    pub fn new(node: &str, proc_root: &Path) -> Self {
        DiskStatsCollector {
            node: node.to_string(),
            file: HotFile::lines(proc_root.join("diskstats")),
            series: SeriesCache::new(),
        }
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
        let disks = parse_diskstats(self.file.read()?)?;
        observations(&self.node, &disks, out);
        Ok(())
    }
}
