//! A trace made by the node simulator, for benches and tests that must run
//! without the reference traces.

use canopy_leaf::{Collector, SimNode};

use crate::trace::Scrape;

/// `scrapes` one-second scrapes of one simulated node.
pub fn generate(node: &str, scrapes: usize) -> Vec<Scrape> {
    let mut sim = SimNode::new(node, 7, 32);
    let t0: i64 = 1_800_000_000_000;
    let mut out = Vec::with_capacity(scrapes);
    let mut obs = Vec::new();
    for i in 0..scrapes {
        let ts = t0 + i as i64 * 1000;
        sim.advance(ts);
        obs.clear();
        // The simulator's collect never fails; an error leaves an empty scrape.
        let _ = sim.collect(&mut obs);
        out.push(Scrape {
            ts_ms: ts,
            samples: obs
                .iter()
                .map(|o| (o.labels.clone(), o.kind, o.value))
                .collect(),
        });
    }
    out
}
