//! `/proc/net/dev`: per-interface traffic, loopback excluded.
//!
//! Metrics (counters, label `device`): `canopy_node_network_receive_bytes_total`,
//! `canopy_node_network_transmit_bytes_total`,
//! `canopy_node_network_receive_packets_total`,
//! `canopy_node_network_transmit_packets_total`.

use std::path::Path;

use super::hot_file::HotFile;
use super::{Collector, Emit, Observation, SeriesCache, Sink, field, split_cols};
use crate::error::LeafError;

const FORMAT: &str = "/proc/net/dev";

/// Counters of one interface from `/proc/net/dev`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetDevStats {
    /// Interface name, e.g. `eth0`, `ib0`.
    pub device: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
}

/// Parses the text of `/proc/net/dev`: two header lines (they contain `|`),
/// then `name: rx(8 columns) tx(8 columns)`. Large counters can touch the
/// colon (`eth0:18446744073709551000`), so the split is on the colon, not on
/// whitespace. Every interface is returned, `lo` included.
pub fn parse_net_dev(text: &str) -> Result<Vec<NetDevStats>, LeafError> {
    let mut devs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.contains('|') || line.trim().is_empty() {
            continue;
        }
        let Some((name, rest)) = line.rsplit_once(':') else {
            return Err(LeafError::parse(
                FORMAT,
                n,
                "no ':' after the interface name",
            ));
        };
        let mut cols = [""; 10];
        let count = split_cols(rest, &mut cols);
        if count < 10 {
            return Err(LeafError::parse(
                FORMAT,
                n,
                format!("{count} columns, want at least 10"),
            ));
        }
        let col = |i: usize, what: &str| field::<u64>(FORMAT, n, what, cols.get(i).copied());
        devs.push(NetDevStats {
            device: name.trim().to_string(),
            rx_bytes: col(0, "receive bytes")?,
            rx_packets: col(1, "receive packets")?,
            tx_bytes: col(8, "transmit bytes")?,
            tx_packets: col(9, "transmit packets")?,
        });
    }
    Ok(devs)
}

/// Appends the observations for parsed `/proc/net/dev`, skipping `lo`.
pub fn observations(node: &str, devs: &[NetDevStats], out: &mut impl Emit) {
    for d in devs.iter().filter(|d| d.device != "lo") {
        let l = [("device", d.device.as_str())];
        let series = [
            ("canopy_node_network_receive_bytes_total", d.rx_bytes),
            ("canopy_node_network_transmit_bytes_total", d.tx_bytes),
            ("canopy_node_network_receive_packets_total", d.rx_packets),
            ("canopy_node_network_transmit_packets_total", d.tx_packets),
        ];
        for (name, v) in series {
            out.counter(name, node, &l, v as f64);
        }
    }
}

/// Reads `<proc_root>/net/dev` each tick.
#[derive(Debug)]
pub struct NetDevCollector {
    node: String,
    file: HotFile,
    /// Label sets and keys of the last tick's series.
    series: SeriesCache,
}

impl NetDevCollector {
    /// A collector for `node` reading `<proc_root>/net/dev`.
    pub fn new(node: &str, proc_root: &Path) -> Self {
        NetDevCollector {
            node: node.to_string(),
            file: HotFile::lines(proc_root.join("net").join("dev")),
            series: SeriesCache::new(),
        }
    }
}

impl Collector for NetDevCollector {
    fn name(&self) -> &'static str {
        "proc_net_dev"
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

impl NetDevCollector {
    /// One tick's series into `out`.
    fn report(&mut self, out: &mut impl Emit) -> Result<(), LeafError> {
        let devs = parse_net_dev(self.file.read()?)?;
        observations(&self.node, &devs, out);
        Ok(())
    }
}
