//! NVIDIA GPUs through NVML. `nvml-wrapper` opens `libnvidia-ml.so` with
//! `dlopen` when the collector first runs, so a node without the driver
//! logs one line (see [`Probe`]) and looks again every few minutes.
//!
//! Per tick and device: memory (`nvmlDeviceGetMemoryInfo`), power
//! (`nvmlDeviceGetPowerUsage`, milliwatts), temperature (GPU sensor), the
//! running compute processes (PID, memory, MIG GPU/compute instance) and
//! their SM utilisation samples (`nvmlDeviceGetProcessUtilization`, which
//! lists only processes with non-zero use since the last timestamp passed).
//! PIDs map to Slurm jobs through `/proc/<pid>/cgroup`, or the process's
//! `SLURM_JOB_ID` on `proctrack/linuxproc` nodes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use super::{
    GpuProcess, GpuSample, job_from_proc_cgroup, job_observations, node_observations,
    node_sm_utilization, per_job,
};
use crate::attrib::linuxproc::job_from_environ;
use crate::collect::probe::{DEFAULT_REPROBE_EVERY, Probe};
use crate::collect::{Collector, Observation};
use crate::error::LeafError;

/// A running compute process as NVML lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunningProcess {
    /// Host PID.
    pub pid: u32,
    /// Device memory held, bytes (`None` when NVML cannot tell).
    pub memory_bytes: Option<u64>,
    /// MIG `(gpu instance, compute instance)`.
    pub mig: Option<(u32, u32)>,
}

/// One utilisation sample (`nvmlProcessUtilizationSample_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtilSample {
    /// Host PID.
    pub pid: u32,
    /// CPU timestamp of the sample, microseconds.
    pub timestamp_us: u64,
    /// SM utilisation, percent.
    pub sm_percent: u32,
}

/// Joins the running processes of GPU `gpu` with the utilisation samples.
/// `samples` is `None` when the device cannot sample (MIG, old GPUs): SM
/// stays unknown. Otherwise a running process without a sample was idle
/// (NVML lists only non-zero use) and gets 0; with several samples the
/// latest wins. Sampled processes that are not in the running list (they
/// just exited) are kept with unknown memory.
pub fn merge_processes(
    gpu: &str,
    running: &[RunningProcess],
    samples: Option<&[UtilSample]>,
) -> Vec<GpuProcess> {
    let mut latest: HashMap<u32, UtilSample> = HashMap::new();
    for s in samples.unwrap_or(&[]) {
        let keep = latest
            .get(&s.pid)
            .is_none_or(|o| o.timestamp_us <= s.timestamp_us);
        if keep {
            latest.insert(s.pid, *s);
        }
    }
    let mut out: Vec<GpuProcess> = running
        .iter()
        .map(|r| GpuProcess {
            gpu: gpu.to_string(),
            pid: r.pid,
            sm_percent: samples.map(|_| latest.get(&r.pid).map_or(0, |s| s.sm_percent)),
            memory_bytes: r.memory_bytes,
            mig: r.mig,
        })
        .collect();
    let mut extra: Vec<&UtilSample> = latest
        .values()
        .filter(|s| !running.iter().any(|r| r.pid == s.pid))
        .collect();
    extra.sort_by_key(|s| s.pid);
    out.extend(extra.into_iter().map(|s| GpuProcess {
        gpu: gpu.to_string(),
        pid: s.pid,
        sm_percent: Some(s.sm_percent),
        memory_bytes: None,
        mig: None,
    }));
    out
}

/// A device's SM activity: from its processes' samples when there are
/// any; 0 when sampling works (`sampled`) but no process ran; unknown when
/// the device cannot sample (MIG, pre-Maxwell).
pub fn device_sm_utilization(procs: &[GpuProcess], gpu: &str, sampled: bool) -> Option<f64> {
    node_sm_utilization(procs, gpu).or(sampled.then_some(0.0))
}

/// The job of `pid` from `/proc/<pid>/cgroup`, else its `SLURM_JOB_ID`.
pub(crate) fn job_of_pid(proc_root: &Path, pid: u32) -> Option<String> {
    let dir = proc_root.join(pid.to_string());
    if let Some(j) = std::fs::read_to_string(dir.join("cgroup"))
        .ok()
        .and_then(|t| job_from_proc_cgroup(&t))
    {
        return Some(j);
    }
    let env = std::fs::read(dir.join("environ")).ok()?;
    job_from_environ(&env).map(|j| j.to_string())
}

