//! Lustre: client (`llite`) stats per file system and server-side
//! `job_stats` per job.
//!
//! - `llite/<fs>-<instance>/stats` (under `/proc/fs/lustre`, or
//!   `/sys/kernel/debug/lustre` on Lustre 2.12+): one line per operation,
//!   `read_bytes  <count> samples [bytes] <min> <max> <sum> [<sumsq>]`; the
//!   bytes are the `sum` column.
//! - `obdfilter/<fs>-OST<n>/job_stats` on an OSS: a YAML list of jobs,
//!   `- job_id: <id>` then `read_bytes: { samples: N, unit: bytes, min: ..,
//!   max: .., sum: S[, sumsq: ..][, hist: {..}] }` (Lustre 2.4 names them
//!   `read`/`write`; later versions use those names for latencies in
//!   `usecs`). The id is what the client built from `jobid_var` and
//!   `jobid_name`: with `jobid_var=SLURM_JOB_ID` it is the Slurm job id,
//!   possibly followed by other fields (`%j:%u:%H` gives
//!   `"1234:1000:node01"`, quoted by Lustre 2.15 because of the `:`). Ids
//!   that do not start with a job number (`procname_uid` gives `dd.0`) are
//!   work outside any job and are summed under an empty `job_id`. An OSS
//!   sees the I/O of every client node, so these job series carry the
//!   server's `node`.
//!
//! Metrics (counters): `canopy_node_lustre_{read,write}_bytes_total{fs}` and
//! `canopy_job_lustre_{read,write}_bytes_total{job_id,fs}` (summed over the
//! file system's OSTs on this server).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::probe::{DEFAULT_REPROBE_EVERY, Probe};
use super::{Collector, Observation, field};
use crate::error::LeafError;

const LLITE: &str = "lustre llite stats";
const JOBSTATS: &str = "lustre job_stats";

/// Read and write byte totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RwBytes {
    /// Bytes read.
    pub read: u64,
    /// Bytes written.
    pub write: u64,
}

/// Parses an llite `stats` file: the `sum` column of `read_bytes` and
/// `write_bytes` (0 when the operation has not happened yet: Lustre omits
/// lines of counters that are still zero).
pub fn parse_llite_stats(text: &str) -> Result<RwBytes, LeafError> {
    let mut rw = RwBytes::default();
    for (i, line) in text.lines().enumerate() {
        let mut it = line.split_ascii_whitespace();
        let target = match it.next() {
            Some("read_bytes") => &mut rw.read,
            Some("write_bytes") => &mut rw.write,
            _ => continue,
        };
        let cols: Vec<&str> = it.collect();
        // <count> samples [bytes] <min> <max> <sum> [<sumsq>]
        *target = field(LLITE, i + 1, "sum", cols.get(5).copied())?;
    }
    Ok(rw)
}

/// The file system name of an llite or OST directory: everything before the
/// last `-` (`scratch-ffff9a0c3c2e8800` and `scratch-OST0001` -> `scratch`).
pub fn fs_name(dir: &str) -> &str {
    dir.rsplit_once('-').map_or(dir, |(fs, _)| fs)
}

/// The Slurm job id inside a Lustre job id: its leading digits when they
/// are the whole id or are followed by a separator (`.`, `:`, `@`, `_`, `-`);
/// `None` for ids that are not a job (`dd.0`, `bash.1000`).
pub fn slurm_job_id(lustre_id: &str) -> Option<&str> {
    let end = lustre_id
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lustre_id.len());
    if end == 0 {
        return None;
    }
    match lustre_id[end..].chars().next() {
        None | Some('.' | ':' | '@' | '_' | '-') => Some(&lustre_id[..end]),
        Some(_) => None,
    }
}

