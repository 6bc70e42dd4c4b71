//! `/proc/loadavg`: load averages.
//!
//! Metrics (gauges): `canopy_node_load1`, `canopy_node_load5`, `canopy_node_load15`.

use std::path::Path;
use std::time::{Duration, Instant};

use super::hot_file::HotFile;
use super::{Collector, Emit, Observation, SeriesCache, Sink, field};
use crate::error::LeafError;

const FORMAT: &str = "/proc/loadavg";

/// Parsed `/proc/loadavg`: the 1, 5 and 15 minute load averages.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadAvg {
    /// 1-minute load average.
    pub load1: f64,
    /// 5-minute load average.
    pub load5: f64,
    /// 15-minute load average.
    pub load15: f64,
}

/// Parses the text of `/proc/loadavg` (`0.50 0.61 0.29 1/86 8656`).
pub fn parse_loadavg(text: &str) -> Result<LoadAvg, LeafError> {
    let mut it = text.split_ascii_whitespace();
    let mut next = |what: &str| -> Result<f64, LeafError> {
        let v: f64 = field(FORMAT, 1, what, it.next())?;
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(LeafError::parse(
                FORMAT,
                1,
                format!("{what}: out of range: {v}"),
            ))
        }
    };
    Ok(LoadAvg {
        load1: next("load1")?,
        load5: next("load5")?,
        load15: next("load15")?,
    })
}

/// Appends the observations for a parsed `/proc/loadavg`.
pub fn observations(node: &str, l: &LoadAvg, out: &mut impl Emit) {
    out.gauge("canopy_node_load1", node, &[], l.load1);
    out.gauge("canopy_node_load5", node, &[], l.load5);
    out.gauge("canopy_node_load15", node, &[], l.load15);
}

/// How long a read of `/proc/loadavg` is repeated by the keyed path
/// before the file is read again: the kernel recomputes the averages every
/// 5 s (`LOAD_FREQ`), so a 1 s tick reading it each time mostly reads the
/// same numbers. A little under 5 s, so a 1 s tick reads every 5th tick.
pub const LOADAVG_REREAD: Duration = Duration::from_millis(4_900);

/// Reads `<proc_root>/loadavg`: at most every [`LOADAVG_REREAD`] on the
/// keyed path (the ticks between repeat the last values by key), each
/// tick through [`Collector::collect`].
#[derive(Debug)]
pub struct LoadAvgCollector {
    node: String,
    file: HotFile,
    /// Label sets and keys of the last tick's series, with their values.
    series: SeriesCache,
    /// When the file was last read with success by the keyed path.
    read_at: Option<Instant>,
    /// How long such a read is repeated ([`LOADAVG_REREAD`]).
    reread: Duration,
}

impl LoadAvgCollector {
    /// A collector for `node` reading `<proc_root>/loadavg`.
    pub fn new(node: &str, proc_root: &Path) -> Self {
        Self::with_reread(node, proc_root, LOADAVG_REREAD)
    }

    /// [`LoadAvgCollector::new`] re-reading the file once `reread` has
    /// passed since the last read (zero: every tick).
    pub fn with_reread(node: &str, proc_root: &Path, reread: Duration) -> Self {
        LoadAvgCollector {
            node: node.to_string(),
            file: HotFile::single(proc_root.join("loadavg")),
            series: SeriesCache::new(),
            read_at: None,
            reread,
        }
    }
}

impl Collector for LoadAvgCollector {
    fn name(&self) -> &'static str {
        "proc_loadavg"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        self.report(out)
    }

    /// By key, with the label sets kept from the previous tick; within
    /// [`LOADAVG_REREAD`] of the last read the last values are repeated.
    fn collect_into(&mut self, sink: &mut Sink<'_>) -> Result<(), LeafError> {
        let now = Instant::now();
        if let Some(at) = self.read_at
            && now.saturating_duration_since(at) < self.reread
            && !self.series.is_empty()
        {
            self.series.replay(sink);
            return Ok(());
        }
        let mut series = std::mem::take(&mut self.series);
        let r = self.report(&mut series.recorder(sink));
        self.series = series;
        // A failed read is tried again at the next tick.
        self.read_at = r.is_ok().then_some(now);
        r
    }
}

impl LoadAvgCollector {
    /// One tick's series into `out`.
    fn report(&mut self, out: &mut impl Emit) -> Result<(), LeafError> {
        let l = parse_loadavg(self.file.read()?)?;
        observations(&self.node, &l, out);
        Ok(())
    }
}
