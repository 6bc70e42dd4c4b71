//! hwmon sensors (`/sys/class/hwmon/hwmon<N>/`), as described in the kernel's
//! `Documentation/hwmon/sysfs-interface.rst`: `name` is the chip,
//! `temp<i>_input` is millidegrees Celsius, `power<i>_average` and
//! `power<i>_input` are microwatts, `<type><i>_label` names a channel.
//!
//! Metrics (gauges, label `sensor` = `<chip>/<channel label>`):
//! `canopy_node_temperature_celsius`, `canopy_node_power_watts`. A chip name
//! that appears twice (two `coretemp` sockets) gets its directory appended
//! (`coretemp.hwmon3`) so series stay apart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::probe::{DEFAULT_REPROBE_EVERY, Probe};
use super::{Collector, Observation};
use crate::error::LeafError;

/// What a hwmon channel measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SensorKind {
    /// `temp<i>_input`, exported in degrees Celsius.
    Temperature,
    /// `power<i>_average` (preferred) or `power<i>_input`, exported in watts.
    Power,
}

/// One channel reading of one chip.
#[derive(Clone, Debug, PartialEq)]
pub struct HwmonReading {
    /// Temperature or power.
    pub kind: SensorKind,
    /// The channel label (`Package id 0`, `edge`), or `temp1` when unlabelled.
    pub label: String,
    /// In the exported unit (°C or W).
    pub value: f64,
}

/// Splits `temp12_input` into (`temp`, 12, `input`).
fn split_attr(file: &str) -> Option<(&str, u32, &str)> {
    let (head, item) = file.split_once('_')?;
    let digits = head.find(|c: char| c.is_ascii_digit())?;
    let (ty, idx) = head.split_at(digits);
    Some((ty, idx.parse().ok()?, item))
}

/// Turns the attribute files of one hwmon chip directory (`(file name,
/// contents)`) into readings. Unreadable or non-numeric values are skipped,
/// as are channels other than temperature and power.
pub fn parse_chip(files: &[(String, String)]) -> Vec<HwmonReading> {
    let by_name: HashMap<&str, &str> = files.iter().map(|(n, c)| (n.as_str(), c.trim())).collect();
    let mut chans: Vec<(SensorKind, &str, u32)> = Vec::new();
    for (file, _) in files {
        let Some((ty, idx, item)) = split_attr(file) else {
            continue;
        };
        let kind = match (ty, item) {
            ("temp", "input") => SensorKind::Temperature,
            ("power", "average") | ("power", "input") => SensorKind::Power,
            _ => continue,
        };
        if !chans.iter().any(|c| c.0 == kind && c.2 == idx) {
            chans.push((kind, ty, idx));
        }
    }
    chans.sort_by_key(|c| (c.0, c.2));
    let mut out = Vec::with_capacity(chans.len());
    for (kind, ty, idx) in chans {
        let raw = match kind {
            SensorKind::Temperature => by_name.get(format!("temp{idx}_input").as_str()),
            SensorKind::Power => by_name
                .get(format!("power{idx}_average").as_str())
                .or_else(|| by_name.get(format!("power{idx}_input").as_str())),
        };
        let Some(v) = raw.and_then(|t| t.parse::<i64>().ok()) else {
            continue;
        };
        let value = match kind {
            SensorKind::Temperature => v as f64 / 1e3,
            SensorKind::Power => v as f64 / 1e6,
        };
        let label = by_name
            .get(format!("{ty}{idx}_label").as_str())
            .filter(|l| !l.is_empty())
            .map_or_else(|| format!("{ty}{idx}"), |l| l.to_string());
        out.push(HwmonReading { kind, label, value });
    }
    out
}

/// The chip part of the `sensor` label for each `(directory, name)`: the
/// name, or `<name>.<directory>` when two chips share a name.
pub fn chip_ids(chips: &[(String, String)]) -> Vec<String> {
    chips
        .iter()
        .map(|(dir, name)| {
            let dup = chips.iter().filter(|(_, n)| n == name).count() > 1;
            if dup {
                format!("{name}.{dir}")
            } else {
                name.clone()
            }
        })
        .collect()
}

