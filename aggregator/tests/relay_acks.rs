//! When a relay acknowledges its children's records, over real loopback
//! QUIC links in one process: a leaf's uplink, relays and gateways (real
//! `Relay`s and `Uplink`s). What is counted is ticks (frames a gateway
//! received), never wall-clock durations; the timeouts are guards only.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use canopy_aggregator::merge::{MergeConfig, NullSink, Sink};
use canopy_aggregator::relay::{Relay, RelayConfig};
use canopy_proto::codec::{BoundsPolicy, CodecConfig, Sender};
use canopy_proto::link::{
    Ca, Dialer, Identity, LinkTuning, Listener, Uplink, UplinkConfig, UplinkEncoder, UplinkTarget,
};
use canopy_proto::{Labels, MetricKind};
use tokio::sync::watch;

/// Generous guard so a broken path fails the test instead of hanging it.
const GUARD: Duration = Duration::from_secs(60);

async fn guard<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(GUARD, fut).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: not within {GUARD:?}"),
    }
}

/// Polls `f` every few ms until it holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    guard(what, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("addr")
}

/// Timestamps of the leaf's `ticks_total` samples a gateway stored.
#[derive(Default)]
struct Seen(Vec<i64>);

impl Sink for Seen {
    fn sample(&mut self, _: &str, labels: &Labels, ts_ms: i64, _: f64) {
        if labels.name() == "ticks_total" {
            self.0.push(ts_ms);
        }
    }
    fn heartbeat(&mut self, _: &str, _: i64, _: u32) {}
    fn retire(&mut self, _: &str, _: &Labels, _: i64) {}
}

fn relay_cfg(tick: Duration) -> RelayConfig {
    RelayConfig {
        tick,
        merge: MergeConfig::default(),
        codec: CodecConfig::default(),
    }
}

/// A gateway (a relay without uplinks, acking on receipt) on `name`.
fn gateway(ca: &Ca, name: &str, sd: &watch::Receiver<bool>) -> (Relay<Seen>, UplinkTarget) {
    let (target, start) = gateway_later(ca, name, sd);
    (start(), target)
}

/// A gateway bound on `name` that reads (and acks) nothing until `start`
/// is called: peers complete their handshake and queue their records.
fn gateway_later(
    ca: &Ca,
    name: &str,
    sd: &watch::Receiver<bool>,
) -> (UplinkTarget, impl FnOnce() -> Relay<Seen>) {
    let id = ca.identity(name).expect("cert");
    let l = Listener::bind(loopback(), &id, LinkTuning::default()).expect("bind");
    let target = UplinkTarget {
        name: name.into(),
        addr: l.local_addr(),
    };
    let sd = sd.clone();
    let start = move || {
        let r = Relay::new(relay_cfg(Duration::from_secs(1)), Seen::default());
        r.spawn_listener(l, sd.clone());
        r.spawn_ticker(Vec::new(), sd);
        r
    };
    (target, start)
}

/// A parent that takes every record and never acknowledges one.
fn mute_gateway(ca: &Ca, name: &str) -> UplinkTarget {
    let id = ca.identity(name).expect("cert");
    let l = Listener::bind(loopback(), &id, LinkTuning::default()).expect("bind");
    let target = UplinkTarget {
        name: name.into(),
        addr: l.local_addr(),
    };
    tokio::spawn(async move {
        while let Some(link) = l.accept().await {
            let Ok(link) = link else { continue };
            tokio::spawn(async move { while let Ok(Some(_)) = link.recv_record().await {} });
        }
    });
    target
}

fn dialer(id: &Identity) -> Arc<Dialer> {
    Arc::new(Dialer::new(loopback(), id, LinkTuning::default()).expect("dialer"))
}

/// A relay named `name` ticking every `tick`, with one uplink per parent.
fn relay(
    ca: &Ca,
    name: &str,
    tick: Duration,
    parents: &[UplinkTarget],
    ack_timeout: Duration,
    sd: &watch::Receiver<bool>,
) -> (Relay<NullSink>, Vec<Uplink>, UplinkTarget) {
    let id = ca.identity(name).expect("cert");
    let l = Listener::bind(loopback(), &id, LinkTuning::default()).expect("bind");
    let target = UplinkTarget {
        name: name.into(),
        addr: l.local_addr(),
    };
    let d = dialer(&id);
    let ups: Vec<Uplink> = parents
        .iter()
        .map(|p| {
            Uplink::spawn(
                d.clone(),
                UplinkConfig {
                    ack_timeout,
                    ..UplinkConfig::new(p.clone(), None)
                },
            )
        })
        .collect();
    let r = Relay::new(relay_cfg(tick), NullSink);
    r.spawn_listener(l, sd.clone());
    r.spawn_ticker(ups.clone(), sd.clone());
    (r, ups, target)
}

