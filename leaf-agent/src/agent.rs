//! The sampler loop: one tick, every collector, one frame of changes per link.
//!
//! The I/O shell over the pure parts: it reads the clock, runs the
//! collectors, feeds the codec's [`Sender`] (quantise once per tick) and
//! encodes the tick's changeset once per output: planned uplinks (QUIC, with
//! failover) and, on a relaying node, the node's own relay as an in-memory
//! child link.

use std::time::Duration;

use canopy_proto::codec::{BoundsPolicy, CodecConfig, LinkEncoder, Sender, record};
use canopy_proto::link::{Uplink, UplinkEncoder, unix_now_ms};
use tokio::sync::{mpsc, watch};

use crate::collect::{Collector, Observation, Sink};
use crate::ticker::Ticker;

/// Where a leaf's frames go.
#[derive(Debug)]
pub enum Output {
    /// A planned uplink to a parent (with failover).
    Uplink(Uplink),
    /// The node's own relay, as an in-memory child link (record payloads).
    Local(mpsc::Sender<Vec<u8>>),
}

/// Settings of one leaf agent.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Node name: the source name of every series.
    pub node: String,
    /// Sampling tick.
    pub tick: Duration,
    /// Error bounds.
    pub bounds: BoundsPolicy,
    /// Codec tunables.
    pub codec: CodecConfig,
}

/// An output with its encoder.
enum OutState {
    Uplink(Uplink, UplinkEncoder),
    Local(mpsc::Sender<Vec<u8>>, Option<LinkEncoder>),
}

/// Runs the sampler until `shutdown` turns true.
pub async fn run(
    cfg: AgentConfig,
    mut collectors: Vec<Box<dyn Collector + Send>>,
    outputs: Vec<Output>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut sender = Sender::new(cfg.bounds.clone());
    let tick_ms = u32::try_from(cfg.tick.as_millis()).unwrap_or(u32::MAX);
    let src = sender.source(&cfg.node, tick_ms);
    let mut outs: Vec<OutState> = outputs
        .into_iter()
        .map(|out| match out {
            Output::Uplink(u) => OutState::Uplink(u, UplinkEncoder::new(&cfg.codec)),
            Output::Local(tx) => OutState::Local(tx, None),
        })
        .collect();
    let mut obs: Vec<Observation> = Vec::new();
    let mut warned: Vec<(&'static str, i64)> = Vec::new();
    // One wake-up a tick (see `ticker`).
    let mut ticker = Ticker::new(cfg.tick);
    loop {
        tokio::select! {
            () = ticker.tick() => {}
            _ = shutdown.changed() => break,
        }
        if *shutdown.borrow() {
            break;
        }
        let ts = unix_now_ms();
        obs.clear();
        sender.begin_tick(ts);
        sender.tick_source(src, ts);
        for c in &mut collectors {
            c.set_tick_time(ts);
            let r = c.collect_into(&mut Sink::new(&mut sender, src, &mut obs));
            if let Err(e) = r {
                // One line per collector per minute, not a flood.
                let name = c.name();
                let last = warned.iter_mut().find(|w| w.0 == name);
                let due = last.as_ref().is_none_or(|w| ts - w.1 >= 60_000);
                if due {
                    tracing::warn!(collector = name, error = %e, "collector failed");
                    match last {
                        Some(w) => w.1 = ts,
                        None => warned.push((name, ts)),
                    }
                }
            }
        }
        for o in &obs {
            sender.observe(src, &o.labels, o.kind, o.value);
        }
        let (table, cs) = sender.finish_tick();
        for o in &mut outs {
            emit(o, &cfg.codec, table, cs).await;
        }
        sender.end_tick();
    }
}

async fn emit(
    o: &mut OutState,
    codec: &CodecConfig,
    table: &canopy_proto::codec::SeriesTable,
    cs: &canopy_proto::codec::Changeset,
) {
    match o {
        // Connected or not: the uplink buffers while no parent takes it.
        OutState::Uplink(u, enc) => enc.emit(u, table, cs),
        OutState::Local(tx, enc) => {
            if enc.is_none() {
                *enc = LinkEncoder::new(codec).ok();
            }
            let Some(e) = enc.as_mut() else { return };
            let mut rec = Vec::new();
            if let Err(e) = e.encode(table, cs, &mut rec) {
                tracing::warn!(error = %e, "encoding for the local relay failed");
                *enc = None;
                return;
            }
            let Ok(Some((len, pre))) = record::read_prefix(&rec, usize::MAX) else {
                return;
            };
            rec.drain(..pre);
            rec.truncate(len);
            if tx.send(rec).await.is_err() {
                *enc = None;
            }
        }
    }
}
