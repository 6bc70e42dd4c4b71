//! AMD GPUs through the `amdgpu` sysfs files of
//! `/sys/class/drm/card<N>/device/`: `gpu_busy_percent` (0-100),
//! `mem_info_vram_used` and `mem_info_vram_total` (bytes), and the card's
//! hwmon chip `hwmon/hwmon<M>/` with `power1_average` (microwatts; newer
//! kernels on some boards give `power1_input` instead) and `temp1_input`
//! (millidegrees, the `edge` sensor).

use std::path::{Path, PathBuf};

use super::{GpuSample, node_observations};
use crate::collect::probe::{DEFAULT_REPROBE_EVERY, Probe};
use crate::collect::{Collector, Observation};
use crate::error::LeafError;

/// The text of the amdgpu files of one card (`None` where absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AmdCardFiles {
    /// `device/gpu_busy_percent`.
    pub gpu_busy_percent: Option<String>,
    /// `device/mem_info_vram_used`.
    pub vram_used: Option<String>,
    /// `device/mem_info_vram_total`.
    pub vram_total: Option<String>,
    /// hwmon `power1_average`.
    pub power1_average: Option<String>,
    /// hwmon `power1_input`.
    pub power1_input: Option<String>,
    /// hwmon `temp1_input`.
    pub temp1_input: Option<String>,
}

fn num(t: &Option<String>) -> Option<u64> {
    t.as_deref()?.trim().parse().ok()
}

/// Turns one card's files into a sample labelled `gpu` (e.g. `card0`).
/// Values that are missing or not numbers are left out.
pub fn parse_card(gpu: &str, f: &AmdCardFiles) -> GpuSample {
    GpuSample {
        gpu: gpu.to_string(),
        sm_utilization: None,
        busy: num(&f.gpu_busy_percent).map(|p| (p.min(100) as f64) / 100.0),
        memory_used_bytes: num(&f.vram_used),
        memory_total_bytes: num(&f.vram_total),
        power_watts: num(&f.power1_average)
            .or_else(|| num(&f.power1_input))
            .map(|uw| uw as f64 / 1e6),
        temperature_celsius: f
            .temp1_input
            .as_deref()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .map(|m| m as f64 / 1e3),
    }
}

/// Whether a `/sys/class/drm` entry is a card (`card0`), not a connector
/// (`card0-DP-1`) or a render node.
pub fn is_card(name: &str) -> bool {
    name.strip_prefix("card")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn read_opt(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

/// Reads the files of the card at `card_dir` (`.../drm/card0`), or `None`
/// when it is not an amdgpu card (no `gpu_busy_percent`).
pub fn read_card(card_dir: &Path) -> Option<AmdCardFiles> {
    let dev = card_dir.join("device");
    let busy = read_opt(&dev.join("gpu_busy_percent"))?;
    let hwmon = std::fs::read_dir(dev.join("hwmon"))
        .ok()
        .and_then(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).min());
    let h = |f: &str| hwmon.as_ref().and_then(|d| read_opt(&d.join(f)));
    Some(AmdCardFiles {
        gpu_busy_percent: Some(busy),
        vram_used: read_opt(&dev.join("mem_info_vram_used")),
        vram_total: read_opt(&dev.join("mem_info_vram_total")),
        power1_average: h("power1_average"),
        power1_input: h("power1_input"),
        temp1_input: h("temp1_input"),
    })
}

/// Reads every amdgpu card under the DRM class directory each tick.
#[derive(Debug)]
pub struct AmdGpuCollector {
    node: String,
    root: PathBuf,
    probe: Probe,
}

impl AmdGpuCollector {
    /// A collector for `node` reading `<sys_root>/class/drm`.
    pub fn new(node: &str, sys_root: &Path) -> Self {
        Self::with_root(node, &sys_root.join("class").join("drm"))
    }

    /// A collector reading the DRM class directory `root` directly.
    pub fn with_root(node: &str, root: &Path) -> Self {
        AmdGpuCollector {
            node: node.to_string(),
            root: root.to_path_buf(),
            probe: Probe::new("amdgpu", DEFAULT_REPROBE_EVERY),
        }
    }

    /// The back-off state (for tests and self-metrics).
    pub fn probe(&self) -> &Probe {
        &self.probe
    }
}

impl Collector for AmdGpuCollector {
    fn name(&self) -> &'static str {
        "gpu_amd"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if !self.probe.should_try() {
            return Ok(());
        }
        let mut cards: Vec<String> = std::fs::read_dir(&self.root)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| is_card(n))
                    .collect()
            })
            .unwrap_or_default();
        cards.sort();
        let samples: Vec<GpuSample> = cards
            .iter()
            .filter_map(|c| read_card(&self.root.join(c)).map(|f| parse_card(c, &f)))
            .collect();
        if samples.is_empty() {
            self.probe.missing(&"no amdgpu card");
            return Ok(());
        }
        self.probe.found();
        node_observations(&self.node, &samples, out);
        Ok(())
    }
}