/// A leaf sending one tick of `ticks_total` to `parent`; its uplink.
async fn leaf_sends_one_tick(ca: &Ca, parent: &UplinkTarget) -> Uplink {
    let id = ca.identity("leaf").expect("cert");
    let up = Uplink::spawn(
        dialer(&id),
        UplinkConfig {
            ack_timeout: Duration::ZERO,
            ..UplinkConfig::new(parent.clone(), None)
        },
    );
    until("the leaf connects", || up.is_connected()).await;
    let mut tx = Sender::new(BoundsPolicy::default());
    let src = tx.source("leaf", 1000);
    let ts = canopy_proto::link::unix_now_ms();
    tx.begin_tick(ts);
    tx.tick_source(src, ts);
    let l = Labels::metric("ticks_total", [("node", "leaf")]);
    tx.observe(src, &l, MetricKind::Counter, 1.0);
    let (table, cs) = tx.finish_tick();
    UplinkEncoder::new(&CodecConfig::default()).emit(&up, table, cs);
    up
}

fn acked(up: &Uplink) -> u64 {
    up.buffer().2.acked_records
}

fn frames_in<S: Sink + Send + 'static>(g: &Relay<S>) -> u64 {
    g.with_merger(|m| m.stats().frames_in)
}

/// Hole (c): a relay forwards its parent's ack as soon as it arrives, not
/// on its next tick (one tick of replay-buffer hold per tree level). The
/// leaf's record goes up in one relay tick; its ack must reach the leaf
/// before the relay's next tick (the gateway has received no further
/// frame from it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_forwards_its_parents_ack_without_waiting_for_its_next_tick() {
    let ca = Ca::generate("test cluster CA").expect("ca");
    let (_sd_tx, sd) = watch::channel(false);
    let (gw, gw_at) = gateway(&ca, "gw", &sd);
    // A long tick, so that "before the next tick" is not a race.
    let (_mid, _ups, mid_at) = relay(
        &ca,
        "mid",
        Duration::from_secs(3),
        &[gw_at],
        Duration::from_secs(30),
        &sd,
    );
    let leaf = leaf_sends_one_tick(&ca, &mid_at).await;
    until("the gateway stores the leaf's sample", || {
        gw.with_sink(|s| !s.0.is_empty())
    })
    .await;
    let carried = frames_in(&gw);
    until("the leaf's record is acked", || acked(&leaf) >= 1).await;
    let at_ack = frames_in(&gw);
    assert_eq!(
        at_ack, carried,
        "the ack waited for the relay's next tick ({carried} frames at the gateway when the record arrived, {at_ack} when the leaf got its ack)"
    );
}

/// Hole (a): a subtree top with two gateways acks its child's record only
/// once every live gateway holds it. Gateway A acks; gateway B takes the
/// records but does not ack (yet live: not past the top's ack timeout), so
/// the child keeps the record to replay should the top die: B would have
/// it from nowhere else. Once the top leaves B for an ack stall, B is out
/// of the live set (its share waits in the top's uplink to B) and the
/// child's record is acked on A's word alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subtree_top_acks_only_what_every_live_gateway_holds() {
    let ca = Ca::generate("test cluster CA").expect("ca");
    let (_sd_tx, sd) = watch::channel(false);
    let (a_at, start_a) = gateway_later(&ca, "gw-a", &sd);
    let b_at = mute_gateway(&ca, "gw-b");
    // The rule counts *live* gateways, and one that was out rejoins only
    // once it caught up with what the others acked. If A acked a tick of
    // the top before the top reached B, B (which never acks) would stay out
    // for good and A alone would decide: by design, but not this test's
    // premise. So A reads nothing until the top has reached B.
    let (_top_sd_tx, top_sd) = watch::channel(false);
    let (_top, ups, top_at) = relay(
        &ca,
        "top",
        Duration::from_millis(300),
        &[a_at, b_at],
        Duration::from_secs(8),
        &top_sd,
    );
    until("the top reaches B", || ups[1].is_live()).await;
    assert_eq!(ups[0].acked_tag(), 0, "A acked before it was started");
    let gw_a = start_a();
    until("the top reaches both gateways", || {
        ups.iter().all(|u| u.is_live())
    })
    .await;
    let leaf = leaf_sends_one_tick(&ca, &top_at).await;
    until("gateway A stores the leaf's sample", || {
        gw_a.with_sink(|s| !s.0.is_empty())
    })
    .await;
    // Three more top ticks: A acked the tick that carried the record, and
    // the top had ticks to pass that on.
    let carried = frames_in(&gw_a);
    until("three more top ticks", || frames_in(&gw_a) >= carried + 3).await;
    assert!(ups[0].acked_tag() > 0, "gateway A acks");
    assert_eq!(ups[1].acked_tag(), 0, "gateway B acks nothing");
    assert_eq!(
        ups[1]
            .stats()
            .ack_stalls
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "B is not yet past the top's ack timeout (inconclusive run)"
    );
    assert!(ups[1].is_live());
    assert_eq!(
        acked(&leaf),
        0,
        "acked while a live gateway (B) does not hold the record"
    );
    until("the top leaves B for an ack stall", || {
        ups[1]
            .stats()
            .ack_stalls
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    })
    .await;
    until("the leaf's record is acked on A's word", || {
        acked(&leaf) >= 1
    })
    .await;
    assert!(!ups[1].is_live(), "B is out of the live set");
    assert_eq!(ups[1].acked_tag(), 0, "B still holds nothing for good");
}
