//! RAPL energy counters from the powercap class (`/sys/class/powercap`).
//!
//! Each zone directory `intel-rapl:<p>` (a package) and `intel-rapl:<p>:<s>`
//! (a sub-zone: `core`, `uncore`, `dram`) holds `name`, `energy_uj` (a
//! counter in microjoules that wraps at `max_energy_range_uj`) and
//! `max_energy_range_uj`. AMD processors appear under the same driver name.
//! `intel-rapl-mmio:*` zones repeat the package counter through another
//! interface and are skipped. Since Linux 5.10 `energy_uj` is readable by
//! root only.
//!
//! Metric (counter, label `zone`, e.g. `package-0`, `package-0/dram`):
//! `canopy_node_energy_joules_total`, kept monotonic across hardware wraps.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::probe::{DEFAULT_REPROBE_EVERY, Probe};
use super::{Collector, Observation, read_text};
use crate::error::LeafError;

const FORMAT: &str = "powercap energy_uj";

/// Parses a powercap number file (`energy_uj`, `max_energy_range_uj`).
pub fn parse_uj(text: &str) -> Result<u64, LeafError> {
    let t = text.trim();
    t.parse()
        .map_err(|_| LeafError::parse(FORMAT, 1, format!("not a number: {t:?}")))
}

/// The `zone` label of a powercap directory: the zone's `name` for a
/// package (`package-0`), `<package name>/<name>` for a sub-zone
/// (`package-0/dram`), so names repeated across packages stay apart.
pub fn zone_label(name: &str, parent_name: Option<&str>) -> String {
    match parent_name {
        Some(p) => format!("{p}/{name}"),
        None => name.to_string(),
    }
}

/// The parent zone directory of a sub-zone directory name
/// (`intel-rapl:0:1` -> `intel-rapl:0`), `None` for a package zone.
pub fn parent_dir(dir: &str) -> Option<&str> {
    let rest = dir.strip_prefix("intel-rapl:")?;
    let (p, _) = rest.split_once(':')?;
    Some(&dir[..("intel-rapl:".len() + p.len())])
}

/// A hardware energy counter made monotonic: the hardware register wraps to
/// zero after `max_energy_range_uj`; each wrap adds the range back.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WrappingEnergy {
    last_uj: Option<u64>,
    total_uj: u128,
}

impl WrappingEnergy {
    /// Feeds one raw reading and returns the monotonic total in joules.
    ///
    /// The first reading starts the total at the raw value. A reading below
    /// the previous one is a wrap: the delta is `max - last + raw`. When
    /// `max_uj` is unknown (0) or the last reading exceeded it, the counter is
    /// taken as reset and the delta is `raw`: the total never goes down.
    pub fn update(&mut self, raw_uj: u64, max_uj: u64) -> f64 {
        let delta = match self.last_uj {
            None => raw_uj,
            Some(last) if raw_uj >= last => raw_uj - last,
            Some(last) if max_uj >= last => max_uj - last + raw_uj,
            Some(_) => raw_uj,
        };
        self.last_uj = Some(raw_uj);
        self.total_uj += u128::from(delta);
        self.total_uj as f64 / 1e6
    }
}

/// One zone as read from sysfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaplZone {
    /// Directory name, e.g. `intel-rapl:0:1`.
    pub dir: String,
    /// The `zone` label (see [`zone_label`]).
    pub zone: String,
    /// `energy_uj`.
    pub energy_uj: u64,
    /// `max_energy_range_uj` (0 when unreadable).
    pub max_energy_range_uj: u64,
}

/// Reads every RAPL zone under `root` (the powercap class directory).
/// Returns an empty list when there is no zone; an error when a zone exists
/// but its counter cannot be read (typically: not root).
pub fn read_zones(root: &Path) -> Result<Vec<RaplZone>, LeafError> {
    let entries = std::fs::read_dir(root).map_err(|e| LeafError::io(root, e))?;
    let mut dirs: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("intel-rapl:"))
        .collect();
    dirs.sort();
    let name_of = |dir: &str| -> Result<String, LeafError> {
        Ok(read_text(&root.join(dir).join("name"))?.trim().to_string())
    };
    let mut zones = Vec::with_capacity(dirs.len());
    for dir in &dirs {
        let name = name_of(dir)?;
        let parent = match parent_dir(dir) {
            Some(p) => Some(name_of(p)?),
            None => None,
        };
        let energy_uj = parse_uj(&read_text(&root.join(dir).join("energy_uj"))?)?;
        let max = read_text(&root.join(dir).join("max_energy_range_uj"))
            .and_then(|t| parse_uj(&t))
            .unwrap_or(0);
        zones.push(RaplZone {
            dir: dir.clone(),
            zone: zone_label(&name, parent.as_deref()),
            energy_uj,
            max_energy_range_uj: max,
        });
    }
    Ok(zones)
}

/// Node energy over the tick from zone totals (joules): `psys` (the whole
/// platform) when the machine has it, else the packages plus `dram` (DRAM is
/// not part of the package domain; `core` and `uncore` are, so they are not
/// added).
pub fn node_energy_joules(zone_totals: &[(String, f64)]) -> Option<f64> {
    let leaf = |z: &str| z.rsplit('/').next().unwrap_or(z).to_string();
    let psys: f64 = zone_totals
        .iter()
        .filter(|(z, _)| leaf(z).starts_with("psys"))
        .map(|(_, v)| v)
        .sum();
    if zone_totals.iter().any(|(z, _)| leaf(z).starts_with("psys")) {
        return Some(psys);
    }
    let parts: Vec<f64> = zone_totals
        .iter()
        .filter(|(z, _)| {
            let l = leaf(z);
            l.starts_with("package") || l == "dram"
        })
        .map(|(_, v)| *v)
        .collect();
    (!parts.is_empty()).then(|| parts.iter().sum())
}

/// Reads the RAPL zones under the powercap class directory each tick.
#[derive(Debug)]
pub struct RaplCollector {
    node: String,
    root: PathBuf,
    probe: Probe,
    counters: HashMap<String, WrappingEnergy>,
}

impl RaplCollector {
    /// A collector for `node` reading `<sys_root>/class/powercap`.
    pub fn new(node: &str, sys_root: &Path) -> Self {
        Self::with_root(node, &sys_root.join("class").join("powercap"))
    }

    /// A collector reading the powercap class directory `root` directly.
    pub fn with_root(node: &str, root: &Path) -> Self {
        RaplCollector {
            node: node.to_string(),
            root: root.to_path_buf(),
            probe: Probe::new("rapl", DEFAULT_REPROBE_EVERY),
            counters: HashMap::new(),
        }
    }

    /// The back-off state (for tests and self-metrics).
    pub fn probe(&self) -> &Probe {
        &self.probe
    }
}

impl Collector for RaplCollector {
    fn name(&self) -> &'static str {
        "rapl"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if !self.probe.should_try() {
            return Ok(());
        }
        let zones = match read_zones(&self.root) {
            Ok(z) if !z.is_empty() => z,
            Ok(_) => {
                self.probe.missing(&"no intel-rapl zone under powercap");
                return Ok(());
            }
            Err(e) => {
                self.probe.missing(&e);
                return Ok(());
            }
        };
        self.probe.found();
        for z in zones {
            let c = self.counters.entry(z.dir.clone()).or_default();
            let joules = c.update(z.energy_uj, z.max_energy_range_uj);
            out.push(Observation::counter(
                "canopy_node_energy_joules_total",
                &self.node,
                &[("zone", &z.zone)],
                joules,
            ));
        }
        Ok(())
    }
}