/// The value of key `key` in a YAML flow map `{ a: 1, sum: 2 }`.
fn flow_value<'a>(map: &'a str, key: &str) -> Option<&'a str> {
    let inner = map.trim().strip_prefix('{')?.strip_suffix('}')?;
    inner.split(',').find_map(|kv| {
        let (k, v) = kv.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// Parses a `job_stats` file into per-job read/write bytes, in file order.
/// Jobs without byte lines (MDT files) get zeros.
pub fn parse_job_stats(text: &str) -> Result<Vec<(String, RwBytes)>, LeafError> {
    let mut jobs: Vec<(String, RwBytes)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(id) = t.strip_prefix("- job_id:") {
            let id = id.trim().trim_matches('"').to_string();
            jobs.push((id, RwBytes::default()));
            continue;
        }
        let Some((key, rest)) = t.split_once(':') else {
            continue;
        };
        // `read_bytes`/`write_bytes` (Lustre 2.5+), or `read`/`write` in
        // bytes (2.4); since 2.12 `read`/`write` are latencies in usecs.
        let is_read = match key {
            "read_bytes" => true,
            "write_bytes" => false,
            "read" | "write" if flow_value(rest, "unit") == Some("bytes") => key == "read",
            _ => continue,
        };
        let Some((_, rw)) = jobs.last_mut() else {
            return Err(LeafError::parse(
                JOBSTATS,
                i + 1,
                "counter before any job_id",
            ));
        };
        let sum: u64 = field(JOBSTATS, i + 1, "sum", flow_value(rest, "sum"))?;
        if is_read {
            rw.read = sum;
        } else {
            rw.write = sum;
        }
    }
    Ok(jobs)
}

/// Sums per-job bytes by Slurm job id (ids that are not jobs go to `""`).
pub fn by_slurm_job(jobs: &[(String, RwBytes)]) -> BTreeMap<String, RwBytes> {
    let mut m: BTreeMap<String, RwBytes> = BTreeMap::new();
    for (id, rw) in jobs {
        let e = m
            .entry(slurm_job_id(id).unwrap_or("").to_string())
            .or_default();
        e.read = e.read.saturating_add(rw.read);
        e.write = e.write.saturating_add(rw.write);
    }
    m
}

/// Appends node (`per_fs`) and job (`per_job`: fs -> job -> bytes) series.
pub fn observations(
    node: &str,
    per_fs: &BTreeMap<String, RwBytes>,
    per_job: &BTreeMap<String, BTreeMap<String, RwBytes>>,
    out: &mut Vec<Observation>,
) {
    for (fs, rw) in per_fs {
        let l = [("fs", fs.as_str())];
        out.push(Observation::counter(
            "canopy_node_lustre_read_bytes_total",
            node,
            &l,
            rw.read as f64,
        ));
        out.push(Observation::counter(
            "canopy_node_lustre_write_bytes_total",
            node,
            &l,
            rw.write as f64,
        ));
    }
    for (fs, jobs) in per_job {
        for (job, rw) in jobs {
            // An empty `job_id` is dropped, as in Prometheus: work outside
            // any job is the series without the label.
            let l = [("job_id", job.as_str()), ("fs", fs.as_str())];
            let mut push = |name: &str, v: u64| {
                out.push(Observation::counter(name, node, &l, v as f64));
            };
            push("canopy_job_lustre_read_bytes_total", rw.read);
            push("canopy_job_lustre_write_bytes_total", rw.write);
        }
    }
}

/// Sorted subdirectory names of `dir` (empty when absent).
fn subdirs(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Reads llite stats and OST job_stats each tick.
#[derive(Debug)]
pub struct LustreCollector {
    node: String,
    /// Directories that may hold `llite/` and `obdfilter/`.
    roots: Vec<PathBuf>,
    probe: Probe,
}

impl LustreCollector {
    /// A collector for `node` looking under `<proc_root>/fs/lustre` and
    /// `<sys_root>/kernel/debug/lustre`.
    pub fn new(node: &str, proc_root: &Path, sys_root: &Path) -> Self {
        Self::with_roots(
            node,
            vec![
                proc_root.join("fs").join("lustre"),
                sys_root.join("kernel").join("debug").join("lustre"),
            ],
        )
    }

    /// A collector looking under the given Lustre parameter directories.
    pub fn with_roots(node: &str, roots: Vec<PathBuf>) -> Self {
        LustreCollector {
            node: node.to_string(),
            roots,
            probe: Probe::new("lustre", DEFAULT_REPROBE_EVERY),
        }
    }

    /// The back-off state (for tests and self-metrics).
    pub fn probe(&self) -> &Probe {
        &self.probe
    }
}

impl Collector for LustreCollector {
    fn name(&self) -> &'static str {
        "lustre"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if !self.probe.should_try() {
            return Ok(());
        }
        let mut per_fs: BTreeMap<String, RwBytes> = BTreeMap::new();
        let mut per_job: BTreeMap<String, BTreeMap<String, RwBytes>> = BTreeMap::new();
        let mut seen = false;
        let mut first_err = None;
        // The same target can show under both roots (procfs and debugfs):
        // each directory name counts once.
        let mut done: std::collections::HashSet<String> = std::collections::HashSet::new();
        for root in &self.roots {
            let llite = root.join("llite");
            for dir in subdirs(&llite) {
                let Ok(text) = std::fs::read_to_string(llite.join(&dir).join("stats")) else {
                    continue;
                };
                if !done.insert(format!("llite/{dir}")) {
                    continue;
                }
                seen = true;
                match parse_llite_stats(&text) {
                    Ok(rw) => {
                        let e = per_fs.entry(fs_name(&dir).to_string()).or_default();
                        e.read = e.read.saturating_add(rw.read);
                        e.write = e.write.saturating_add(rw.write);
                    }
                    Err(e) => first_err = first_err.or(Some(e)),
                }
            }
            let ost = root.join("obdfilter");
            for dir in subdirs(&ost) {
                let Ok(text) = std::fs::read_to_string(ost.join(&dir).join("job_stats")) else {
                    continue;
                };
                if !done.insert(format!("obdfilter/{dir}")) {
                    continue;
                }
                seen = true;
                match parse_job_stats(&text) {
                    Ok(jobs) => {
                        let fs = per_job.entry(fs_name(&dir).to_string()).or_default();
                        for (job, rw) in by_slurm_job(&jobs) {
                            let e = fs.entry(job).or_default();
                            e.read = e.read.saturating_add(rw.read);
                            e.write = e.write.saturating_add(rw.write);
                        }
                    }
                    Err(e) => first_err = first_err.or(Some(e)),
                }
            }
        }
        if !seen {
            self.probe.missing(&"no Lustre llite stats or job_stats");
            return Ok(());
        }
        self.probe.found();
        observations(&self.node, &per_fs, &per_job, out);
        first_err.map_or(Ok(()), Err)
    }
}
