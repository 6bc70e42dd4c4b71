//! GPU use per process on AMD and Intel through DRM fdinfo: every open DRM
//! file (`/proc/<pid>/fd/<n>` -> `/dev/dri/renderD*` or `card*`) has a
//! `/proc/<pid>/fdinfo/<n>` with the kernel's client usage stats
//! (Documentation/gpu/drm-usage-stats.rst): `drm-driver`, `drm-pdev`,
//! `drm-client-id`, `drm-engine-<engine>: <ns> ns` (busy time, cumulative),
//! `drm-engine-capacity-<engine>`, and memory as `drm-memory-<region>`
//! (legacy, amdgpu) or `drm-resident-<region>` (`<n> [KiB|MiB]`, bytes
//! without a unit). One client shows in every fd and process that shares
//! it (dup, fork): it is counted once, by `(pdev, client id)`.
//!
//! Processes map to jobs as on the NVML path (`/proc/<pid>/cgroup`, then
//! `SLURM_JOB_ID`); processes outside jobs sum under `job_id=""`. A client
//! that closes keeps its busy time in its job's total, so the counters
//! never go down while the job runs. `gpu` is the DRM card (`card0`)
//! whose `device/uevent` has that PCI slot, else the PCI address.
//!
//! Metrics (label `gpu`, the job's): `canopy_job_gpu_engine_busy_seconds_total`
//! (counter, label `engine`; `rate()` / capacity is the busy ratio) and
//! `canopy_job_gpu_memory_bytes` (device memory: `vram` and `local*`
//! regions). Intel `xe`, which reports `drm-cycles-*` instead of
//! nanoseconds, gives memory only. The scan reads every fd link of every
//! process, so it runs every [`DEFAULT_SCAN_EVERY`] ticks, and never on a
//! node without a DRM render node.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::nvml::job_of_pid;
use crate::collect::probe::{DEFAULT_REPROBE_EVERY, Probe};
use crate::collect::{Collector, Observation};
use crate::error::LeafError;

/// Default: the `/proc` scan runs every this many ticks (values repeat in
/// between).
pub const DEFAULT_SCAN_EVERY: u32 = 10;
/// Processes looked at per scan at most.
const MAX_PROCS: usize = 65_536;
/// File descriptors looked at per process at most.
const MAX_FDS_PER_PROC: usize = 16_384;

/// One DRM client's stats from one fdinfo file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrmClient {
    /// `drm-driver` (`amdgpu`, `i915`, `xe`...).
    pub driver: String,
    /// `drm-pdev`, the PCI address, when printed.
    pub pdev: Option<String>,
    /// `drm-client-id`.
    pub client_id: u64,
    /// `drm-engine-<name>` busy time, nanoseconds, by engine name.
    pub engines_ns: BTreeMap<String, u64>,
    /// Device memory (regions `vram*`, `local*`), bytes: `drm-resident-*`
    /// when printed, else `drm-memory-*`.
    pub device_memory_bytes: Option<u64>,
}

/// Parses `<n> [KiB|MiB|GiB]` (no unit: bytes) into bytes.
fn parse_bytes(v: &str) -> Option<u64> {
    let mut f = v.split_whitespace();
    let n: u64 = f.next()?.parse().ok()?;
    let mul = match f.next() {
        None => 1,
        Some("KiB") => 1 << 10,
        Some("MiB") => 1 << 20,
        Some("GiB") => 1 << 30,
        Some(_) => return None,
    };
    n.checked_mul(mul)
}

fn is_device_region(region: &str) -> bool {
    region.starts_with("vram") || region.starts_with("local")
}

/// Parses one fdinfo file. `Ok(None)` when it is not a DRM client (no
/// `drm-driver`, or no `drm-client-id`).
pub fn parse_fdinfo(text: &str) -> Result<Option<DrmClient>, LeafError> {
    const FORMAT: &str = "drm fdinfo";
    let mut c = DrmClient::default();
    let (mut have_driver, mut have_id) = (false, false);
    let (mut resident, mut legacy): (Option<u64>, Option<u64>) = (None, None);
    for (i, line) in text.lines().enumerate() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        let bad = |what: &str| LeafError::parse(FORMAT, i + 1, format!("{k}: {what}: {v:?}"));
        if k == "drm-driver" {
            c.driver = v.to_string();
            have_driver = true;
        } else if k == "drm-pdev" {
            c.pdev = Some(v.to_string());
        } else if k == "drm-client-id" {
            c.client_id = v.parse().map_err(|_| bad("not a number"))?;
            have_id = true;
        } else if let Some(name) = k.strip_prefix("drm-engine-") {
            if name.starts_with("capacity-") {
                continue;
            }
            let ns = v
                .strip_suffix("ns")
                .and_then(|n| n.trim().parse::<u64>().ok())
                .ok_or_else(|| bad("not `<n> ns`"))?;
            c.engines_ns.insert(name.to_string(), ns);
        } else if let Some(region) = k.strip_prefix("drm-resident-") {
            if is_device_region(region) {
                let b = parse_bytes(v).ok_or_else(|| bad("not a size"))?;
                resident = Some(resident.unwrap_or(0).saturating_add(b));
            }
        } else if let Some(region) = k.strip_prefix("drm-memory-")
            && is_device_region(region)
        {
            let b = parse_bytes(v).ok_or_else(|| bad("not a size"))?;
            legacy = Some(legacy.unwrap_or(0).saturating_add(b));
        }
    }
    if !(have_driver && have_id) {
        return Ok(None);
    }
    c.device_memory_bytes = resident.or(legacy);
    Ok(Some(c))
}

