//! A synthetic counter: `canopy_synthetic_ticks_total{node}`, +1 per collect.
//!
//! Useful to check end to end that every tick of a leaf arrives (the value at
//! the root equals the number of ticks the leaf ran).

use super::{Collector, Observation};
use crate::error::LeafError;

/// Counts its own `collect` calls.
#[derive(Clone, Debug)]
pub struct SyntheticTicks {
    node: String,
    ticks: u64,
}

impl SyntheticTicks {
    /// A tick counter for `node`, starting at 0 (the first collect reports 1).
    pub fn new(node: &str) -> Self {
        SyntheticTicks {
            node: node.to_string(),
            ticks: 0,
        }
    }
}

impl Collector for SyntheticTicks {
    fn name(&self) -> &'static str {
        "synthetic_ticks"
    }

    fn collect(&mut self, out: &mut Vec<Observation>) -> Result<(), LeafError> {
        self.ticks += 1;
        out.push(Observation::counter(
            "canopy_synthetic_ticks_total",
            &self.node,
            &[],
            self.ticks as f64,
        ));
        Ok(())
    }
}