/// Reads every NVIDIA GPU through NVML each tick.
pub struct NvmlCollector {
    node: String,
    proc_root: PathBuf,
    probe: Probe,
    nvml: Option<Nvml>,
    /// Per device index: the newest sample timestamp seen.
    last_seen: HashMap<u32, u64>,
}

impl std::fmt::Debug for NvmlCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlCollector")
            .field("node", &self.node)
            .field("loaded", &self.nvml.is_some())
            .field("probe", &self.probe)
            .finish()
    }
}

impl NvmlCollector {
    /// A collector for `node`; PIDs are resolved under `proc_root`.
    pub fn new(node: &str, proc_root: &Path) -> Self {
        NvmlCollector {
            node: node.to_string(),
            proc_root: proc_root.to_path_buf(),
            probe: Probe::new("nvml", DEFAULT_REPROBE_EVERY),
            nvml: None,
            last_seen: HashMap::new(),
        }
    }

    /// The back-off state (for tests and self-metrics).
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// Reads all devices; `Err` means NVML itself failed (driver gone).
    fn read_all(&mut self) -> Result<(Vec<GpuSample>, Vec<GpuProcess>), NvmlError> {
        let Some(nvml) = self.nvml.as_ref() else {
            return Ok((Vec::new(), Vec::new()));
        };
        let mut gpus = Vec::new();
        let mut procs = Vec::new();
        for i in 0..nvml.device_count()? {
            let Ok(dev) = nvml.device_by_index(i) else {
                continue; // One lost GPU must not hide the others.
            };
            let gpu = i.to_string();
            let running: Vec<RunningProcess> = dev
                .running_compute_processes()
                .unwrap_or_default()
                .into_iter()
                .map(|p| RunningProcess {
                    pid: p.pid,
                    memory_bytes: match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b),
                        UsedGpuMemory::Unavailable => None,
                    },
                    mig: p.gpu_instance_id.zip(p.compute_instance_id),
                })
                .collect();
            let last = self.last_seen.get(&i).copied();
            // NOT_FOUND means "no sample in the period": every process idle.
            let samples: Option<Vec<UtilSample>> = match dev.process_utilization_stats(last) {
                Ok(v) => Some(
                    v.into_iter()
                        .map(|s| UtilSample {
                            pid: s.pid,
                            timestamp_us: s.timestamp,
                            sm_percent: s.sm_util,
                        })
                        .collect(),
                ),
                Err(NvmlError::NotFound) => Some(Vec::new()),
                Err(_) => None,
            };
            if let Some(max) = samples
                .as_ref()
                .and_then(|v| v.iter().map(|s| s.timestamp_us).max())
            {
                self.last_seen.insert(i, max);
            }
            let mine = merge_processes(&gpu, &running, samples.as_deref());
            let mem = dev.memory_info().ok();
            gpus.push(GpuSample {
                gpu: gpu.clone(),
                sm_utilization: device_sm_utilization(&mine, &gpu, samples.is_some()),
                busy: None,
                memory_used_bytes: mem.as_ref().map(|m| m.used),
                memory_total_bytes: mem.as_ref().map(|m| m.total),
                power_watts: dev.power_usage().ok().map(|mw| f64::from(mw) / 1e3),
                temperature_celsius: dev.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
            });
            procs.extend(mine);
        }
        Ok((gpus, procs))
    }
}

impl Collector for NvmlCollector {
    fn name(&self) -> &'static str {
        "gpu_nvml"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if self.nvml.is_none() {
            if !self.probe.should_try() {
                return Ok(());
            }
            match Nvml::init() {
                Ok(n) => self.nvml = Some(n),
                Err(e) => {
                    self.probe.missing(&e);
                    return Ok(());
                }
            }
        }
        let (gpus, procs) = match self.read_all() {
            Ok(r) => r,
            Err(e) => {
                self.nvml = None;
                self.probe.missing(&e);
                return Ok(());
            }
        };
        if gpus.is_empty() {
            self.nvml = None;
            self.probe.missing(&"NVML loaded but reports no GPU");
            return Ok(());
        }
        self.probe.found();
        let pid_jobs: HashMap<u32, String> = procs
            .iter()
            .filter_map(|p| Some((p.pid, job_of_pid(&self.proc_root, p.pid)?)))
            .collect();
        node_observations(&self.node, &gpus, out);
        job_observations(&self.node, &per_job(&procs, &pid_jobs), out);
        Ok(())
    }
}