/// The PCI slot of a DRM card from its `device/uevent` (`PCI_SLOT_NAME=`).
pub fn pci_slot_from_uevent(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("PCI_SLOT_NAME="))
        .map(|s| s.trim().to_string())
}

/// Whether an fd link target is a DRM device node.
pub fn is_drm_node(target: &Path) -> bool {
    target.parent() == Some(Path::new("/dev/dri"))
        && target
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("renderD") || n.starts_with("card"))
}

/// `(job_id, gpu)` -> totals of one job on one GPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobDrmUse {
    /// Busy nanoseconds by engine (closed clients included).
    pub engines_ns: BTreeMap<String, u64>,
    /// Device memory held by the job's live clients, bytes.
    pub memory_bytes: u64,
}

/// Client key: `(gpu, client id)`.
type ClientKey = (String, u64);

/// Per-job totals across scans: live clients plus what closed clients had.
#[derive(Clone, Debug, Default)]
pub struct DrmAccount {
    live: HashMap<ClientKey, (String, BTreeMap<String, u64>)>,
    closed: HashMap<(String, String), BTreeMap<String, u64>>,
    last: BTreeMap<(String, String), JobDrmUse>,
}

impl DrmAccount {
    /// A fresh account.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one scan: each client as `(job_id, gpu, client)`, a client
    /// possibly listed several times (shared fds). Returns the totals of
    /// every job with a live client; jobs without one are forgotten.
    pub fn update(
        &mut self,
        clients: &[(String, String, DrmClient)],
    ) -> BTreeMap<(String, String), JobDrmUse> {
        let mut now: HashMap<ClientKey, (String, BTreeMap<String, u64>)> = HashMap::new();
        let mut out: BTreeMap<(String, String), JobDrmUse> = BTreeMap::new();
        for (job, gpu, c) in clients {
            let key = (gpu.clone(), c.client_id);
            if now.contains_key(&key) {
                continue;
            }
            now.insert(key, (job.clone(), c.engines_ns.clone()));
            let u = out.entry((job.clone(), gpu.clone())).or_default();
            u.memory_bytes = u
                .memory_bytes
                .saturating_add(c.device_memory_bytes.unwrap_or(0));
        }
        // Clients gone since the last scan: their time stays with the job.
        for ((gpu, id), (job, engines)) in &self.live {
            if !now.contains_key(&(gpu.clone(), *id)) {
                let t = self.closed.entry((job.clone(), gpu.clone())).or_default();
                for (e, ns) in engines {
                    *t.entry(e.clone()).or_default() += ns;
                }
            }
        }
        self.live = now;
        for ((gpu, _), (job, engines)) in &self.live {
            let u = out.entry((job.clone(), gpu.clone())).or_default();
            for (e, ns) in engines {
                *u.engines_ns.entry(e.clone()).or_default() += ns;
            }
        }
        for (k, u) in out.iter_mut() {
            if let Some(c) = self.closed.get(k) {
                for (e, ns) in c {
                    *u.engines_ns.entry(e.clone()).or_default() += ns;
                }
            }
            // Never below the last report (a client read mid-close).
            if let Some(prev) = self.last.get(k) {
                for (e, ns) in &prev.engines_ns {
                    let v = u.engines_ns.entry(e.clone()).or_default();
                    *v = (*v).max(*ns);
                }
            }
        }
        self.closed.retain(|k, _| out.contains_key(k));
        self.last = out.clone();
        out
    }
}

/// Appends the per-job series of one scan.
pub fn observations(
    node: &str,
    jobs: &BTreeMap<(String, String), JobDrmUse>,
    out: &mut Vec<Observation>,
) {
    for ((job, gpu), u) in jobs {
        for (engine, ns) in &u.engines_ns {
            out.push(Observation::counter(
                "canopy_job_gpu_engine_busy_seconds_total",
                node,
                &[("job_id", job), ("gpu", gpu), ("engine", engine)],
                *ns as f64 / 1e9,
            ));
        }
        out.push(Observation::gauge(
            "canopy_job_gpu_memory_bytes",
            node,
            &[("job_id", job), ("gpu", gpu)],
            u.memory_bytes as f64,
        ));
    }
}

