//! InfiniBand (and Omni-Path, RoCE) port counters from
//! `/sys/class/infiniband/<device>/ports/<port>/counters/`.
//!
//! Each counter is one file holding one decimal number. `port_rcv_data` and
//! `port_xmit_data` count 4-byte words (the IBA PortCounters definition: octets
//! divided by 4), so they are multiplied by 4 here. A counter the adapter
//! cannot read holds text such as `N/A (no PMA)` and is skipped. The port's
//! `state` file reads e.g. `4: ACTIVE`.
//!
//! Metrics (labels `device`, `port`): counters
//! `canopy_node_infiniband_{receive,transmit}_bytes_total`,
//! `canopy_node_infiniband_{receive,transmit}_packets_total`,
//! `canopy_node_infiniband_receive_errors_total`,
//! `canopy_node_infiniband_transmit_discards_total`,
//! `canopy_node_infiniband_link_downed_total`; gauge
//! `canopy_node_infiniband_port_state` (the IB state number, 4 = ACTIVE).

use std::path::{Path, PathBuf};

use super::probe::{DEFAULT_REPROBE_EVERY, Probe};
use super::{Collector, Observation};
use crate::error::LeafError;

/// The counters of one port, in exported units (bytes, packets, events).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IbPort {
    /// HCA name, e.g. `mlx5_0`.
    pub device: String,
    /// Port number, e.g. `1`.
    pub port: String,
    /// Bytes received (`port_rcv_data` x 4).
    pub rx_bytes: Option<u64>,
    /// Bytes transmitted (`port_xmit_data` x 4).
    pub tx_bytes: Option<u64>,
    /// `port_rcv_packets`.
    pub rx_packets: Option<u64>,
    /// `port_xmit_packets`.
    pub tx_packets: Option<u64>,
    /// `port_rcv_errors`.
    pub rx_errors: Option<u64>,
    /// `port_xmit_discards`.
    pub tx_discards: Option<u64>,
    /// `link_downed`.
    pub link_downed: Option<u64>,
    /// The number before the colon in `state` (4 = ACTIVE).
    pub state: Option<u64>,
}

/// Parses one counter file: a decimal number, or `None` for `N/A (...)` and
/// anything else that is not a number.
pub fn parse_counter(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Parses a port `state` file (`4: ACTIVE`) to its number.
pub fn parse_state(text: &str) -> Option<u64> {
    text.split(':').next()?.trim().parse().ok()
}

/// Builds a port from its counter files (`(file name, contents)`) and the
/// contents of its `state` file.
pub fn parse_port(
    device: &str,
    port: &str,
    counters: &[(String, String)],
    state: Option<&str>,
) -> IbPort {
    let get = |name: &str| {
        counters
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, t)| parse_counter(t))
    };
    IbPort {
        device: device.to_string(),
        port: port.to_string(),
        rx_bytes: get("port_rcv_data").map(|w| w.saturating_mul(4)),
        tx_bytes: get("port_xmit_data").map(|w| w.saturating_mul(4)),
        rx_packets: get("port_rcv_packets"),
        tx_packets: get("port_xmit_packets"),
        rx_errors: get("port_rcv_errors"),
        tx_discards: get("port_xmit_discards"),
        link_downed: get("link_downed"),
        state: state.and_then(parse_state),
    }
}

/// Appends the observations of one port.
pub fn observations(node: &str, p: &IbPort, out: &mut Vec<Observation>) {
    let l = [("device", p.device.as_str()), ("port", p.port.as_str())];
    let counters = [
        ("canopy_node_infiniband_receive_bytes_total", p.rx_bytes),
        ("canopy_node_infiniband_transmit_bytes_total", p.tx_bytes),
        ("canopy_node_infiniband_receive_packets_total", p.rx_packets),
        (
            "canopy_node_infiniband_transmit_packets_total",
            p.tx_packets,
        ),
        ("canopy_node_infiniband_receive_errors_total", p.rx_errors),
        (
            "canopy_node_infiniband_transmit_discards_total",
            p.tx_discards,
        ),
        ("canopy_node_infiniband_link_downed_total", p.link_downed),
    ];
    for (name, v) in counters {
        if let Some(v) = v {
            out.push(Observation::counter(name, node, &l, v as f64));
        }
    }
    if let Some(s) = p.state {
        out.push(Observation::gauge(
            "canopy_node_infiniband_port_state",
            node,
            &l,
            s as f64,
        ));
    }
}

/// Sorted entry names of a directory (empty when unreadable).
fn names(dir: &Path) -> Vec<String> {
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

/// Reads every port of every device under `root` (the infiniband class dir).
pub fn read_ports(root: &Path) -> Result<Vec<IbPort>, LeafError> {
    std::fs::metadata(root).map_err(|e| LeafError::io(root, e))?;
    let mut ports = Vec::new();
    for dev in names(root) {
        let pdir = root.join(&dev).join("ports");
        for port in names(&pdir) {
            let cdir = pdir.join(&port).join("counters");
            let counters: Vec<(String, String)> = names(&cdir)
                .into_iter()
                .filter_map(|n| {
                    let t = std::fs::read_to_string(cdir.join(&n)).ok()?;
                    Some((n, t))
                })
                .collect();
            let state = std::fs::read_to_string(pdir.join(&port).join("state")).ok();
            ports.push(parse_port(&dev, &port, &counters, state.as_deref()));
        }
    }
    Ok(ports)
}

/// Reads the InfiniBand port counters each tick.
#[derive(Debug)]
pub struct InfinibandCollector {
    node: String,
    root: PathBuf,
    probe: Probe,
}

impl InfinibandCollector {
    /// A collector for `node` reading `<sys_root>/class/infiniband`.
    pub fn new(node: &str, sys_root: &Path) -> Self {
        Self::with_root(node, &sys_root.join("class").join("infiniband"))
    }

    /// A collector reading the infiniband class directory `root` directly.
    pub fn with_root(node: &str, root: &Path) -> Self {
        InfinibandCollector {
            node: node.to_string(),
            root: root.to_path_buf(),
            probe: Probe::new("infiniband", DEFAULT_REPROBE_EVERY),
        }
    }

    /// The back-off state (for tests and self-metrics).
    pub fn probe(&self) -> &Probe {
        &self.probe
    }
}

impl Collector for InfinibandCollector {
    fn name(&self) -> &'static str {
        "infiniband"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        if !self.probe.should_try() {
            return Ok(());
        }
        match read_ports(&self.root) {
            Ok(ports) if !ports.is_empty() => {
                self.probe.found();
                for p in &ports {
                    observations(&self.node, p, out);
                }
            }
            Ok(_) => self.probe.missing(&"no InfiniBand port"),
            Err(e) => self.probe.missing(&e),
        }
        Ok(())
    }
}
