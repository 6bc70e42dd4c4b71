//! `/proc/pressure/{cpu,io,memory}`: pressure stall information (PSI).
//!
//! Metrics (counters, seconds, from the `total=` microseconds):
//! `canopy_node_pressure_{cpu,io,memory}_waiting_seconds_total` (`some`: at
//! least one task stalled) and `canopy_node_pressure_{io,memory}_stalled_seconds_total`
//! (`full`: all non-idle tasks stalled; the node-level `cpu` `full` line is
//! always 0 and not exported). Kernels without PSI (or booted `psi=0`) have
//! no such files: said once, then nothing.

use std::path::{Path, PathBuf};

use super::hot_file::HotFile;
use super::{Collector, Emit, Observation, SeriesCache, Sink};
use crate::error::LeafError;

const FORMAT: &str = "/proc/pressure/*";

/// `total=` of the `some` and `full` lines, microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `some ... total=`.
    pub some_usec: u64,
    /// `full ... total=` (absent on older kernels' cpu file).
    pub full_usec: Option<u64>,
}

/// Parses one PSI file.
pub fn parse_pressure(text: &str) -> Result<Pressure, LeafError> {
    let mut some = None;
    let mut full = None;
    for (i, line) in text.lines().enumerate() {
        let mut f = line.split_whitespace();
        let slot = match f.next() {
            Some("some") => &mut some,
            Some("full") => &mut full,
            _ => continue,
        };
        let total = f
            .find_map(|kv| kv.strip_prefix("total="))
            .ok_or_else(|| LeafError::parse(FORMAT, i + 1, "no total="))?;
        *slot = Some(super::field(FORMAT, i + 1, "total", Some(total))?);
    }
    Ok(Pressure {
        some_usec: some.ok_or(LeafError::Missing {
            format: FORMAT,
            field: "some",
        })?,
        full_usec: full,
    })
}

/// The metric names of resource `res`: waiting (`some`), and stalled
/// (`full`) except for `cpu`, whose `full` line is not exported. Fixed
/// strings, so a tick formats no names.
fn names(res: &str) -> (&'static str, Option<&'static str>) {
    match res {
        "io" => (
            "canopy_node_pressure_io_waiting_seconds_total",
            Some("canopy_node_pressure_io_stalled_seconds_total"),
        ),
        "memory" => (
            "canopy_node_pressure_memory_waiting_seconds_total",
            Some("canopy_node_pressure_memory_stalled_seconds_total"),
        ),
        _ => ("canopy_node_pressure_cpu_waiting_seconds_total", None),
    }
}

/// Reads `<proc_root>/pressure/*` each tick.
///
/// Every tick, not every other one: the kernel folds the per-CPU stall
/// times into `total=` on each read (`psi_show` calls
/// `collect_percpu_times` first); only the `avg10/60/300` fields wait for
/// the 2 s `PSI_FREQ`, and those are not exported. Reading every other tick
/// would halve the exported counters' time resolution to save the three
/// ~1.6 us reads, under 1 % of a leaf's CPU samples.
#[derive(Debug)]
pub struct PressureCollector {
    node: String,
    dir: PathBuf,
    absent: bool,
    /// The directory was seen once: no more checks per tick.
    present: bool,
    /// `cpu`, `io`, `memory`, kept open.
    files: [(&'static str, HotFile); 3],
    /// Label sets and keys of the last tick's series.
    series: SeriesCache,
}

impl PressureCollector {
    /// A collector for `node` reading `<proc_root>/pressure/`.
    pub fn new(node: &str, proc_root: &Path) -> Self {
        PressureCollector {
            node: node.to_string(),
            dir: proc_root.join("pressure"),
            absent: false,
            present: false,
            files: ["cpu", "io", "memory"]
                .map(|res| (res, HotFile::single(proc_root.join("pressure").join(res)))),
            series: SeriesCache::new(),
        }
    }
}

impl Collector for PressureCollector {
    fn name(&self) -> &'static str {
        "proc_pressure"
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

impl PressureCollector {
    /// One tick's series into `out`.
    fn report(&mut self, out: &mut impl Emit) -> Result<(), LeafError> {
        if self.absent {
            return Ok(());
        }
        if !self.present && !self.dir.is_dir() {
            self.absent = true;
            tracing::info!(dir = %self.dir.display(), "no PSI on this kernel; no pressure metrics");
            return Ok(());
        }
        self.present = true;
        let mut first = None;
        for (res, file) in &mut self.files {
            let res = *res;
            let p = match file.read().and_then(parse_pressure) {
                Ok(p) => p,
                Err(e) => {
                    first.get_or_insert(e);
                    continue;
                }
            };
            let (some, stalled) = names(res);
            out.counter(some, &self.node, &[], p.some_usec as f64 / 1e6);
            if let (Some(full), Some(stalled)) = (p.full_usec, stalled) {
                out.counter(stalled, &self.node, &[], full as f64 / 1e6);
            }
        }
        first.map_or(Ok(()), Err)
    }
}
