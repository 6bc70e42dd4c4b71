//! Collectors: each turns one source (a `/proc` file, a cgroup tree, a simulated
//! node) into [`Observation`]s.
//!
//! Every source module has two layers, kept apart on purpose:
//! - `parse_*`: pure functions, text in, typed values out, no I/O. Tested on
//!   fixture copies of the real files under `tests/data/`.
//! - a thin reader (a type implementing [`Collector`]) that reads the real file
//!   under a configurable root (`/proc`, `/sys/fs/cgroup`) and maps the typed
//!   values to metric names and labels.
//!
//! A collector reports each series it sees on every call; a series that it no
//! longer reports (a job that ended, a device that vanished) is retracted by the
//! sampler, which turns the disappearance into a staleness marker.

pub mod cgroup_v1;
pub mod cgroup_v2;
pub mod dir_watch;
pub mod diskstats;
pub mod emit;
pub mod filesystem;
pub mod fs_worker;
pub mod gpu;
pub mod hot_file;
pub mod hwmon;
pub mod infiniband;
pub mod job_energy;
pub mod job_labels;
pub mod k8s_pods;
pub mod loadavg;
pub mod lustre;
pub mod meminfo;
pub mod mount_watch;
pub mod netdev;
pub mod outside_io;
pub mod outside_jobs;
pub mod perf;
pub mod perf_jobs;
pub mod perf_tasks;
pub mod pressure;
pub mod probe;
pub mod proc_io;
pub mod rapl;
pub mod slurm_jobs;
pub mod slurm_procs;
pub mod stat;
pub mod synthetic;

#[cfg(test)]
mod bad_input_tests;
#[cfg(test)]
mod device_tests;
#[cfg(test)]
mod drm_tests;
#[cfg(test)]
mod fs_tests;
#[cfg(test)]
mod gpu_tests;
#[cfg(test)]
mod k8s_tests;
#[cfg(test)]
mod outside_io_tests;
#[cfg(test)]
mod perf_tasks_tests;
#[cfg(test)]
mod perf_tests;
#[cfg(test)]
mod slurm_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod v2_tests;

use std::path::Path;
use std::str::FromStr;

use canopy_proto::codec::{Sender, SeriesKey};
use canopy_proto::model::{Labels, MetricKind};

use crate::error::LeafError;

pub use cgroup_v1::SlurmCgroupV1Collector;
pub use diskstats::DiskStatsCollector;
pub use emit::{Emit, Recorder, SeriesCache};
pub use loadavg::LoadAvgCollector;
pub use meminfo::MemInfoCollector;
pub use netdev::NetDevCollector;
pub use pressure::PressureCollector;
pub use slurm_jobs::{SlurmJobsCollector, SlurmJobsOptions};
pub use stat::StatCollector;
pub use synthetic::SyntheticTicks;

/// One value of one series, as a collector saw it at the current tick.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// The series: `__name__`, `node` and the metric's own labels.
    pub labels: Labels,
    /// Counter (monotonic `_total`) or gauge.
    pub kind: MetricKind,
    /// The value, in the metric's base unit (seconds, bytes, ratio).
    pub value: f64,
}

impl Observation {
    /// An observation of metric `name` on `node`, with extra `labels`
    /// (labels with an empty value are dropped, as Prometheus does).
    pub fn new(
        name: &str,
        kind: MetricKind,
        node: &str,
        labels: &[(&str, &str)],
        value: f64,
    ) -> Self {
        let pairs = std::iter::once(("node", node)).chain(labels.iter().copied());
        Observation {
            labels: Labels::metric_strs(name, pairs),
            kind,
            value,
        }
    }

    /// A counter observation; see [`Observation::new`].
    pub fn counter(name: &str, node: &str, labels: &[(&str, &str)], value: f64) -> Self {
        Self::new(name, MetricKind::Counter, node, labels, value)
    }

    /// A gauge observation; see [`Observation::new`].
    pub fn gauge(name: &str, node: &str, labels: &[(&str, &str)], value: f64) -> Self {
        Self::new(name, MetricKind::Gauge, node, labels, value)
    }
}

/// Where one collector puts one tick's values: by stable series key (no
/// label building or hashing once a series is known), or as plain
/// [`Observation`]s into the tick's shared buffer.
pub struct Sink<'a> {
    sender: &'a mut Sender,
    obs: &'a mut Vec<Observation>,
    src: u32,
}

impl<'a> Sink<'a> {
    /// A sink feeding source `src` of `sender` (whose tick has begun), with
    /// `obs` as the buffer of plain observations.
    pub fn new(sender: &'a mut Sender, src: u32, obs: &'a mut Vec<Observation>) -> Self {
        Self { sender, obs, src }
    }