/// Appends the observations of one chip.
pub fn observations(node: &str, chip: &str, readings: &[HwmonReading], out: &mut Vec<Observation>) {
    for r in readings {
        let sensor = format!("{chip}/{}", r.label);
        let name = match r.kind {
            SensorKind::Temperature => "canopy_node_temperature_celsius",
            SensorKind::Power => "canopy_node_power_watts",
        };
        out.push(Observation::gauge(
            name,
            node,
            &[("sensor", &sensor)],
            r.value,
        ));
    }
}

/// Reads the attribute files of one chip: in `hwmon<N>/`, or in
/// `hwmon<N>/device/` for drivers that predate the hwmon class attributes.
fn read_chip(dir: &Path) -> Vec<(String, String)> {
    let files = read_chip_files(dir);
    if files.iter().any(|(n, _)| n == "name") {
        files
    } else {
        read_chip_files(&dir.join("device"))
    }
}

/// Reads the attribute files of one directory (small files only).
fn read_chip_files(dir: &Path) -> Vec<(String, String)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let n = e.file_name().to_string_lossy().into_owned();
        let wanted = n == "name"
            || ((n.starts_with("temp") || n.starts_with("power"))
                && (n.ends_with("_input") || n.ends_with("_average") || n.ends_with("_label")));
        if !wanted {
            continue;
        }
        // A sensor that fails to read (EIO, ENODATA) is skipped, not fatal.
        if let Ok(t) = std::fs::read_to_string(e.path()) {
            files.push((n, t));
        }
    }
    files
}

/// Reads every chip under the hwmon class directory each tick.
#[derive(Debug)]
pub struct HwmonCollector {
    node: String,
    root: PathBuf,
    probe: Probe,
}

impl HwmonCollector {
    /// A collector for `node` reading `<sys_root>/class/hwmon`.
    pub fn new(node: &str, sys_root: &Path) -> Self {
        Self::with_root(node, &sys_root.join("class").join("hwmon"))
    }

    /// A collector reading the hwmon class directory `root` directly.
    pub fn with_root(node: &str, root: &Path) -> Self {
        HwmonCollector {
            node: node.to_string(),
            root: root.to_path_buf(),
            probe: Probe::new("hwmon", DEFAULT_REPROBE_EVERY),
        }
    }

    /// The back-off state (for tests and self-metrics).
    pub fn probe(&self) -> &Probe {
        &self.probe
    }
}

impl Collector for HwmonCollector {
    fn name(&self) -> &'static str {
        "hwmon"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if !self.probe.should_try() {
            return Ok(());
        }
        let mut chips: Vec<(String, Vec<(String, String)>)> = match std::fs::read_dir(&self.root) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| {
                    let dir = e.file_name().to_string_lossy().into_owned();
                    (dir, read_chip(&e.path()))
                })
                .filter(|(_, f)| f.iter().any(|(n, _)| n == "name"))
                .collect(),
            Err(e) => {
                self.probe.missing(&LeafError::io(&self.root, e));
                return Ok(());
            }
        };
        if chips.is_empty() {
            self.probe.missing(&"no hwmon chip");
            return Ok(());
        }
        self.probe.found();
        chips.sort_by(|a, b| a.0.cmp(&b.0));
        let names: Vec<(String, String)> = chips
            .iter()
            .map(|(dir, files)| {
                let name = files
                    .iter()
                    .find(|(n, _)| n == "name")
                    .map(|(_, c)| c.trim().to_string())
                    .unwrap_or_default();
                (dir.clone(), name)
            })
            .collect();
        for ((_, files), chip) in chips.iter().zip(chip_ids(&names)) {
            observations(&self.node, &chip, &parse_chip(files), out);
        }
        Ok(())
    }
}
