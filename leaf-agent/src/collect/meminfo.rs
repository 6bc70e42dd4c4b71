//! `/proc/meminfo`: node memory.
//!
//! Metrics (gauges, bytes): `canopy_node_memory_total_bytes`,
//! `canopy_node_memory_available_bytes`, `canopy_node_memory_free_bytes`,
//! `canopy_node_memory_cached_bytes`, `canopy_node_memory_buffers_bytes`,
//! `canopy_node_memory_swap_total_bytes`, `canopy_node_memory_swap_free_bytes`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::hot_file::HotFile;
use super::{Collector, Emit, Observation, SeriesCache, Sink, field};
use crate::error::LeafError;

const FORMAT: &str = "/proc/meminfo";

/// Parsed `/proc/meminfo`, in bytes. Only `MemTotal` is required; a field the
/// kernel does not print is `None` and its series is not reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// `MemTotal`.
    pub total: u64,
    /// `MemAvailable` (kernels since 3.14).
    pub available: Option<u64>,
    /// `MemFree`.
    pub free: Option<u64>,
    /// `Cached` (page cache, without swap cache).
    pub cached: Option<u64>,
    /// `Buffers`.
    pub buffers: Option<u64>,
    /// `SwapTotal`.
    pub swap_total: Option<u64>,
    /// `SwapFree`.
    pub swap_free: Option<u64>,
}

/// Parses the text of `/proc/meminfo` (`Key:   123 kB` lines; kB means KiB).
/// Stops at the line that completes the seven fields read (the kernel
/// prints each once, in its first 16 of about 55 lines): the rest is not
/// split, a leaf reads the file every tick.
pub fn parse_meminfo(text: &str) -> Result<MemInfo, LeafError> {
    let mut total = None;
    let mut m = MemInfo::default();
    // One bit per field read; all seven: done.
    let mut found = 0u8;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let Some((key, rest)) = line.split_once(':') else {
            return Err(LeafError::parse(FORMAT, n, "no ':' after the key"));
        };
        let (slot, bit) = match key {
            "MemTotal" => (&mut total, 1),
            "MemAvailable" => (&mut m.available, 2),
            "MemFree" => (&mut m.free, 4),
            "Cached" => (&mut m.cached, 8),
            "Buffers" => (&mut m.buffers, 16),
            "SwapTotal" => (&mut m.swap_total, 32),
            "SwapFree" => (&mut m.swap_free, 64),
            _ => continue,
        };
        let mut it = rest.split_ascii_whitespace();
        let v: u64 = field(FORMAT, n, key, it.next())?;
        let bytes = match it.next() {
            Some("kB") => v.checked_mul(1024),
            None => Some(v),
            Some(u) => return Err(LeafError::parse(FORMAT, n, format!("unknown unit {u:?}"))),
        };
        *slot = Some(bytes.ok_or_else(|| LeafError::parse(FORMAT, n, "value overflows u64"))?);
        found |= bit;
        if found == 127 {
            break;
        }
    }
    m.total = total.ok_or(LeafError::Missing {
        format: FORMAT,
        field: "MemTotal",
    })?;
    Ok(m)
}

/// Appends the observations for a parsed `/proc/meminfo`.
pub fn observations(node: &str, m: &MemInfo, out: &mut impl Emit) {
    let fields = [
        ("canopy_node_memory_total_bytes", Some(m.total)),
        ("canopy_node_memory_available_bytes", m.available),
        ("canopy_node_memory_free_bytes", m.free),
        ("canopy_node_memory_cached_bytes", m.cached),
        ("canopy_node_memory_buffers_bytes", m.buffers),
        ("canopy_node_memory_swap_total_bytes", m.swap_total),
        ("canopy_node_memory_swap_free_bytes", m.swap_free),
    ];
    for (name, v) in fields {
        if let Some(v) = v {
            out.gauge(name, node, &[], v as f64);
        }
    }
}

/// The node's last `MemTotal` and `MemFree` (bytes), shared with the
/// collector of memory outside jobs: the meminfo collector records by key,
/// so its values are not in the tick's buffer of observations.
#[derive(Clone, Debug, Default)]
pub struct MemShare(Arc<Mutex<Option<(u64, u64)>>>);

impl MemShare {
    /// Nothing read yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores the last reading.
    pub fn set(&self, total: u64, free: u64) {
        if let Ok(mut g) = self.0.lock() {
            *g = Some((total, free));
        }
    }

    /// The last reading, if any.
    pub fn get(&self) -> Option<(u64, u64)> {
        self.0.lock().ok().and_then(|g| *g)
    }
}

/// Reads `<proc_root>/meminfo` each tick.
#[derive(Debug)]
pub struct MemInfoCollector {
    node: String,
    file: HotFile,
    /// Label sets and keys of the last tick's series.
    series: SeriesCache,
    share: Option<MemShare>,
}

impl MemInfoCollector {
    /// A collector for `node` reading `<proc_root>/meminfo`.
    pub fn new(node: &str, proc_root: &Path) -> Self {
        MemInfoCollector {
            node: node.to_string(),
            file: HotFile::single(proc_root.join("meminfo")),
            series: SeriesCache::new(),
            share: None,
        }
    }

    /// Also stores each reading's total and free memory in `share`.
    pub fn with_share(mut self, share: MemShare) -> Self {
        self.share = Some(share);
        self
    }
}

impl Collector for MemInfoCollector {
    fn name(&self) -> &'static str {
        "proc_meminfo"
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

impl MemInfoCollector {
    /// One tick's series into `out`.
    fn report(&mut self, out: &mut impl Emit) -> Result<(), LeafError> {
        let m = parse_meminfo(self.file.read()?)?;
        if let (Some(share), Some(free)) = (&self.share, m.free) {
            share.set(m.total, free);
        }
        observations(&self.node, &m, out);
        Ok(())
    }
}