    /// The tick's buffer of plain observations (the sampler feeds them to
    /// the sender after every collector ran, so later collectors can read
    /// and edit what earlier ones put there).
    pub fn observations(&mut self) -> &mut Vec<Observation> {
        self.obs
    }

    /// Records `value` of the series `labels`: by the key kept in `slot`
    /// when it is still valid, else by hashing `labels` once and keeping
    /// the new key in `slot`. The caller keeps `labels` and `slot` across
    /// ticks. Inline: a leaf records every series every tick, and the
    /// call cost about as much as the keyed path itself.
    #[inline]
    pub fn record(
        &mut self,
        slot: &mut Option<SeriesKey>,
        labels: &Labels,
        kind: MetricKind,
        value: f64,
    ) {
        if let Some(k) = *slot
            && self.sender.observe_key(k, value)
        {
            return;
        }
        self.record_by_labels(slot, labels, kind, value);
    }

    /// [`Sink::record`] of a series without a valid key: hashes `labels`
    /// (out of line: once per series, not per tick).
    #[inline(never)]
    fn record_by_labels(
        &mut self,
        slot: &mut Option<SeriesKey>,
        labels: &Labels,
        kind: MetricKind,
        value: f64,
    ) {
        *slot = Some(self.sender.observe(self.src, labels, kind, value));
    }
}

/// A source of observations, called once per sampler tick.
///
/// Implementations append to `out` and never clear it, so the sampler can run
/// every collector into one buffer. On error a collector should have appended
/// nothing, or only complete observations; the sampler logs the error (rate
/// limited) and keeps the other collectors' output.
pub trait Collector {
    /// A short stable name for logs and self-metrics, e.g. `"proc_stat"`.
    fn name(&self) -> &'static str;

    /// Appends the current value of every series this collector sees to `out`.
    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError>;

    /// What the sampler calls each tick: collectors that keep their series
    /// (labels and [`SeriesKey`]s) across ticks override it to record by
    /// key through [`Sink::record`]; the default appends
    /// [`Collector::collect`]'s observations to the tick's buffer.
    fn collect_into(&mut self, sink: &mut Sink<'_>) -> Result<(), LeafError> {
        self.collect(sink.observations())
    }

    /// Tells the collector the tick's time before `collect`. Real collectors
    /// read the host and ignore it; simulated ones advance virtual time.
    fn set_tick_time(&mut self, _ts_ms: i64) {}
}

/// The collectors for a real host: the `/proc` node collectors under
/// `proc_root` and the Slurm job collector (cgroup v1 under `cgroup_root`,
/// `/proc/<pid>/io`, and `scontrol` metadata when `scontrol` is on `PATH`),
/// normally `/proc` and `/sys/fs/cgroup`, then the optional devices (RAPL,
/// hwmon, InfiniBand, Lustre, GPUs, perf_event) and per-job energy.
pub fn host_collectors(
    node: &str,
    proc_root: &Path,
    cgroup_root: &Path,
) -> Vec<Box<dyn Collector + Send>> {
    host_collectors_with(node, proc_root, cgroup_root, &HostOptions::default())
}

/// Settings of the host's collectors (the node file's, see
/// [`host_collectors_with`]); the default is [`host_collectors`]'s.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostOptions {
    /// Filesystem usage is read every this many ticks (`None`:
    /// [`filesystem::DEFAULT_FS_EVERY_TICKS`]; see
    /// [`filesystem::FilesystemOptions::every_ticks`]).
    pub filesystem_every_ticks: Option<u32>,
    /// `/proc` is scanned for the I/O of processes outside jobs every this
    /// many ticks (`None`: [`outside_io::DEFAULT_OUTSIDE_IO_EVERY_TICKS`];
    /// 0 turns the scan off).
    pub outside_io_every_ticks: Option<u32>,
}

