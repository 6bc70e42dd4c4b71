//! `canopy`: the one binary of the fabric. Parses arguments and calls the
//! crates; the roles themselves live in the libraries.
#![allow(clippy::print_stdout)]

mod client;
mod config;
mod fabric;
mod jobs;
mod node;
mod report;
mod selfmetrics;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use canopy_topology::{PlanParams, parse_hostfile, parse_hostlist, plan, to_dot, to_json, to_text};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "canopy",
    version,
    about = "Canopy: a tree-overlay telemetry fabric for HPC and AI clusters"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
    Dot,
}

#[derive(Subcommand)]
enum Cmd {
    /// The whole fabric in one process on this machine: a gateway, a planned
    /// tree of simulated nodes and one real node reading this host.
    Up {
        /// Simulated nodes.
        #[arg(long, default_value_t = 64)]
        nodes: usize,
        /// Prometheus-compatible HTTP API (and dashboard) address.
        #[arg(long, default_value = "127.0.0.1:9700")]
        http: String,
        /// gRPC API address.
        #[arg(long, default_value = "127.0.0.1:9701")]
        grpc: String,
        /// Subtrees of the plan.
        #[arg(long, default_value_t = 8)]
        subtrees: usize,
        /// Sampling tick, ms.
        #[arg(long, default_value_t = 1000)]
        tick_ms: u64,
        /// Send every series to this Prometheus remote_write endpoint
        /// (`http://host:port/api/v1/write`); repeatable.
        #[arg(long = "remote-write", value_name = "URL")]
        remote_write: Vec<String>,
        /// Bearer token file for every --remote-write endpoint.
        #[arg(long, value_name = "FILE")]
        remote_write_bearer_file: Option<PathBuf>,
        /// PEM CA file the --remote-write endpoints' https certificates are
        /// checked against (default: public and system roots).
        #[arg(long, value_name = "FILE")]
        remote_write_ca: Option<PathBuf>,
        /// Require tokens from this file (lines made by `canopy token`).
        #[arg(long, value_name = "FILE")]
        tokens: Option<PathBuf>,
        /// Serve without tokens even beyond loopback (a loud warning).
        #[arg(long)]
        insecure: bool,
    },
    /// Print the plan for a host list, or write one config file per host.
    Plan {
        /// Slurm hostlist expression, e.g. `node[001-512,600]`.
        #[arg(long, conflicts_with = "hostfile")]
        hosts: Option<String>,
        /// File with one host or hostlist per line (`#` comments).
        #[arg(long)]
        hostfile: Option<PathBuf>,
        /// Redundant subtrees K.
        #[arg(long, default_value_t = 8)]
        subtrees: usize,
        /// Subtrees each host reports into, R.
        #[arg(long, default_value_t = 2)]
        replicas: usize,
        /// Children per relay, A.
        #[arg(long, default_value_t = 2)]
        arity: usize,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// Write `DIR/<host>.toml`, `DIR/gateway.toml` and certificates.
        #[arg(long)]
        emit_configs: Option<PathBuf>,
        /// With --emit-configs: every host a port on 127.0.0.1.
        #[arg(long)]
        loopback: bool,
        /// Gateway QUIC port (loopback hosts use the ports after it).
        #[arg(long, default_value_t = 7700)]
        base_port: u16,
        /// Gateway address for non-loopback configs; repeat it for several
        /// gateways (every subtree top then sends to all of them).
        #[arg(long, default_values_t = ["gateway:7700".to_string()])]
        gateway: Vec<String>,
        /// With --loopback: how many gateways (each a port on 127.0.0.1).
        #[arg(long, default_value_t = 1)]
        gateways: usize,
    },
    /// Make a cluster CA and a certificate per host (and the gateway).
    Certs {
        /// Hostlist expression of the hosts.
        #[arg(long)]
        hosts: String,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// The daemon on every compute node: collect, and relay for the plan's children.
    Node(node::NodeCli),
    /// A root gateway: receives every subtree, serves the APIs.
    Gateway {
        /// Config file (`gateway.toml`); without it, runs standalone.
        #[arg(long)]
        config: Option<PathBuf>,
        /// HTTP API address (overrides the config).
        #[arg(long)]
        http: Option<String>,
        /// gRPC API address (overrides the config).
        #[arg(long)]
        grpc: Option<String>,
        /// Keep a write-ahead log and snapshots here, so a restart loses
        /// nothing (overrides the config; default: memory only).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Live window kept, e.g. `2h`, `30m` (overrides the config; default 2h).
        #[arg(long)]
        retention: Option<String>,
        /// When the log is fsynced: always, tick (default), never.
        #[arg(long)]
        fsync: Option<String>,
        /// With --data-dir, keep sealed chunks in memory instead of the
        /// cold tier's files under DATA_DIR/cold.
        #[arg(long)]
        no_cold_tier: bool,
        /// Send every series to this Prometheus remote_write endpoint
        /// (`http://host:port/api/v1/write`); repeatable;
        /// replaces the config's `remote_write` list.
        #[arg(long = "remote-write", value_name = "URL")]
        remote_write: Vec<String>,
        /// Bearer token file for every --remote-write endpoint.
        #[arg(long, value_name = "FILE")]
        remote_write_bearer_file: Option<PathBuf>,
        /// PEM CA file the --remote-write endpoints' https certificates are
        /// checked against (default: public and system roots).
        #[arg(long, value_name = "FILE")]
        remote_write_ca: Option<PathBuf>,
        /// Require tokens from this file (overrides the config's `tokens`).
        /// Without tokens the gateway refuses to listen beyond loopback.
        #[arg(long, value_name = "FILE")]
        tokens: Option<PathBuf>,
        /// Serve without tokens even beyond loopback (a loud warning).
        #[arg(long)]
        insecure: bool,
        /// PEM certificate chain (leaf first) for TLS on the HTTP and gRPC
        /// APIs (overrides the config's `[api_tls]`); needs --api-key.
        #[arg(long, value_name = "FILE", requires = "api_key")]
        api_cert: Option<PathBuf>,
        /// PEM private key of --api-cert.
        #[arg(long, value_name = "FILE", requires = "api_cert")]
        api_key: Option<PathBuf>,
        /// PEM CA: API clients must present a certificate it signed
        /// (mutual TLS; overrides the config's `[api_tls] client_ca`).
        #[arg(long, value_name = "FILE", requires = "api_cert")]
        api_client_ca: Option<PathBuf>,
    },
    /// Make an access token: prints the secret once and the line for the
    /// gateway's tokens file (which holds only its SHA-256 hash).
    Token {
        /// admin (everything), scheduler (gRPC and every read, all users),
        /// or user (only series whose `user` label is --user).
        #[arg(long)]
        role: String,
        /// The user a `user` token is bound to.
        #[arg(long)]
        user: Option<String>,
        /// Also append the line to this tokens file (created 0600 if absent).
        #[arg(long, value_name = "FILE")]
        append: Option<PathBuf>,
    },
    /// A table of running and recent jobs with efficiency columns (like seff/cacct).
    Jobs {
        /// Only this user's jobs.
        #[arg(long)]
        user: Option<String>,
        /// Only this account's jobs.
        #[arg(long)]
        account: Option<String>,
        /// Only this partition's jobs.
        #[arg(long)]
        partition: Option<String>,
        /// Only jobs running on this node.
        #[arg(long)]
        node: Option<String>,
        /// Order: id, cpu (busiest), gpu, io, waste (most idle allocation).
        #[arg(long, value_enum, default_value = "id")]
        sort: report::JobSort,
        /// Running jobs only (default: also those ended in the last hour).
        #[arg(long)]
        running: bool,
        /// How to reach the gateway.
        #[command(flatten)]
        conn: GatewayConn,
    },
    /// Run a PromQL query against a gateway and print the answer as a table.
    Query {
        /// The PromQL expression.
        query: String,
        /// Evaluation time (unix seconds or RFC 3339; default now). With
        /// --range: the end of the range.
        #[arg(long)]
        time: Option<String>,
        /// A range query over this long before the time, e.g. `15m`.
        #[arg(long)]
        range: Option<String>,
        /// Step of a range query.
        #[arg(long, default_value = "15s")]
        step: String,
        /// How to reach the gateway.
        #[command(flatten)]
        conn: GatewayConn,
    },
    /// Run Prometheus-format PromQL test scripts against Canopy's engine.
    PromqlTest {
        /// Script files.
        files: Vec<PathBuf>,
        /// Print every failure.
        #[arg(long, short)]
        verbose: bool,
    },
}

/// How `canopy jobs` and `canopy query` reach a gateway's HTTP API.
#[derive(clap::Args, Debug)]
struct GatewayConn {
    /// The gateway's HTTP API (`http://` or `https://`).
    #[arg(long, default_value = "http://127.0.0.1:9700")]
    gateway: String,
    /// Access token of a gateway that requires one.
    #[arg(long, env = "CANOPY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// PEM CA file an https gateway's certificate is checked against
    /// (default: the public and system roots).
    #[arg(long, env = "CANOPY_CA", value_name = "FILE")]
    ca: Option<PathBuf>,
    /// PEM client certificate, for a gateway that requires one.
    #[arg(
        long,
        env = "CANOPY_CLIENT_CERT",
        value_name = "FILE",
        requires = "client_key"
    )]
    client_cert: Option<PathBuf>,
    /// PEM private key of --client-cert.
    #[arg(
        long,
        env = "CANOPY_CLIENT_KEY",
        value_name = "FILE",
        requires = "client_cert"
    )]
    client_key: Option<PathBuf>,
}

