//! `wire-cost`: bytes per sample of Canopy's wire on a recorded trace.
//!
//! `encode` runs one sender on one link exactly as a node would (one frame
//! per `# SCRAPE`, default settings) and writes the records as they go on the
//! wire; `decode` runs the receiver on those bytes and writes the
//! reconstructed trace; `check` compares a decoded trace with the original
//! under the error bounds.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use canopy_benches::{trace, wire};
use canopy_proto::codec::{BoundsPolicy, CodecConfig};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Measure Canopy's wire cost on a metric trace")]
struct Cli {
    /// zstd level (default: the codec's default).
    #[arg(long, global = true)]
    level: Option<i32>,
    /// Keyframe interval in seconds (default: the codec's default, 60).
    #[arg(long, global = true)]
    keyframe_secs: Option<i64>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Trace in, wire records out.
    Encode {
        /// Trace file (plain, or zstd when the name ends in .zst).
        #[arg(long)]
        trace: PathBuf,
        /// Where to write the frames (length-prefixed records).
        #[arg(long)]
        out: PathBuf,
    },
    /// Wire records in, reconstructed trace out.
    Decode {
        /// Frames written by `encode`.
        #[arg(long)]
        frames: PathBuf,
        /// Where to write the reconstructed trace.
        #[arg(long)]
        out: PathBuf,
    },
    /// Compare a decoded trace with the original; fails on any violation.
    Check {
        /// The original trace.
        #[arg(long)]
        trace: PathBuf,
        /// The decoded trace.
        #[arg(long)]
        decoded: PathBuf,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let mut cfg = CodecConfig::default();
    if let Some(l) = cli.level {
        cfg.zstd_level = l;
    }
    if let Some(k) = cli.keyframe_secs {
        cfg.keyframe_interval_ms = k * 1000;
    }
    match cli.cmd {
        Cmd::Encode { trace: t, out } => {
            let scrapes = trace::read_file(&t)?;
            let bytes = wire::encode(&scrapes, &cfg, BoundsPolicy::default())?;
            std::fs::write(&out, &bytes).with_context(|| format!("writing {}", out.display()))?;
            summary(
                "encode",
                wire::sample_count(&scrapes),
                bytes.len(),
                scrapes.len(),
            );
        }
        Cmd::Decode { frames, out } => {
            let bytes =
                std::fs::read(&frames).with_context(|| format!("reading {}", frames.display()))?;
            let decoded = wire::decode(&bytes, &cfg)?;
            let mut text = String::new();
            for (ts, series) in &decoded {
                trace::write_scrape(&mut text, *ts, series);
            }
            std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
            let samples = decoded.iter().map(|d| d.1.len() as u64).sum();
            summary("decode", samples, bytes.len(), decoded.len());
        }
        Cmd::Check { trace: t, decoded } => {
            let orig = trace::read_file(&t)?;
            let dec: Vec<wire::Decoded> = trace::read_file(&decoded)?
                .into_iter()
                .map(|s| {
                    (
                        s.ts_ms,
                        s.samples.into_iter().map(|(l, _, v)| (l, v)).collect(),
                    )
                })
                .collect();
            let r = wire::check(&orig, &dec, &BoundsPolicy::default());
            println!(
                "check: {} samples, {} bound violations, {} counter decreases, {} shape mismatches",
                r.samples, r.violations, r.monotonic_violations, r.shape_mismatches
            );
            for e in &r.examples {
                println!("  {e}");
            }
            if r.violations + r.monotonic_violations + r.shape_mismatches > 0 {
                bail!("decoded trace violates the bounds");
            }
        }
    }
    Ok(())
}

fn summary(what: &str, samples: u64, bytes: usize, frames: usize) {
    println!(
        "{what}: {samples} samples, {frames} frames, {bytes} bytes, {:.4} bytes/sample",
        bytes as f64 / samples.max(1) as f64
    );
}
