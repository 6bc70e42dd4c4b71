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
    init_logs();
    cli.node.run()
}

/// Logs on stderr as `canopy node` writes them, filtered by `RUST_LOG`
/// read as `target=level` directives (`info,quinn=warn` unless set).
/// `Targets` rather than `EnvFilter`: the span and field filters of the
/// latter bring a regex engine into a binary every compute node maps.
fn init_logs() {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let default = || {
        Targets::new()
            .with_default(tracing::Level::INFO)
            .with_target("quinn", tracing::Level::WARN)
    };
    let env = std::env::var("RUST_LOG").ok();
    let parsed = env.as_deref().map(str::parse::<Targets>);
    let filter = match &parsed {
        Some(Ok(t)) => t.clone(),
        _ => default(),
    };
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(filter)
        .init();
    if let Some(Err(e)) = parsed {
        tracing::warn!(error = %e, rust_log = ?env, "RUST_LOG is not a list of target=level directives: using info,quinn=warn");
    }
}