impl GatewayConn {
    /// A client of the gateway with these settings.
    fn connect(self) -> anyhow::Result<client::Gateway> {
        let tls = client::ClientTls {
            ca: self.ca,
            client: self.client_cert.zip(self.client_key),
        };
        Ok(client::Gateway::new(&self.gateway, &tls)?.with_token(self.token))
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    node::init_logs();
    match cli.cmd {
        Cmd::Up {
            nodes,
            http,
            grpc,
            subtrees,
            tick_ms,
            remote_write,
            remote_write_bearer_file,
            remote_write_ca,
            tokens,
            insecure,
        } => runtime()?.block_on(fabric::up(fabric::UpArgs {
            nodes,
            http: config::addr("--http", &http)?,
            grpc: config::addr("--grpc", &grpc)?,
            subtrees,
            tick_ms,
            remote_write: config::gateway::cli_endpoints(
                &remote_write,
                remote_write_bearer_file.as_deref(),
                remote_write_ca.as_deref(),
            )?,
            tokens,
            insecure,
        })),
        Cmd::Plan {
            hosts,
            hostfile,
            subtrees,
            replicas,
            arity,
            format,
            emit_configs,
            loopback,
            base_port,
            gateway,
            gateways,
        } => {
            let hosts = match (hosts, hostfile) {
                (Some(h), _) => parse_hostlist(&h)?,
                (None, Some(f)) => parse_hostfile(
                    &std::fs::read_to_string(&f)
                        .with_context(|| format!("reading {}", f.display()))?,
                )?,
                (None, None) => bail!("give --hosts EXPR or --hostfile FILE"),
            };
            let p = plan(
                &hosts,
                PlanParams {
                    subtrees,
                    replicas,
                    arity,
                },
            )?;
            if let Some(dir) = emit_configs {
                let a = config::Addressing {
                    loopback,
                    base_port,
                    gateways: if loopback { Vec::new() } else { gateway },
                    loopback_gateways: gateways.max(1),
                };
                fabric::emit_configs(&p, &dir, &a)?;
                println!(
                    "wrote {} node configs, the gateway configs and certs/ to {}",
                    hosts.len(),
                    dir.display()
                );
            } else {
                let out = match format {
                    Format::Text => to_text(&p),
                    Format::Json => to_json(&p),
                    Format::Dot => to_dot(&p),
                };
                println!("{out}");
            }
            Ok(())
        }
        Cmd::Certs { hosts, out } => {
            let hosts = parse_hostlist(&hosts)?;
            fabric::write_certs(&out, &hosts)?;
            println!(
                "wrote ca.pem and {} host certificates to {}",
                hosts.len() + 1,
                out.display()
            );
            Ok(())
        }
        Cmd::Node(args) => args.run(),
        Cmd::Gateway {
            config,
            http,
            grpc,
            data_dir,
            retention,
            fsync,
            no_cold_tier,
            remote_write,
            remote_write_bearer_file,
            remote_write_ca,
            tokens,
            insecure,
            api_cert,
            api_key,
            api_client_ca,
        } => runtime()?.block_on(fabric::gateway(
            config.as_deref(),
            fabric::GatewayArgs {
                http,
                grpc,
                data_dir,
                retention,
                fsync,
                no_cold_tier,
                remote_write: config::gateway::cli_endpoints(
                    &remote_write,
                    remote_write_bearer_file.as_deref(),
                    remote_write_ca.as_deref(),
                )?,
                tokens,
                insecure,
                api_tls: api_cert
                    .zip(api_key)
                    .map(|(cert, key)| fabric::ApiTlsFiles {
                        cert,
                        key,
                        client_ca: api_client_ca,
                    }),
            },
        )),
        Cmd::Token { role, user, append } => {
            print!("{}", jobs::token(&role, user, append.as_deref())?);
            Ok(())
        }
        Cmd::Jobs {
            conn,
            user,
            account,
            partition,
            node,
            sort,
            running,
        } => {
            let filter = jobs::filter(user, account, partition, node, running);
            let gw = conn.connect()?;
            print!("{}", jobs::jobs(&gw, &filter, sort)?);
            Ok(())
        }
        Cmd::Query {
            query,
            conn,
            time,
            range,
            step,
        } => {
            let gw = conn.connect()?;
            print!(
                "{}",
                jobs::query(&gw, &query, time.as_deref(), range.as_deref(), &step)?
            );
            Ok(())
        }
        Cmd::PromqlTest { files, verbose } => promql_test(&files, verbose),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

fn promql_test(files: &[PathBuf], verbose: bool) -> Result<()> {
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for f in files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let r = canopy_gateway::promql::testscript::run_script(&text);
        let reasons: Vec<String> = r
            .skip_reasons
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        println!(
            "{}: {} passed, {} failed, {} skipped{}",
            f.display(),
            r.passed,
            r.failed,
            r.skipped,
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join("; "))
            }
        );
        if verbose {
            for x in &r.failures {
                println!("  line {}: {}\n    {}", x.line, x.expr, x.message);
            }
        }
        passed += r.passed;
        failed += r.failed;
        skipped += r.skipped;
    }
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    Ok(())
}