/// Reads DRM fdinfo of every process; see the module docs.
#[derive(Debug)]
pub struct DrmFdinfoCollector {
    node: String,
    proc_root: PathBuf,
    drm_class: PathBuf,
    probe: Probe,
    account: DrmAccount,
    last: BTreeMap<(String, String), JobDrmUse>,
    scan_every: u32,
    tick: u64,
    errors: u64,
}

impl DrmFdinfoCollector {
    /// A collector for `node` reading `proc_root` and
    /// `<sys_root>/class/drm`.
    pub fn new(node: &str, proc_root: &Path, sys_root: &Path) -> Self {
        DrmFdinfoCollector {
            node: node.to_string(),
            proc_root: proc_root.to_path_buf(),
            drm_class: sys_root.join("class").join("drm"),
            probe: Probe::new("DRM GPU (fdinfo)", DEFAULT_REPROBE_EVERY),
            account: DrmAccount::new(),
            last: BTreeMap::new(),
            scan_every: DEFAULT_SCAN_EVERY,
            tick: 0,
            errors: 0,
        }
    }

    /// Scans every `n` ticks (at least 1).
    pub fn scan_every(mut self, n: u32) -> Self {
        self.scan_every = n.max(1);
        self
    }

    /// The back-off state.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// PCI slot -> card name, from the DRM class directory.
    fn cards(&self) -> HashMap<String, String> {
        let Ok(rd) = std::fs::read_dir(&self.drm_class) else {
            return HashMap::new();
        };
        rd.filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                super::amd::is_card(&name).then_some(())?;
                let ue = std::fs::read_to_string(e.path().join("device/uevent")).ok()?;
                Some((pci_slot_from_uevent(&ue)?, name))
            })
            .collect()
    }

    fn has_render_node(&self) -> bool {
        std::fs::read_dir(&self.drm_class).is_ok_and(|rd| {
            rd.filter_map(|e| e.ok()).any(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with("renderD") || super::amd::is_card(n))
            })
        })
    }

    /// Every DRM client of every process, with the process's job.
    fn scan(&mut self) -> Vec<(String, String, DrmClient)> {
        let cards = self.cards();
        let mut found = Vec::new();
        let Ok(rd) = std::fs::read_dir(&self.proc_root) else {
            return found;
        };
        let pids = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .take(MAX_PROCS);
        for pid in pids {
            let dir = self.proc_root.join(pid.to_string());
            // A process that exits mid-scan simply has no fds any more.
            let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
                continue;
            };
            let mut job = None;
            for fd in fds.filter_map(|e| e.ok()).take(MAX_FDS_PER_PROC) {
                let Ok(target) = std::fs::read_link(fd.path()) else {
                    continue;
                };
                if !is_drm_node(&target) {
                    continue;
                }
                let info = dir.join("fdinfo").join(fd.file_name());
                let Ok(text) = std::fs::read_to_string(&info) else {
                    continue;
                };
                let c = match parse_fdinfo(&text) {
                    Ok(Some(c)) => c,
                    Ok(None) => continue,
                    Err(e) => {
                        self.errors += 1;
                        tracing::debug!(error = %e, "drm fdinfo not understood");
                        continue;
                    }
                };
                let gpu = c
                    .pdev
                    .as_ref()
                    .map(|p| cards.get(p).cloned().unwrap_or_else(|| p.clone()))
                    .unwrap_or_else(|| c.driver.clone());
                let job = job
                    .get_or_insert_with(|| job_of_pid(&self.proc_root, pid).unwrap_or_default())
                    .clone();
                found.push((job, gpu, c));
            }
        }
        found
    }
}

impl Collector for DrmFdinfoCollector {
    fn name(&self) -> &'static str {
        "gpu_drm_fdinfo"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        let due = self.tick.is_multiple_of(u64::from(self.scan_every));
        self.tick += 1;
        if due {
            if self.last.is_empty() && !self.probe.should_try() {
                return Ok(());
            }
            if !self.has_render_node() {
                self.last.clear();
                self.probe
                    .missing(&"no DRM device in the drm class directory");
                return Ok(());
            }
            self.probe.found();
            let clients = self.scan();
            self.last = self.account.update(&clients);
        }
        observations(&self.node, &self.last, out);
        if self.errors > 0 {
            out.push(Observation::counter(
                "canopy_leaf_collector_errors_total",
                &self.node,
                &[("collector", "gpu_drm_fdinfo"), ("kind", "parse")],
                self.errors as f64,
            ));
        }
        Ok(())
    }
}
