//! `canopy-node`: the node role alone, for compute nodes. The same code as
//! `canopy node` (the modules below are `canopy`'s own, compiled into this
//! binary too), without the gateway, PromQL, gRPC and the clients, so the
//! binary is smaller and a node maps less of it (issue 3: the leaf's RSS).
//! Arguments parsed here, everything else in the crates.

// `config` also holds the gateway's file format and `plan`'s config
// writers, which this binary never calls.
#[allow(dead_code)]
#[path = "../config.rs"]
mod config;
#[path = "../node.rs"]
mod node;
#[path = "../selfmetrics.rs"]
mod selfmetrics;

use anyhow::Result;
use clap::Parser;

/// `canopy-node --config FILE`: `canopy node` in a node-only binary.
#[derive(Parser)]
#[command(
    name = "canopy-node",
    version,
    about = "Canopy's node daemon alone (the same as `canopy node`)"
)]
struct Cli {
    #[command(flatten)]
    node: node::NodeCli,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    node::init_logs();
    cli.node.run()
}