/// [`host_collectors`] with settings.
pub fn host_collectors_with(
    node: &str,
    proc_root: &Path,
    cgroup_root: &Path,
    opts: &HostOptions,
) -> Vec<Box<dyn Collector + Send>> {
    let fs_opts = filesystem::FilesystemOptions {
        every_ticks: opts
            .filesystem_every_ticks
            .unwrap_or(filesystem::DEFAULT_FS_EVERY_TICKS),
        ..filesystem::FilesystemOptions::default()
    };
    let sys_root = proc_root.with_file_name("sys");
    let dirs = cgroup_v1::JobDirsCache::new();
    let mem = meminfo::MemShare::new();
    vec![
        Box::new(StatCollector::new(node, proc_root)),
        Box::new(MemInfoCollector::new(node, proc_root).with_share(mem.clone())),
        Box::new(LoadAvgCollector::new(node, proc_root)),
        Box::new(NetDevCollector::new(node, proc_root)),
        Box::new(DiskStatsCollector::new(node, proc_root).with_sysfs(&sys_root)),
        Box::new(PressureCollector::new(node, proc_root)),
        Box::new(filesystem::FilesystemCollector::new(
            node, proc_root, fs_opts,
        )),
        Box::new(
            SlurmJobsCollector::new(
                node,
                proc_root,
                cgroup_root,
                SlurmJobsOptions {
                    scontrol: find_on_path("scontrol").map(|p| p.to_string_lossy().into_owned()),
                    ..SlurmJobsOptions::default()
                },
            )
            .with_dirs_cache(dirs.clone()),
        ),
        Box::new(k8s_pods::K8sPodsCollector::new(
            node,
            cgroup_root,
            Some(Path::new(k8s_pods::DEFAULT_POD_LOGS)),
        )),
        // Optional devices: each logs once when absent and looks again
        // rarely. `/sys` sits beside `/proc` (a fixture `.../proc` gets
        // `.../sys`).
        Box::new(rapl::RaplCollector::new(node, &sys_root)),
        Box::new(hwmon::HwmonCollector::new(node, &sys_root)),
        Box::new(infiniband::InfinibandCollector::new(node, &sys_root)),
        Box::new(lustre::LustreCollector::new(node, proc_root, &sys_root)),
        Box::new(gpu::amd::AmdGpuCollector::new(node, &sys_root)),
        Box::new(gpu::nvml::NvmlCollector::new(node, proc_root)),
        Box::new(gpu::drm::DrmFdinfoCollector::new(
            node, proc_root, &sys_root,
        )),
        Box::new(perf::PerfCollector::new(node, &sys_root)),
        Box::new(perf_jobs::PerfJobsCollector::new(
            node,
            cgroup_root,
            &sys_root,
            perf_jobs::DEFAULT_MAX_FDS,
        )),
        // cgroup v1 Slurm: per-task counters with inherit.
        Box::new(
            perf_tasks::PerfTasksCollector::new(
                node,
                cgroup_root,
                proc_root,
                perf_jobs::DEFAULT_MAX_FDS,
            )
            .with_dirs_cache(dirs),
        ),
        // Last: these read what the collectors above put in the tick's
        // buffer (job labels, RAPL and job CPU series).
        Box::new(job_labels::JobLabelsCollector),
        Box::new(job_energy::JobEnergyCollector::new()),
        // Processes outside any job: node busy CPU and memory minus the
        // jobs', and their I/O from a `/proc` scan every few ticks.
        Box::new(outside_jobs::OutsideJobsCollector::new(node).with_memory(mem)),
        Box::new(outside_io::OutsideIoCollector::new(
            node,
            proc_root,
            opts.outside_io_every_ticks
                .unwrap_or(outside_io::DEFAULT_OUTSIDE_IO_EVERY_TICKS),
        )),
    ]
}

/// The first executable file `name` on `PATH`.
fn find_on_path(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Reads a whole text file, mapping the error to [`LeafError::Io`].
pub(crate) fn read_text(path: &Path) -> Result<String, LeafError> {
    std::fs::read_to_string(path).map_err(|e| LeafError::io(path, e))
}

/// Splits `line` at ASCII whitespace into `cols` and returns how many
/// columns it filled (at most `N`; fewer when the line has fewer): the
/// per-line column split of the `/proc` parsers without a `Vec` per line,
/// byte by byte, and nothing scanned past the `N`th column (the parsers
/// read the first 10 or 13 of lines of 16 to 20 numbers, every tick).
pub(crate) fn split_cols<'a, const N: usize>(line: &'a str, cols: &mut [&'a str; N]) -> usize {
    let b = line.as_bytes();
    let (mut n, mut i) = (0, 0);
    while let Some(slot) = cols.get_mut(n) {
        while b.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let start = i;
        while b.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
            i += 1;
        }
        // An ASCII byte or the end: both ends are char boundaries.
        *slot = line.get(start..i).unwrap_or("");
        n += 1;
    }
    n
}

/// Parses one whitespace-separated field as a number, with a precise error.
pub(crate) fn field<T: FromStr>(
    format: &'static str,
    line: usize,
    what: &str,
    text: Option<&str>,
) -> Result<T, LeafError> {
    let text = text.ok_or_else(|| LeafError::parse(format, line, format!("no {what} field")))?;
    text.parse()
        .map_err(|_| LeafError::parse(format, line, format!("{what}: not a number: {text:?}")))
}
